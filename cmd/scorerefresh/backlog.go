package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/scorerefresh/scorerefresh/replay"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// runBacklog is `scorerefresh backlog generate ...`: a synthetic snapshot
// that replays exactly like a real one.
func runBacklog(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "generate" {
		fmt.Fprintln(stderr, "usage: scorerefresh backlog generate --shape firehose|diverse|zipf|mixed --entries N --users M --out DIR [flags]")
		return 2
	}
	fs := flag.NewFlagSet("scorerefresh backlog generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	shape := fs.String("shape", string(replay.ShapeMixed), fmt.Sprintf("distribution of users over entries: %v", replay.Shapes))
	entries := fs.Int("entries", 10000, "queue entries")
	users := fs.Int("users", 1000, "users to draw from (user-00000 is the firehose)")
	out := fs.String("out", "", "directory to write: the queue, one file per source collection, a manifest (required)")
	rules := fs.String("rules", lookupEnv(environ, "SCORING_RULES"), "rules file the source data is shaped for (default: SCORING_RULES, else the built-in rules)")
	queue := fs.String("queue", "score_events", "the queue's file name, without extension")
	seed := fs.Uint64("seed", 1, "random seed: the same seed gives the same files")
	span := fs.Duration("span", 10*time.Minute, "the entries' enqueue times spread over this, ending now")
	docs := fs.Int("docs-per-user", 2, "source documents per user and collection, on average")
	gz := fs.Bool("gzip", false, "gzip the files")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	sh, err := replay.ParseShape(*shape)
	if err != nil || *out == "" || *entries <= 0 || *users <= 0 || *docs <= 0 || *span <= 0 {
		fmt.Fprintf(stderr, "scorerefresh backlog generate: --out is required, --entries, --users, --docs-per-user and --span must be positive%s\n", errSuffix(err))
		return 2
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
		fmt.Fprintf(stderr, "scorerefresh backlog generate: %v\n", err)
		return 1
	}
	for _, f := range m.Files {
		fmt.Fprintf(stdout, "%s/%s: %d documents for %s\n", *out, f.File, f.Documents, f.Collection)
	}
	return 0
}

func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return "; " + err.Error()
}
