package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/ops"
)

const deadLettersHelp = `usage: scorerefresh deadletters <list|show|redrive|purge> [flags]

  list     the newest dead letters matching the filter (--limit, default 50):
           _id, user, reason, time, attempts, error; never whole documents
  show ID  whole documents as Extended JSON, by _id or by the original _id of a
           renamed copy (an ObjectId's hex, a string, or Extended JSON: 42,
           {"$oid": "..."})
  redrive  put dead letters back in the queue with a fresh createdAt (the
           original kept in redrive.originalCreatedAt) and remove them from the
           dead letters, in batches (--batch, one round trip each). Safe to run
           twice or after a crash: an entry is never queued twice, and nothing
           is lost. Dead letters whose reason is malformed or too_large are
           skipped and counted unless --force: unchanged, they come straight
           back. Exits 3 when some dead letters had to be left (their _id is
           taken in the queue, or the queue refused them).
  purge    delete dead letters for good: asks for confirmation unless --yes;
           without a filter it needs --all

Filter (list, redrive, purge): --reason R[,R...] --user U --since T --until T,
where T is an RFC 3339 time, a date (2026-03-01) or a duration ago (24h),
compared with deadLetter.at. They read the same environment as
"scorerefresh run". See docs/operator-commands.md.
`

func runDeadLetters(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return dispatch("scorerefresh deadletters: unknown subcommand", deadLettersHelp, args, stdout, stderr, map[string]func([]string) int{
		"list":    func(a []string) int { return runDeadLettersList(a, environ, stdout, stderr) },
		"show":    func(a []string) int { return runDeadLettersShow(a, environ, stdout, stderr) },
		"redrive": func(a []string) int { return runRedrive(a, environ, stdout, stderr) },
		"purge":   func(a []string) int { return runPurge(a, environ, stdin, stdout, stderr) },
	})
}

type dlFlags struct {
	name               string
	fs                 *flag.FlagSet
	reasons            []string
	user, since, until string
	limit, minLimit    int64
	batch, minBatch    int
	asJSON, dryRun     bool
}

// newDLFlags defines the filter, --limit and --json; with a batch size (the
// verbs that work in batches), --batch and --dry-run too.
func newDLFlags(sub string, stderr io.Writer, limit int64, batch int, dryRunHelp string) *dlFlags {
	f := &dlFlags{name: "scorerefresh deadletters " + sub, minLimit: min(limit, 1), minBatch: min(batch, 1)}
	f.fs = cli.NewFlagSet(f.name, deadLettersHelp+"\nflags of "+sub+":\n", stderr)
	f.fs.Func("reason", "only this deadLetter.reason (malformed, max_attempts, too_large); repeat or separate with commas", func(s string) error {
		for _, r := range strings.Split(s, ",") {
			if r = strings.TrimSpace(r); r != "" {
				f.reasons = append(f.reasons, r)
			}
		}
		return nil
	})
	f.fs.StringVar(&f.user, "user", "", "only this username")
	f.fs.StringVar(&f.since, "since", "", "only dead-lettered at or after: RFC 3339, a date, or a duration ago (24h)")
	f.fs.StringVar(&f.until, "until", "", "only dead-lettered before: RFC 3339, a date, or a duration ago")
	limitHelp := map[bool]string{true: "dead letters listed at most, newest first (at least 1)", false: "dead letters at most (0: all)"}
	f.fs.Int64Var(&f.limit, "limit", limit, limitHelp[limit > 0])
	f.fs.BoolVar(&f.asJSON, "json", false, "print one JSON document (schemaVersion 1)")
	if batch > 0 {
		f.fs.IntVar(&f.batch, "batch", batch, "dead letters per batch (one round trip each)")
		f.fs.BoolVar(&f.dryRun, "dry-run", false, dryRunHelp)
	}
	return f
}

// parse reads args; when ok is false the command exits with code (cli.Parse).
func (f *dlFlags) parse(args []string, stdout io.Writer) (filter ops.Filter, code int, ok bool) {
	if code, ok := cli.Parse(f.fs, args, false, stdout); !ok {
		return ops.Filter{}, code, false
	}
	now := time.Now()
	since, err1 := ops.ParseTime(f.since, now)
	until, err2 := ops.ParseTime(f.until, now)
	switch {
	case err1 != nil || err2 != nil:
		return ops.Filter{}, cli.Refuse(f.fs, "--since/--until %v", cmp.Or(err1, err2)), false
	case f.limit < f.minLimit:
		return ops.Filter{}, cli.Refuse(f.fs, "--limit must be at least %d", f.minLimit), false
	case f.batch < f.minBatch:
		return ops.Filter{}, cli.Refuse(f.fs, "--batch must be at least %d", f.minBatch), false
	}
	return ops.Filter{Reasons: f.reasons, User: f.user, Since: since, Until: until}, 0, true
}

