// Package replaycmd is `replay` and `replay compare` for the production and
// demo binaries, which differ only in where the MongoDB comes from.
package replaycmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/replay"
)

// ExitNotDrained is replay's exit code when --drain stopped with entries left.
const ExitNotDrained = 3

// Build is the binary running the replay, named in messages and the report.
type Build struct {
	Name              string // e.g. "scorerefresh replay"
	Version, Revision string
	Embedded          func(context.Context) (Server, error) // a fresh server for --embedded; nil in production, which cannot link one
}

// Server is an embedded MongoDB-compatible server.
type Server interface {
	URI() string
	Close() error
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

// Main is `replay` (args follow the word) and returns its exit code.
func Main(b Build, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return compare(b.Name+" compare", args[1:], stdout, stderr)
	}
	var o replay.Options
	fs := cli.NewFlagSet(b.Name, fmt.Sprintf(help, b.Name), stderr)
	o.Register(fs)
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if err := o.Validate(); err != nil {
		return cli.Refuse(fs, "%v", err)
	}
	if o.Embedded && b.Embedded == nil {
		return fail(stderr, b.Name, 2, errors.New("--embedded is not in this binary: the production build does not link the embedded server.\n"+
			"Run the demo build with the same flags instead:\n  go run ./cmd/scorerefresh-demo replay --embedded "+o.In))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	server := ""
	if o.Embedded {
		srv, err := b.Embedded(ctx)
		if err != nil {
			return fail(stderr, b.Name, 1, err)
		}
		defer srv.Close()
		environ, server = append(environ, "MONGODB_URI="+srv.URI()), "embedded FerretDB (SQLite)"
		fmt.Fprintf(stdout, "embedded MongoDB-compatible server (FerretDB, SQLite) at %s\n", srv.URI())
	}
	// The environment's configuration at the replay's log level, metrics only
	// on --metrics-addr (a replay often runs next to a service on METRICS_ADDR).
	cfg, err := config.Parse(append(environ, "LOG_LEVEL="+o.LogLevel))
	if err != nil {
		return fail(stderr, b.Name, 2, err)
	}
	cfg.MetricsAddr, server = o.MetricsAddr, cmp.Or(server, redact.URI(cfg.MongoURI))
	level, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	svc, err := app.New(ctx, cfg, app.Options{Logger: log, Version: b.Version, Revision: b.Revision})
	if err != nil {
		return fail(stderr, b.Name, 2, err)
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
		return fail(stderr, b.Name, 1, err)
	}
	if r != nil && !r.Drained {
		return ExitNotDrained
	}
	return 0
}

// compare is `replay compare A B`: two drain reports side by side.
func compare(name string, args []string, stdout, stderr io.Writer) int {
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
	a, errA := replay.ReadReport(args[0])
	b, err := replay.ReadReport(args[1])
	if err = cmp.Or(errA, err); err == nil {
		err = replay.Compare(stdout, a, b, "A: "+args[0], "B: "+args[1])
	}
	if err != nil {
		return fail(stderr, name, 1, err)
	}
	return 0
}

// fail prints err under the command's name and returns code.
func fail(stderr io.Writer, name string, code int, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return code
}
