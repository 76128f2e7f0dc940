package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/replaycmd"
	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/replay"
)

// runReplay is `scorerefresh-demo replay`: the production binary's replay
// with the same flags, plus the one it cannot offer, --embedded, which
// replays into a fresh embedded server so no MongoDB is needed.
func runReplay(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return replaycmd.Compare("scorerefresh-demo replay compare", args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("scorerefresh-demo replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o replay.Options
	o.Register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo replay: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	server := ""
	if o.Embedded {
		srv, err := embedmongo.Start(ctx, embedmongo.Config{})
		if err != nil {
			fmt.Fprintf(stderr, "scorerefresh-demo replay: %v\n", err)
			return 1
		}
		defer srv.Close()
		environ = append(environ, "MONGODB_URI="+srv.URI())
		server = "embedded FerretDB (SQLite)"
		fmt.Fprintf(stdout, "embedded MongoDB-compatible server (FerretDB, SQLite) at %s\n", srv.URI())
	}
	cfg, err := config.Parse(append(environ, "LOG_LEVEL="+o.LogLevel))
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo replay: %v\n", err)
		return 2
	}
	// The replay's consumer serves metrics only when asked: a replay often
	// runs next to a service that holds METRICS_ADDR.
	cfg.MetricsAddr = o.MetricsAddr
	if server == "" {
		server = redact.URI(cfg.MongoURI)
	}
	return replaycmd.Run(ctx, replaycmd.Build{Name: "scorerefresh-demo replay", Version: "demo"}, o, cfg, server, stdout, stderr)
}
