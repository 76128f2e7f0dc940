package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/ops"
	"github.com/scorerefresh/scorerefresh/pkg/extjson"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/replay"
	"github.com/scorerefresh/scorerefresh/scoring"
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
	if *out == "-" && *withSources {
		return cli.Refuse(fs, "--with-sources needs a directory for --out: standard output carries the queue alone")
	}
	return withOps("scorerefresh snapshot", environ, 0, stderr, func(ctx context.Context, env *ops.Env) int {
		if *out == "-" {
			// The queue as replay.Snapshot writes a file (in _id order, the same
			// consistency); the summary on stderr, apart from the data.
			coll, cw := env.Colls.Queue, &countingWriter{w: stdout}
			var dst io.WriteCloser = cw
			if *gz {
				dst = gzip.NewWriter(cw)
			}
			w := extjson.NewWriter(dst, *format == "canonical")
			if err := replay.Export(ctx, coll, w, cw.n.Load, "standard output", stderr); err != nil {
				return fail(stderr, "scorerefresh snapshot", err)
			}
			if err := dst.Close(); err != nil { // only a gzip stream has anything to finish
				return fail(stderr, "scorerefresh snapshot", fmt.Errorf("finishing the gzip stream of %s: %w", coll.Name(), err))
			}
			fmt.Fprintf(stderr, "-: %d documents of %s.%s, %d bytes\n", w.Docs(), coll.Database().Name(), coll.Name(), cw.n.Load())
			fmt.Fprintf(stderr, "consistency: %s\n", replay.SnapshotConsistency)
			return 0
		}
		sc := replay.SnapshotConfig{
			DB: env.Colls.DB, Queue: env.Config.QueueCollection, Out: *out, Gzip: *gz, Relaxed: *format == "relaxed",
			Origin: redact.URI(env.Config.MongoURI), Progress: stderr,
		}
		if *withSources {
			sc.Sources, sc.Rules = env.Rules.Collections(), env.Rules.Source
		}
		m, err := replay.Snapshot(ctx, sc)
		if err != nil {
			return fail(stderr, "scorerefresh snapshot", err)
		}
		for _, f := range m.Files {
			fmt.Fprintf(stdout, "%s: %d documents of %s.%s, %d bytes\n", f.File, f.Documents, env.Config.Database, f.Collection, f.Bytes)
		}
		fmt.Fprintf(stdout, "consistency: %s\n", replay.SnapshotConsistency)
		return 0
	})
}

// countingWriter counts what reaches stdout (progress, summary); Close is a no-op.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Close() error { return nil }

const backlogHelp = `usage: scorerefresh backlog generate --shape firehose|diverse|zipf|mixed --entries N --users M --out DIR [flags]

Writes a synthetic snapshot (the queue, the source collections the rules
read, a manifest) that replays exactly like one scorerefresh snapshot takes.
It connects to nothing; only SCORING_RULES is read from the environment.
`

func runBacklog(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "generate" {
		top := cli.NewFlagSet("scorerefresh backlog", backlogHelp+"\n\"scorerefresh backlog generate -h\" lists its flags.\n", stderr)
		if code, ok := cli.Parse(top, args, true, stdout); !ok {
			return code
		}
		if top.NArg() == 0 {
			return cli.Refuse(top, "a subcommand is required")
		}
		return cli.Refuse(top, "unknown subcommand %q", top.Arg(0))
	}
	fs := cli.NewFlagSet("scorerefresh backlog generate", backlogHelp+"\nflags:\n", stderr)
	shape := fs.String("shape", string(replay.ShapeMixed), fmt.Sprintf("distribution of users over entries: %v", replay.Shapes))
	entries := fs.Int("entries", 10000, "queue entries")
	users := fs.Int("users", 1000, "users to draw from (user-00000 is the firehose)")
	out := fs.String("out", "", "directory to write: the queue, one file per source collection, a manifest (required)")
	rulesEnv := "" // the first SCORING_RULES of environ
	if i := slices.IndexFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, "SCORING_RULES=") }); i >= 0 {
		rulesEnv = strings.TrimPrefix(environ[i], "SCORING_RULES=")
	}
	rules := fs.String("rules", rulesEnv, "rules file the source data is shaped for (default: SCORING_RULES, else the built-in rules)")
	queue := fs.String("queue", "score_events", "the queue's file name, without extension")
	seed := fs.Uint64("seed", 1, "random seed: the same seed gives the same files")
	span := fs.Duration("span", 10*time.Minute, "the entries' enqueue times spread over this, ending now")
	docs := fs.Int("docs-per-user", 2, "source documents per user and collection, on average")
	gz := fs.Bool("gzip", false, "gzip the files")
	if code, ok := cli.Parse(fs, args[1:], false, stdout); !ok {
		return code
	}
	sh, err := replay.ParseShape(*shape)
	if err != nil || *out == "" || *entries <= 0 || *users <= 0 || *docs <= 0 || *span <= 0 {
		problem := "--out is required, --entries, --users, --docs-per-user and --span must be positive"
		if err != nil {
			problem += "; " + err.Error()
		}
		return cli.Refuse(fs, "%s", problem)
	}
	r := scoring.DefaultRules()
	if *rules != "" {
		if r, err = scoring.LoadRules(*rules); err != nil {
			fmt.Fprintf(stderr, "scorerefresh backlog generate: %v\n", err)
			return 2
		}
	}
	m, err := replay.Generate(replay.GenerateConfig{
		Shape: sh, Entries: *entries, Users: *users, Rules: r, Seed: *seed, Span: *span, DocsPerUser: *docs,
		Out: *out, Gzip: *gz, Queue: *queue, Progress: stderr,
		Origin: "scorerefresh backlog generate " + strings.Join(args[1:], " "),
	})
	if err != nil {
		return fail(stderr, "scorerefresh backlog generate", err)
	}
	for _, f := range m.Files {
		fmt.Fprintf(stdout, "%s/%s: %d documents for %s\n", *out, f.File, f.Documents, f.Collection)
	}
	return 0
}
