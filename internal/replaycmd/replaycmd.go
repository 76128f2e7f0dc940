// Package replaycmd is the part of `replay` that the production binary and
// the demo build share: wiring the service to a replay, and `replay compare`.
// Only where the MongoDB comes from differs between them (the demo can start
// an embedded server; production cannot link one).
package replaycmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/replay"
)

// ExitNotDrained is replay's exit code when --drain stopped with entries
// left: the backlog did not drain. 0, 1 (error) and 2 (usage) as usual.
const ExitNotDrained = 3

// Build names the binary running the replay, for messages and the report.
type Build struct {
	Name              string // e.g. "scorerefresh replay"
	Version, Revision string
}

const help = `usage: %[1]s --in FILE|DIR [--drain] [flags]
       %[1]s compare A.json B.json

Loads a snapshot (scorerefresh snapshot), a generated backlog (scorerefresh
backlog generate) or a mongoexport file of the queue into the configured
MongoDB; with --drain, runs the consumer in-process until the queue is empty
and writes a drain report (docs/replay.md). It reads the same environment as
"scorerefresh run". compare sets two drain reports side by side.

flags:
`

// ParseFlags reads replay's flags (the arguments after "replay") and checks
// them. When ok is false the command stops with exit code code: 0 after the
// help (on stdout), 2 after saying on stderr what is wrong.
func ParseFlags(name string, args []string, stdout, stderr io.Writer) (o replay.Options, code int, ok bool) {
	fs := cli.NewFlagSet(name, fmt.Sprintf(help, name), stderr)
	o.Register(fs)
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return o, code, false
	}
	if err := o.Validate(); err != nil {
		return o, cli.Refuse(fs, "%v", err), false
	}
	return o, 0, true
}

// ServiceConfig is the configuration of the replay's consumer: the
// environment's, at the replay's log level, serving metrics only where
// --metrics-addr asks (a replay often runs next to a service that holds
// METRICS_ADDR). ok is false, after saying why on stderr, when it is wrong.
func ServiceConfig(name string, environ []string, o replay.Options, stderr io.Writer) (cfg config.Config, ok bool) {
	cfg, err := config.Parse(append(environ, "LOG_LEVEL="+o.LogLevel))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return cfg, false
	}
	cfg.MetricsAddr = o.MetricsAddr
	return cfg, true
}

// Run replays into cfg's server, described as server in the report, and
// returns the exit code.
func Run(ctx context.Context, b Build, o replay.Options, cfg config.Config, server string, stdout, stderr io.Writer) int {
	level, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	svc, err := app.New(ctx, cfg, app.Options{Logger: log, Version: b.Version, Revision: b.Revision})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", b.Name, err)
		return 2
	}
	defer svc.Close(context.Background())
	r, err := replay.Replay(ctx, o, replay.Target{
		DB: svc.DB, Queue: cfg.QueueCollection, Claims: cfg.ClaimsCollection, DeadLetter: cfg.DeadLetterCollection, Scores: cfg.ScoresCollection,
		Consumer: svc, Metrics: svc.Metrics, Rules: svc.Rules,
		Settings: replay.Settings{
			Server: server, Database: cfg.Database, RefreshConcurrency: cfg.RefreshConcurrency, MaxUsersInFlight: cfg.MaxUsersInFlight,
			ClaimWindow: cfg.ClaimWindow, AdaptiveConcurrency: cfg.AdaptiveConcurrency, MaxAttempts: cfg.MaxAttempts,
			Rules: svc.Rules.Source, Components: len(svc.Rules.Components), Version: b.Version,
		},
	}, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", b.Name, err)
		return 1
	}
	if r != nil && !r.Drained {
		return ExitNotDrained
	}
	return 0
}

// Compare is `replay compare A B`: two drain reports side by side.
func Compare(name string, args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet(name, "usage: "+name+" A.json B.json\n\nSets two drain reports (report files or their directories) side by side.\n", stderr)
	if code, ok := cli.Parse(fs, args, true, stdout); !ok {
		return code
	}
	switch args = fs.Args(); {
	case len(args) > 2:
		return cli.Refuse(fs, "unexpected argument %q: it compares two reports", args[2])
	case len(args) < 2:
		return cli.Refuse(fs, "it compares two reports, got %d", len(args))
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
