package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/ops"
	"github.com/scorerefresh/scorerefresh/pkg/extjson"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/replay"
)

const snapshotHelp = `usage: scorerefresh snapshot --out FILE|DIR|- [--with-sources] [flags]

Writes the queue (and, with --with-sources, every source collection the
rules read) as Extended JSON lines, for scorerefresh replay or plan
(docs/replay.md). It only reads. It reads the same environment as
"scorerefresh run".

--out - writes the queue to standard output (gzipped with --gzip) and the
summary to standard error, so a pod without a shell or tar can be read out:
  kubectl exec deploy/scorerefresh -- /usr/local/bin/scorerefresh snapshot --out - --gzip > snap.jsonl.gz

flags:
`

func runSnapshot(args, environ []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("scorerefresh snapshot", snapshotHelp, stderr)
	out := fs.String("out", "", "file for the queue alone (.gz compresses), directory for one file per collection and a manifest, or - for the queue on standard output (required)")
	withSources := fs.Bool("with-sources", false, "also take every source collection the rules file (SCORING_RULES) reads; --out is then a directory")
	gz := fs.Bool("gzip", false, "gzip the files written into a directory, or standard output with --out -")
	format := fs.String("json-format", "canonical", "canonical (keeps int64 apart from int32, like mongoexport --jsonFormat=canonical) or relaxed (mongoexport's default)")
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if *out == "" || (*format != "canonical" && *format != "relaxed") {
		return cli.Refuse(fs, "--out is required and --json-format must be canonical or relaxed")
	}
	toStdout := *out == "-"
	if toStdout && *withSources {
		return cli.Refuse(fs, "--with-sources needs a directory for --out: standard output carries the queue alone")
	}
	return withOps("scorerefresh snapshot", environ, 0, stderr, func(ctx context.Context, env *ops.Env) int {
		cfg := env.Config
		if toStdout {
			return snapshotToStdout(ctx, env.Colls.Queue, *gz, *format == "canonical", stdout, stderr)
		}
		sc := replay.SnapshotConfig{
			DB: env.Colls.DB, Queue: cfg.QueueCollection, Out: *out, Gzip: *gz, Relaxed: *format == "relaxed",
			Origin: redact.URI(cfg.MongoURI), Progress: stderr,
		}
		if *withSources {
			sc.Sources, sc.Rules = env.Rules.Collections(), env.Rules.Source
		}
		m, err := replay.Snapshot(ctx, sc)
		if err != nil {
			return fail(stderr, "scorerefresh snapshot", err)
		}
		for _, f := range m.Files {
			fmt.Fprintf(stdout, "%s: %d documents of %s.%s, %d bytes\n", f.File, f.Documents, cfg.Database, f.Collection, f.Bytes)
		}
		fmt.Fprintf(stdout, "consistency: %s\n", replay.SnapshotConsistency)
		return 0
	})
}

// snapshotToStdout streams the queue as replay.Snapshot does a file (in _id
// order, the same consistency), but to stdout: the image has no shell and a
// read-only root, so kubectl exec's stdout is the only way out of the pod.
// The summary goes to stderr, which must not mix with the data.
func snapshotToStdout(ctx context.Context, coll *mongo.Collection, gz, canonical bool, stdout, stderr io.Writer) int {
	cw := &countingWriter{w: stdout}
	var dst io.Writer = cw
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(cw)
		dst = zw
	}
	w := extjson.NewWriter(dst, canonical)
	if err := replay.Export(ctx, coll, w, cw.n.Load, "standard output", stderr); err != nil {
		return fail(stderr, "scorerefresh snapshot", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return fail(stderr, "scorerefresh snapshot", fmt.Errorf("finishing the gzip stream of %s: %w", coll.Name(), err))
		}
	}
	fmt.Fprintf(stderr, "-: %d documents of %s.%s, %d bytes\n", w.Docs(), coll.Database().Name(), coll.Name(), cw.n.Load())
	fmt.Fprintf(stderr, "consistency: %s\n", replay.SnapshotConsistency)
	return 0
}

// countingWriter counts what reaches stdout, for the progress line and the
// summary.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