func runDeadLettersList(args, environ []string, stdout, stderr io.Writer) int {
	f := newDLFlags("list", stderr, 50, 0, "")
	filter, code, ok := f.parse(args, stdout)
	if !ok {
		return code
	}
	return withOps(f.name, environ, 2*time.Minute, stderr, func(ctx context.Context, env *ops.Env) int {
		l, err := ops.ListDeadLetters(ctx, env.Colls.DeadLetter, filter, int(f.limit), 100_000)
		return emit(f.name, stdout, stderr, f.asJSON, l, err, func() error {
			const head = "%d of %d%s dead letters in %s (%s), newest first\n"
			more := map[bool]string{false: " or more"}[l.MatchingExact]
			if _, err := fmt.Fprintf(stdout, head, len(l.DeadLetters), l.Matching, more, env.Colls.DeadLetter.Name(), l.Filter); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "DEAD-LETTERED\tID\tUSER\tREASON\tATTEMPTS\tERROR\n")
			for _, r := range l.DeadLetters {
				user := *cmp.Or(r.Username, new("("+r.UserNote+")"))
				id := r.ID
				if r.OriginalID != "" {
					id += " (copy of " + r.OriginalID + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", r.At.UTC().Format(time.RFC3339), id, cell(user, 40), r.Reason, r.Attempts, cell(r.Error, 70))
			}
			return tw.Flush()
		})
	})
}

func cell(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func runDeadLettersShow(args, environ []string, stdout, stderr io.Writer) int {
	const name = "scorerefresh deadletters show"
	fs := cli.NewFlagSet(name, "usage: "+name+" [--] ID [ID...]\n\n"+
		"Prints whole dead letters as Extended JSON, by _id or by the original _id of\n"+
		"a renamed copy. Put -- before an ID that starts with -.\n", stderr)
	if code, ok := cli.Parse(fs, args, true, stdout); !ok {
		return code
	}
	if args = fs.Args(); len(args) == 0 {
		return cli.Refuse(fs, "no ID")
	}
	return withOps(name, environ, 2*time.Minute, stderr, func(ctx context.Context, env *ops.Env) int {
		for _, arg := range args {
			ids, err := ops.IDCandidates(arg)
			if err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", name, err)
				return 2
			}
			docs, err := ops.ShowDeadLetters(ctx, env.Colls.DeadLetter, ids)
			if err == nil && len(docs) == 0 {
				err = fmt.Errorf("no dead letter in %s has _id or original _id %s", env.Colls.DeadLetter.Name(), arg)
			}
			if err == nil {
				err = ops.WriteExtJSON(stdout, docs)
			}
			if err != nil {
				return fail(stderr, name, err)
			}
		}
		return 0
	})
}

// progress prints a line after a batch when the whole set spans several
// batches: the first, then at most one every two seconds, and the last.
func progress(w io.Writer, name string, batch int) func(done, total int64, detail string) {
	var last time.Time
	return func(done, total int64, detail string) {
		if total <= int64(batch) || done < total && !last.IsZero() && time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now() // total > batch >= 1 here
		fmt.Fprintf(w, "%s: %d/%d (%.0f%%) %s\n", name, done, total, min(100, 100*float64(done)/float64(total)), detail)
	}
}

func runRedrive(args, environ []string, stdout, stderr io.Writer) int {
	f := newDLFlags("redrive", stderr, 0, 500, "report what would be redriven; write nothing")
	force := f.fs.Bool("force", false, "also redrive dead letters whose reason is malformed or too_large, unchanged (fix the data first, or they come straight back)")
	filter, code, ok := f.parse(args, stdout)
	if !ok {
		return code
	}
	return withOps(f.name, environ, 0, stderr, func(ctx context.Context, env *ops.Env) int {
		show := progress(stderr, f.name, f.batch)
		res, err := ops.Redrive(ctx, env.Colls, ops.RedriveOptions{
			Filter: filter, Limit: f.limit, Batch: f.batch, DryRun: f.dryRun, Force: *force,
			Progress: func(r ops.RedriveResult) {
				show(r.Read, r.Total, fmt.Sprintf("%d requeued, %d already queued, %d left (conflicts, refusals)", r.Requeued, r.AlreadyQueued, r.Conflicts+r.Failed))
			},
		})
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n(what was done is in the queue and gone from the dead letters; run the same command again to finish: it is safe)\n", f.name, err)
			writeRedrive(stderr, res, env.Colls.DeadLetter.Name())
			return 1
		}
		if code := emit(f.name, stdout, stderr, f.asJSON, res, nil, func() error { return writeRedrive(stdout, res, env.Colls.DeadLetter.Name()) }); code != 0 || res.Conflicts+res.Failed == 0 {
			return code
		}
		return 3 // dead letters left behind (conflicts, refusals): the run finished, the job is not done
	})
}

