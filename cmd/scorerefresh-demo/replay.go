package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/scorerefresh/scorerefresh/cmd/internal/app"
	"github.com/scorerefresh/scorerefresh/cmd/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
	"github.com/scorerefresh/scorerefresh/replay"
)

// runReplay is `scorerefresh-demo replay`: the production binary's replay
// with the same flags, plus the one it cannot offer, --embedded, which
// replays into a fresh embedded server so no MongoDB is needed.
func runReplay(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(args[1:], stdout, stderr)
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
		server = config.RedactURI(cfg.MongoURI)
	}
	level, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	svc, err := app.New(ctx, cfg, app.Options{Logger: log, Version: "demo"})
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo replay: %v\n", err)
		return 2
	}
	defer svc.Close(context.Background())
	r, err := replay.Replay(ctx, o, replay.Target{
		DB: svc.DB, Queue: cfg.QueueCollection, Claims: cfg.ClaimsCollection, DeadLetter: cfg.DeadLetterCollection, Scores: cfg.ScoresCollection,
		Consumer: svc, Metrics: svc.Metrics, Rules: svc.Rules,
		Settings: replay.Settings{
			Server: server, Database: cfg.Database, RefreshConcurrency: cfg.RefreshConcurrency, MaxUsersInFlight: cfg.MaxUsersInFlight,
			ClaimWindow: cfg.ClaimWindow, AdaptiveConcurrency: cfg.AdaptiveConcurrency, MaxAttempts: cfg.MaxAttempts,
			Rules: svc.Rules.Source, Components: len(svc.Rules.Components), Version: "demo",
		},
	}, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo replay: %v\n", err)
		return 1
	}
	if r != nil && !r.Drained {
		return 3 // as scorerefresh replay: the backlog did not drain
	}
	return 0
}

func runCompare(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: scorerefresh-demo replay compare A.json B.json")
		return 2
	}
	a, err := replay.ReadReport(args[0])
	if err == nil {
		var b *replay.Report
		if b, err = replay.ReadReport(args[1]); err == nil {
			err = replay.Compare(stdout, a, b, "A: "+args[0], "B: "+args[1])
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo replay compare: %v\n", err)
		return 1
	}
	return 0
}
