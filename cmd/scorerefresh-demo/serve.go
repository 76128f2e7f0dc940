package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
)

const serveUsage = `usage: scorerefresh-demo serve [-addr HOST:PORT] [-entries N] [-users N] [-firehose F] [-seed N] [-data DIR]

Starts the embedded MongoDB-compatible server (FerretDB, SQLite), seeds the
demo's backlog and source documents, prints the MONGODB_URI to use, and
keeps serving until interrupted: the scorerefresh binary's commands (run,
status, doctor, deadletters, snapshot) then have a server to talk to on a
machine without MongoDB.
`

// runServe is `scorerefresh-demo serve`.
func runServe(args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scorerefresh-demo serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), serveUsage); fs.PrintDefaults() }
	var o demoOptions
	addr := fs.String("addr", "127.0.0.1:27017", "listen address (loopback; :0 for a free port)")
	o.register(fs, "keep the SQLite files here (default: a temporary directory, removed at the end)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || o.entries < 0 || o.users <= 0 || o.firehose < 0 || o.firehose > 1 {
		fmt.Fprintf(stderr, "scorerefresh-demo serve: takes no arguments; -entries ≥ 0, -users > 0, -firehose within [0, 1]\n\n%s", serveUsage)
		return 2
	}
	cfg, err := config.Parse(environ)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo serve: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, cfg, o, *addr, stdout); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo serve: %v\n", err)
		return 1
	}
	return 0
}

// serve runs the embedded server with the demo's data until ctx ends.
func serve(ctx context.Context, cfg config.Config, o demoOptions, addr string, stdout io.Writer) error {
	srv, err := embedmongo.Start(ctx, embedmongo.Config{Dir: o.dataDir, Addr: addr})
	if err != nil {
		return err
	}
	defer srv.Close()
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		return fmt.Errorf("connecting to the embedded server: %w", err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	if o.entries > 0 {
		b := newBacklog(o)
		if err := b.seed(ctx, client.Database(cfg.Database), cfg); err != nil {
			return fmt.Errorf("seeding the backlog: %w", err)
		}
		fmt.Fprintf(stdout, "seeded %d entries for %d distinct users and %d source documents in database %s\n",
			len(b.entries), len(b.want), len(b.activity), cfg.Database)
	}
	fmt.Fprintf(stdout, "MONGODB_URI=%s\n", srv.URI())
	fmt.Fprintf(stdout, "try, in another shell:\n  export MONGODB_URI=%s MONGODB_DATABASE=%s\n  go run ./cmd/scorerefresh status\n  go run ./cmd/scorerefresh doctor\n  go run ./cmd/scorerefresh run\nserving until interrupted\n", srv.URI(), cfg.Database)
	<-ctx.Done()
	return nil
}
