// Package service runs scorerefresh as `scorerefresh run` does (the same configuration, metrics,
// probes, claims, OCC writes, retries and dead letters) around a team's own scoring.Scorer, in a
// program of about thirty lines (examples/goscorer, docs/scorers.md):
//
//	func main() {
//		os.Exit(service.Main(os.Args[1:], service.Options{
//			Scorer: func(db *mongo.Database) scoring.Scorer { return myScorer{db} },
//		}))
//	}
//
// The operator commands (status, deadletters, doctor, snapshot, replay, plan)
// do not depend on the scorer: the stock scorerefresh binary runs them.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Options are what a binary brings besides the environment.
type Options struct {
	// Scorer builds the scorer from the service's database (reads go to
	// the primary). Nil: the rules or SCORER_URL, as `scorerefresh run`.
	Scorer            func(db *mongo.Database) scoring.Scorer
	Name              string // in usage and errors; default scorerefresh
	Version, Revision string // for scorerefresh_build_info
}

// Main is Run with the process's environment and streams; it returns the exit code.
func Main(args []string, o Options) int {
	return Run(args, os.Environ(), os.Stdout, os.Stderr, o)
}

// Run runs the service until SIGTERM or SIGINT and returns the exit code: 0 after a clean shutdown,
// 2 for bad arguments or configuration, 1 when it stopped on an error. It refuses every argument but
// -h/--help, which prints the variables it reads and starts nothing.
func Run(args, environ []string, stdout, stderr io.Writer, o Options) int {
	name := cmp.Or(o.Name, "scorerefresh")
	fs := cli.NewFlagSet(name+" run", "", stderr)
	fs.Usage = func() { WriteRunHelp(fs.Output(), name) }
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	cfg, err := config.Parse(environ)
	if err == nil && o.Scorer != nil && (cfg.ScorerURL != "" || cfg.ScoringRules != "") {
		err = errors.New("SCORER_URL and SCORING_RULES: this program brings its own scorer; unset them")
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	level, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	svc, err := app.New(ctx, cfg, app.Options{Logger: log, Version: o.Version, Revision: o.Revision, Scorer: o.Scorer})
	if err != nil {
		log.Error("cannot start", "err", err)
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	defer svc.Close(context.Background())
	if err := svc.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped with an error", "err", err)
		return 1
	}
	return 0
}

const runHelp = `usage: PROGRAM run

Drains the queue until SIGTERM or SIGINT: the container's command. It takes
no arguments; it reads the environment variables below, once, at start
(docs/contract.md). An unset or empty variable keeps its default. What is
shown is each default, never the value this environment holds.

environment (with its default):
`

// WriteRunHelp prints the run command's usage with config.Variables.
func WriteRunHelp(w io.Writer, name string) {
	_, _ = io.WriteString(w, strings.ReplaceAll(runHelp, "PROGRAM", name))
	for _, v := range config.Variables() {
		fmt.Fprintf(w, "  %s=%s\n      %s\n", v.Name, v.Default, v.Help)
	}
}
