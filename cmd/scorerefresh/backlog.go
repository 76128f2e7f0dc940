package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/replay"
	"github.com/scorerefresh/scorerefresh/scoring"
)

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
	rules := fs.String("rules", lookupEnv(environ, "SCORING_RULES"), "rules file the source data is shaped for (default: SCORING_RULES, else the built-in rules)")
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
