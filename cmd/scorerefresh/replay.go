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
	"github.com/scorerefresh/scorerefresh/replay"
)

// Exit codes of `replay` besides 0, 1 and 2 (usage).
const exitNotDrained = 3 // --drain stopped with entries left: the backlog did not drain

// runReplay is `scorerefresh replay --in FILE|DIR [flags]` and
// `scorerefresh replay compare A.json B.json`.
func runReplay(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runCompare("scorerefresh replay compare", args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("scorerefresh replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o replay.Options
	o.Register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Embedded {
		fmt.Fprintln(stderr, "scorerefresh replay: --embedded is not in this binary: the production build does not link the embedded server.\n"+
			"Run the demo build with the same flags instead:\n  go run ./cmd/scorerefresh-demo replay --embedded "+o.In)
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "scorerefresh replay: %v\n", err)
		return 2
	}
	cfg, err := config.Parse(append(environ, "LOG_LEVEL="+o.LogLevel))
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh replay: %v\n", err)
		return 2
	}
	// The replay's consumer serves metrics only when asked: a replay often
	// runs next to a service that holds METRICS_ADDR.
	cfg.MetricsAddr = o.MetricsAddr
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return replayInto(ctx, o, cfg, config.RedactURI(cfg.MongoURI), stdout, stderr)
}

// replayInto runs a replay against cfg's server.
func replayInto(ctx context.Context, o replay.Options, cfg config.Config, server string, stdout, stderr io.Writer) int {
	level, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	svc, err := app.New(ctx, cfg, app.Options{Logger: log, Version: version, Revision: revision})
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh replay: %v\n", err)
		return 2
	}
	defer svc.Close(context.Background())
	r, err := replay.Replay(ctx, o, replay.Target{
		DB: svc.DB, Queue: cfg.QueueCollection, Claims: cfg.ClaimsCollection, DeadLetter: cfg.DeadLetterCollection, Scores: cfg.ScoresCollection,
		Consumer: svc, Metrics: svc.Metrics, Rules: svc.Rules,
		Settings: replay.Settings{
			Server: server, Database: cfg.Database, RefreshConcurrency: cfg.RefreshConcurrency, MaxUsersInFlight: cfg.MaxUsersInFlight,
			ClaimWindow: cfg.ClaimWindow, AdaptiveConcurrency: cfg.AdaptiveConcurrency, MaxAttempts: cfg.MaxAttempts,
			Rules: svc.Rules.Source, Components: len(svc.Rules.Components), Version: version,
		},
	}, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh replay: %v\n", err)
		return 1
	}
	if r != nil && !r.Drained {
		return exitNotDrained
	}
	return 0
}

// runCompare prints two drain reports side by side.
func runCompare(name string, args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintf(stderr, "usage: %s A.json B.json (report files or their directories)\n", name)
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
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
