package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/replay"
)

const snapshotHelp = `usage: scorerefresh snapshot --out FILE|DIR [--with-sources] [flags]

Writes the queue (and, with --with-sources, every source collection the
rules read) as Extended JSON lines, for scorerefresh replay or plan
(docs/replay.md). It only reads. It reads the same environment as
"scorerefresh run".

flags:
`

// runSnapshot is `scorerefresh snapshot --out FILE|DIR [--with-sources]`.
func runSnapshot(args, environ []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("scorerefresh snapshot", snapshotHelp, stderr)
	out := fs.String("out", "", "file for the queue alone (.gz compresses), or directory for one file per collection and a manifest (required)")
	withSources := fs.Bool("with-sources", false, "also take every source collection the rules file (SCORING_RULES) reads; --out is then a directory")
	gz := fs.Bool("gzip", false, "gzip the files written into a directory")
	format := fs.String("json-format", "canonical", "canonical (keeps int64 apart from int32, like mongoexport --jsonFormat=canonical) or relaxed (mongoexport's default)")
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if *out == "" || (*format != "canonical" && *format != "relaxed") {
		return cli.Refuse(fs, "--out is required and --json-format must be canonical or relaxed")
	}
	cfg, err := config.Parse(environ)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh snapshot: %v\n", err)
		return 2
	}
	cfg.MetricsAddr = "" // a snapshot serves no metrics (and must not take the service's port)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	svc, err := app.New(ctx, cfg, app.Options{Version: version, Revision: revision})
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh snapshot: %v\n", err)
		return 2
	}
	defer svc.Close(context.Background())
	sc := replay.SnapshotConfig{
		DB: svc.DB, Queue: cfg.QueueCollection, Out: *out, Gzip: *gz, Relaxed: *format == "relaxed",
		Origin: redact.URI(cfg.MongoURI), Progress: stderr,
	}
	if *withSources {
		sc.Sources, sc.Rules = svc.Rules.Collections(), svc.Rules.Source
	}
	m, err := replay.Snapshot(ctx, sc)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh snapshot: %v\n", err)
		return 1
	}
	for _, f := range m.Files {
		fmt.Fprintf(stdout, "%s: %d documents of %s.%s, %d bytes\n", f.File, f.Documents, cfg.Database, f.Collection, f.Bytes)
	}
	fmt.Fprintf(stdout, "consistency: %s\n", replay.SnapshotConsistency)
	return 0
}