func writeRedrive(w io.Writer, r ops.RedriveResult, coll string) error {
	var b strings.Builder
	if r.DryRun {
		fmt.Fprintf(&b, "dry run, nothing written: %d dead letters of %s match (%s): %d would be requeued, %d are already in the queue from an interrupted run (they would only be removed), %d conflict\n",
			r.Read, coll, r.Filter, r.Requeued, r.AlreadyQueued, r.Conflicts)
	} else {
		fmt.Fprintf(&b, "redrove %d dead letters of %s (%s) in %d batches: %d requeued, %d already in the queue from an interrupted run, %d removed from the dead letters\n",
			r.Read, coll, r.Filter, r.Batches, r.Requeued, r.AlreadyQueued, r.Removed)
	}
	for reason, n := range r.Skipped {
		fmt.Fprintf(&b, "skipped %d %s dead letters: unchanged they would come straight back; fix them (or the producer), then --force --reason %s\n", n, reason, reason)
	}
	if r.Conflicts+r.Failed > 0 {
		fmt.Fprintf(&b, "left %d dead letters in place (%d conflicts, %d refused by the queue):\n", r.Conflicts+r.Failed, r.Conflicts, r.Failed)
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// purgeResult is `deadletters purge --json`.
type purgeResult struct {
	SchemaVersion int        `json:"schemaVersion"`
	Kind          string     `json:"kind"` // "deadletters.purge"
	DryRun        bool       `json:"dryRun"`
	Filter        ops.Filter `json:"filter"`
	Matching      int64      `json:"matching"`
	Deleted       int64      `json:"deleted"`
}

func runPurge(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f := newDLFlags("purge", stderr, 0, 1000, "count what would be deleted; delete nothing")
	yes := f.fs.Bool("yes", false, "do not ask for confirmation")
	all := f.fs.Bool("all", false, "allow a purge without any filter (every dead letter)")
	filter, code, ok := f.parse(args, stdout)
	if !ok {
		return code
	}
	if len(filter.BSON()) == 0 && !*all {
		return cli.Refuse(f.fs, "no filter: pass --reason, --user, --since or --until, or --all to delete every dead letter")
	}
	return withOps(f.name, environ, 0, stderr, func(ctx context.Context, env *ops.Env) int {
		res := purgeResult{SchemaVersion: ops.SchemaVersion, Kind: "deadletters.purge", DryRun: f.dryRun, Filter: filter}
		upTo := cmp.Or(f.limit, math.MaxInt64-1) // the prompt states the exact number it deletes
		n, _, err := ops.CountDeadLetters(ctx, env.Colls.DeadLetter, filter, upTo)
		if err != nil {
			return fail(stderr, f.name, err)
		}
		res.Matching = min(n, upTo)
		what := fmt.Sprintf("%d dead letters from %s.%s (%s)", res.Matching, env.Config.Database, env.Colls.DeadLetter.Name(), filter)
		summary := fmt.Sprintf("dry run: would delete %s\n", what)
		if !f.dryRun && res.Matching > 0 {
			if !*yes {
				fmt.Fprint(stderr, "Delete "+what+"? This cannot be undone. Type yes to go on: ")
				// Only "yes" goes on. No input (a Job, a pipe closed) is a no.
				if line, _ := bufio.NewReader(stdin).ReadString('\n'); strings.TrimSpace(line) != "yes" {
					fmt.Fprintf(stderr, "%s: not confirmed; nothing deleted (--yes skips the question)\n", f.name)
					return 1
				}
			}
			show := progress(stderr, f.name, f.batch)
			if res.Deleted, err = ops.Purge(ctx, env.Colls.DeadLetter, filter, f.limit, f.batch, func(n int64) { show(n, res.Matching, "deleted") }); err != nil {
				fmt.Fprintf(stderr, "%s: deleted %d, then: %v\n", f.name, res.Deleted, err)
				return 1
			}
		}
		if !f.dryRun {
			summary = fmt.Sprintf("deleted %d of %s\n", res.Deleted, what)
		}
		return emit(f.name, stdout, stderr, f.asJSON, res, nil, func() error {
			_, err := io.WriteString(stdout, summary)
			return err
		})
	})
}

const statusHelp = `usage: scorerefresh status [--json] [--top N] [flags]

What the queue holds now, read from the collections (no Prometheus needed):
depth, oldest entry, the users with the most entries, leases held per replica,
users backing off (next attempt, last error), dead letters by reason and age,
and arrivals against acknowledgements from two samples --sample apart.

Its cost is bounded whatever the depth: 16 round trips (26 with the rates),
each bounded:
  - counts are exact up to --exact-limit and the collection's estimated count
    (metadata, O(1)) past it, marked "estimated";
  - top users come from the oldest --window entries (only _id, username and
    createdAt are read), marked as a window when the queue holds more;
  - dead letters by reason come from the newest --window of them, oldest and
    newest from the deadLetter.at index;
  - at most --lease-limit held leases are read;
  - rates are lower bounds: entries that arrive and are acknowledged between
    the two samples are in neither figure (see docs/operator-commands.md).

It reads the same environment as "scorerefresh run". Flags:
`

func runStatus(args, environ []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("scorerefresh status", statusHelp, stderr)
	asJSON := fs.Bool("json", false, "print one JSON document (schemaVersion 1, kind \"status\")")
	var o ops.StatusOptions
	fs.IntVar(&o.Top, "top", 10, "users listed among the top users and the backoffs")
	fs.IntVar(&o.Window, "window", 10_000, "documents read at most for the top users and for the dead letters by reason")
	fs.Int64Var(&o.ExactLimit, "exact-limit", 100_000, "counts are exact up to this, estimated past it")
	fs.IntVar(&o.LeaseLimit, "lease-limit", 10_000, "held leases read at most")
	fs.DurationVar(&o.Sample, "sample", 5*time.Second, "gap between the two samples of arrivals and acknowledgements; 0 skips them")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if o.Top <= 0 || o.Window <= 0 || o.ExactLimit <= 0 || o.LeaseLimit <= 0 || o.Sample < 0 {
		return cli.Refuse(fs, "--top, --window, --exact-limit and --lease-limit must be positive, --sample not negative")
	}
	return withOps("scorerefresh status", environ, *timeout, stderr, func(ctx context.Context, env *ops.Env) int {
		s, err := ops.GatherStatus(ctx, env.Colls, o)
		return emit("scorerefresh status", stdout, stderr, *asJSON, s, err, func() error { return ops.WriteStatus(stdout, s) })
	})
}

// withOps connects an operator command exactly as `run` connects (same
// environment, loader and client options) and runs f, or returns 2 when it
// cannot. A zero timeout means none (the command stops on SIGINT or SIGTERM).
func withOps(name string, environ []string, timeout time.Duration, stderr io.Writer, f func(context.Context, *ops.Env) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var env *ops.Env
	cfg, err := config.Parse(environ)
	if err == nil {
		env, err = ops.Open(ctx, cfg, version, revision)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	defer env.Close(context.Background())
	return f(ctx, env)
}

// fail says on stderr what stopped the command: exit code 1.
func fail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}

// emit prints v as one JSON document with asJSON, else as text prints it:
// exit code 0, or 1 when it cannot or err (what producing v met) is not nil.
func emit(name string, stdout, stderr io.Writer, asJSON bool, v any, err error, text func() error) int {
	if err == nil && asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(v)
	} else if err == nil {
		err = text()
	}
	if err != nil {
		return fail(stderr, name, err)
	}
	return 0
}

const doctorHelp = `usage: scorerefresh doctor [--replicas N] [--json]

Preflight checks against the configured MongoDB, printed as a table (ok, warn,
fail, with the fix under each problem); exits 1 when a check fails. It changes
nothing: it reads, explains (queryPlanner: nothing runs) and opens and closes
one change stream.

  server version and topology (replica set or sharded, for change streams),
  the service's indexes, the plan of each hot query (claim window, absorb, ack
  delete by _id, lease read), every scoring rule's source collection and its
  index on userField (and timeField with a window), the permissions of every
  operation (connectionStatus), the fleet's connections against the server's
  (serverStatus), and this host's clock against the server's.

What a server cannot answer (the embedded FerretDB has no plans, privileges
or connection figures) is a warning, not a failure.

It reads the same environment as "scorerefresh run". Flags:
`

func runDoctor(args, environ []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("scorerefresh doctor", doctorHelp, stderr)
	replicas := fs.Int("replicas", 2, "replicas the fleet runs (KEDA: its maxReplicaCount); one more is counted for a rollout")
	asJSON := fs.Bool("json", false, "print one JSON document (schemaVersion 1, kind \"doctor\")")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if *replicas <= 0 {
		return cli.Refuse(fs, "--replicas must be positive")
	}
	return withOps("scorerefresh doctor", environ, *timeout, stderr, func(ctx context.Context, env *ops.Env) int {
		cfg := env.Config
		r := ops.Doctor(ctx, ops.DoctorConfig{
			Colls: env.Colls, Rules: env.Rules, Replicas: *replicas,
			PoolSize: int(app.PoolSize(cfg)), PerReplica: app.ConnectionsPerReplica(cfg),
			ClaimWindow: cfg.ClaimWindow, LeaseDuration: cfg.LeaseDuration,
		})
		if code := emit("scorerefresh doctor", stdout, stderr, *asJSON, r, nil, func() error { return ops.WriteDoctor(stdout, r) }); code != 0 || r.Failures == 0 {
			return code
		}
		return 1
	})
}
