// Command scorerefresh-demo runs the real service, wired as `scorerefresh run`
// wires it, against an embedded MongoDB-compatible server (FerretDB, SQLite,
// in-process) the production binary does not link: it seeds a backlog of one
// firehose user and many distinct users, drains it and checks every score
// against the seeded data (or what the --scorer-example HTTP scorer computes).
// `replay` and `serve` are its other commands (docs/replay.md, README.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/replaycmd"
	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

type demoOptions struct {
	entries, users int
	firehose       float64
	seed           uint64
	dataDir        string
	scorer         scorerExample // --scorer-example: drain through examples/ instead of the rules
}

// register defines the flags of the backlog and its server, which the demo
// and serve share; dataHelp is -data's help text.
func (o *demoOptions) register(fs *flag.FlagSet, dataHelp string) {
	fs.IntVar(&o.entries, "entries", 3000, "queue entries to seed")
	fs.IntVar(&o.users, "users", 300, "distinct users besides the firehose user")
	fs.Float64Var(&o.firehose, "firehose", 0.5, "fraction of entries that belong to the one firehose user")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of the backlog")
	fs.StringVar(&o.dataDir, "data", "", dataHelp)
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "replay" { // the production binary's replay, plus --embedded: a fresh embedded server
		return replaycmd.Main(replaycmd.Build{Name: "scorerefresh-demo replay", Version: "demo",
			Embedded: func(ctx context.Context) (replaycmd.Server, error) { return embedmongo.Start(ctx, embedmongo.Config{}) },
		}, args[1:], environ, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve" {
		return runServe(args[1:], environ, stdout, stderr)
	}
	fs := flag.NewFlagSet("scorerefresh-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demoOptions
	o.register(fs, "keep the embedded server's SQLite files here (default: a temporary directory)")
	logLevel := fs.String("log-level", "warn", "the service's log level (its JSON lines go to stderr)")
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of the whole run (server included) to this file")
	fs.Var(&o.scorer, "scorer-example", "drain through an example HTTP scorer instead of the rules: node (examples/nodescorer, the default) or go (examples/httpscorer)")
	if err := fs.Parse(args); err != nil || takeScorerExampleArg(fs, &o.scorer) != nil {
		return 2
	}
	// The rest of the service's configuration comes from the environment as
	// in production (REFRESH_CONCURRENCY=4 go run ./cmd/scorerefresh-demo),
	// except where the demo must decide: its own server, a free metrics port.
	environ = append(environ, "METRICS_ADDR=127.0.0.1:0", "LOG_LEVEL="+*logLevel, "POLL_INTERVAL=200ms")
	cfg, err := config.Parse(environ)
	switch {
	case o.entries <= 0 || o.users <= 0 || o.firehose < 0 || o.firehose > 1:
		err = errors.New("-entries and -users must be positive, -firehose within [0, 1]")
	case err == nil && o.scorer != "" && (cfg.ScoringRules != "" || cfg.ScorerURL != ""):
		err = errors.New("--scorer-example brings its own scorer: unset SCORING_RULES and SCORER_URL")
	}
	if err == nil && *cpuProf != "" {
		var f *os.File
		if f, err = os.Create(*cpuProf); err == nil {
			defer f.Close()
			err = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := demo(ctx, cfg, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo: %v\n", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context, cfg config.Config, o demoOptions, stdout, stderr io.Writer) error {
	srv, err := embedmongo.Start(ctx, embedmongo.Config{Dir: o.dataDir})
	if err != nil {
		return err
	}
	defer srv.Close()
	cfg.MongoURI = srv.URI()
	fmt.Fprintf(stdout, "embedded MongoDB-compatible server (FerretDB, SQLite) at %s\n", srv.URI())
	ctx, stopScorer, err := withScorerExample(ctx, &cfg, o.scorer, srv.URI(), stdout, stderr)
	if err != nil {
		return err
	}
	defer stopScorer()

	level, _ := config.ParseLogLevel(cfg.LogLevel)
	svc, err := app.New(ctx, cfg, app.Options{Logger: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})), Version: "demo"})
	if err != nil {
		return err
	}
	defer svc.Close(context.Background())
	b := newBacklog(o)
	seedStart := time.Now()
	if err := b.seed(ctx, svc.DB, cfg); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seeded %d entries for %d distinct users (%.0f%% from one firehose user) and %d source documents in %s\n",
		len(b.entries), len(b.want), o.firehose*100, len(b.activity), time.Since(seedStart).Round(time.Millisecond))
	fmt.Fprintf(stdout, "metrics, health: http://%s/metrics /healthz /readyz\n", svc.MetricsAddr())
	fmt.Fprintf(stdout, "draining with REFRESH_CONCURRENCY=%d MAX_USERS_IN_FLIGHT=%d CLAIM_WINDOW=%d\n",
		cfg.RefreshConcurrency, cfg.MaxUsersInFlight, cfg.ClaimWindow)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()

	start := time.Now()
	end, err := untilDrained(ctx, svc, stdout, start, done)
	cancel()
	if runErr := <-done; runErr != nil && err == nil {
		err = runErr
	}
	if exited, ok := context.Cause(ctx).(scorerExitError); ok && (err != nil || end.IsZero()) {
		return exited
	}
	if err != nil {
		return err
	}
	if end.IsZero() {
		fmt.Fprintln(stdout, "interrupted before the queue drained")
		return nil
	}
	summary(svc, stdout, end.Sub(start).Seconds(), len(b.entries), len(b.want))
	return verify(ctx, svc, b, o.scorer != "", stdout)
}

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
