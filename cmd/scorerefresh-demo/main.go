// Command scorerefresh-demo runs the real service, wired as `scorerefresh run`
// wires it, against an embedded MongoDB-compatible server (FerretDB, SQLite,
// in-process) the production binary does not link: it seeds a backlog of one
// firehose user and many distinct users, drains it and checks every score
// against the seeded data (or what the --scorer-example HTTP scorer computes).
// `replay` and `serve` are its other commands (docs/replay.md, README.md).
package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/app"
	gen "github.com/scorerefresh/scorerefresh/internal/backlog"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/examplescorer"
	"github.com/scorerefresh/scorerefresh/internal/replaycmd"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
	"github.com/scorerefresh/scorerefresh/queuestate"
	"github.com/scorerefresh/scorerefresh/scoring"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

type demoOptions struct {
	entries, users int
	firehose       float64
	seed           uint64
	dataDir        string
	scorer         scorerExample // --scorer-example: drain through examples/ instead of the rules
}

// register defines the flags of the backlog and its server, which the demo
// and serve share; dataHelp is -data's help text.
func (o *demoOptions) register(fs *flag.FlagSet, dataHelp string) {
	fs.IntVar(&o.entries, "entries", 3000, "queue entries to seed")
	fs.IntVar(&o.users, "users", 300, "distinct users besides the firehose user")
	fs.Float64Var(&o.firehose, "firehose", 0.5, "fraction of entries that belong to the one firehose user")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of the backlog")
	fs.StringVar(&o.dataDir, "data", "", dataHelp)
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "replay" { // the production binary's replay, plus --embedded: a fresh embedded server
		return replaycmd.Main(replaycmd.Build{Name: "scorerefresh-demo replay", Version: "demo",
			Embedded: func(ctx context.Context) (replaycmd.Server, error) { return embedmongo.Start(ctx, embedmongo.Config{}) },
		}, args[1:], environ, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve" {
		return runServe(args[1:], environ, stdout, stderr)
	}
	fs := flag.NewFlagSet("scorerefresh-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demoOptions
	o.register(fs, "keep the embedded server's SQLite files here (default: a temporary directory)")
	logLevel := fs.String("log-level", "warn", "the service's log level (its JSON lines go to stderr)")
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of the whole run (server included) to this file")
	fs.Var(&o.scorer, "scorer-example", "drain through an example HTTP scorer instead of the rules: node (examples/nodescorer, the default) or go (examples/httpscorer)")
	if err := fs.Parse(args); err != nil || takeScorerExampleArg(fs, &o.scorer) != nil {
		return 2
	}
	// The rest of the service's configuration comes from the environment as
	// in production (REFRESH_CONCURRENCY=4 go run ./cmd/scorerefresh-demo),
	// except where the demo must decide: its own server, a free metrics port.
	environ = append(environ, "METRICS_ADDR=127.0.0.1:0", "LOG_LEVEL="+*logLevel, "POLL_INTERVAL=200ms")
	cfg, err := config.Parse(environ)
	switch {
	case o.entries <= 0 || o.users <= 0 || o.firehose < 0 || o.firehose > 1:
		err = errors.New("-entries and -users must be positive, -firehose within [0, 1]")
	case err == nil && o.scorer != "" && (cfg.ScoringRules != "" || cfg.ScorerURL != ""):
		err = errors.New("--scorer-example brings its own scorer: unset SCORING_RULES and SCORER_URL")
	}
	if err == nil && *cpuProf != "" {
		var f *os.File
		if f, err = os.Create(*cpuProf); err == nil {
			defer f.Close()
			err = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := demo(ctx, cfg, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo: %v\n", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context, cfg config.Config, o demoOptions, stdout, stderr io.Writer) error {
	srv, err := embedmongo.Start(ctx, embedmongo.Config{Dir: o.dataDir})
	if err != nil {
		return err
	}
	defer srv.Close()
	cfg.MongoURI = srv.URI()
	fmt.Fprintf(stdout, "embedded MongoDB-compatible server (FerretDB, SQLite) at %s\n", srv.URI())
	ctx, stopScorer, err := withScorerExample(ctx, &cfg, o.scorer, srv.URI(), stdout, stderr)
	if err != nil {
		return err
	}
	defer stopScorer()

	level, _ := config.ParseLogLevel(cfg.LogLevel)
	svc, err := app.New(ctx, cfg, app.Options{Logger: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})), Version: "demo"})
	if err != nil {
		return err
	}
	defer svc.Close(context.Background())
	b := newBacklog(o)
	seedStart := time.Now()
	if err := b.seed(ctx, svc.DB, cfg); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seeded %d entries for %d distinct users (%.0f%% from one firehose user) and %d source documents in %s\n",
		len(b.entries), len(b.want), o.firehose*100, len(b.activity), time.Since(seedStart).Round(time.Millisecond))
	fmt.Fprintf(stdout, "metrics, health: http://%s/metrics /healthz /readyz\n", svc.MetricsAddr())
	fmt.Fprintf(stdout, "draining with REFRESH_CONCURRENCY=%d MAX_USERS_IN_FLIGHT=%d CLAIM_WINDOW=%d\n",
		cfg.RefreshConcurrency, cfg.MaxUsersInFlight, cfg.ClaimWindow)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runErr error
	stopped := make(chan struct{}) // closed, not sent on: untilDrained and the wait below both receive
	go func() {
		runErr = svc.Run(runCtx)
		close(stopped)
	}()

	start := time.Now()
	end, err := untilDrained(ctx, svc, stdout, start, stopped)
	cancel()
	<-stopped
	err = errors.Join(err, runErr)
	if exited, ok := context.Cause(ctx).(scorerExitError); ok && (err != nil || end.IsZero()) {
		return exited
	}
	if err != nil {
		return err
	}
	if end.IsZero() {
		fmt.Fprintln(stdout, "interrupted before the queue drained")
		return nil
	}
	summary(svc, stdout, end.Sub(start).Seconds(), len(b.entries), len(b.want))
	return verify(ctx, svc, b, o.scorer != "", stdout)
}

const serveUsage = `usage: scorerefresh-demo serve [-addr HOST:PORT] [-entries N] [-users N] [-firehose F] [-seed N] [-data DIR]

Starts the embedded MongoDB-compatible server (FerretDB, SQLite), seeds the
demo's backlog and source documents, prints the MONGODB_URI to use, and
keeps serving until interrupted: the scorerefresh binary's commands (run,
status, doctor, deadletters, snapshot) then have a server to talk to on a
machine without MongoDB.
`

func runServe(args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scorerefresh-demo serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), serveUsage); fs.PrintDefaults() }
	var o demoOptions
	addr := fs.String("addr", "127.0.0.1:27017", "listen address (loopback; :0 for a free port)")
	o.register(fs, "keep the SQLite files here (default: a temporary directory, removed at the end)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || o.entries < 0 || o.users <= 0 || o.firehose < 0 || o.firehose > 1 {
		fmt.Fprintf(stderr, "scorerefresh-demo serve: takes no arguments; -entries ≥ 0, -users > 0, -firehose within [0, 1]\n\n%s", serveUsage)
		return 2
	}
	cfg, err := config.Parse(environ)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo serve: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, cfg, o, *addr, stdout); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-demo serve: %v\n", err)
		return 1
	}
	return 0
}

// serve runs the embedded server with the demo's data until ctx ends.
func serve(ctx context.Context, cfg config.Config, o demoOptions, addr string, stdout io.Writer) error {
	srv, err := embedmongo.Start(ctx, embedmongo.Config{Dir: o.dataDir, Addr: addr})
	if err != nil {
		return err
	}
	defer srv.Close()
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		return fmt.Errorf("connecting to the embedded server: %w", err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	if o.entries > 0 {
		b := newBacklog(o)
		if err := b.seed(ctx, client.Database(cfg.Database), cfg); err != nil {
			return fmt.Errorf("seeding the backlog: %w", err)
		}
		fmt.Fprintf(stdout, "seeded %d entries for %d distinct users and %d source documents in database %s\n",
			len(b.entries), len(b.want), len(b.activity), cfg.Database)
	}
	fmt.Fprintf(stdout, "MONGODB_URI=%s\n", srv.URI())
	fmt.Fprintf(stdout, "try, in another shell:\n  export MONGODB_URI=%s MONGODB_DATABASE=%s\n  go run ./cmd/scorerefresh status\n  go run ./cmd/scorerefresh doctor\n  go run ./cmd/scorerefresh run\nserving until interrupted\n", srv.URI(), cfg.Database)
	<-ctx.Done()
	return nil
}

// backlog is a demo queue and the source data its events announce, shaped
// for the built-in rules (activity: sum of user_activity.points over 720h).
type backlog struct {
	entries  []any
	activity []any
	want     map[string]float64 // expected score per user
}

// newBacklog draws o's backlog: events of the last ten minutes, oldest
// first; user 0 is the firehose user, the others are drawn uniformly.
func newBacklog(o demoOptions) *backlog {
	rnd := rand.New(rand.NewPCG(o.seed, 0))
	users, first := o.users, 0
	if o.firehose > 0 {
		users, first = o.users+1, 1
	}
	name := func(i int) string {
		if i < first {
			return "firehose"
		}
		return fmt.Sprintf("user-%04d", i-first)
	}
	entries := gen.Generate(gen.Spec{Shape: gen.Firehose, Entries: o.entries, Users: users, Hot: o.firehose, End: time.Now()}, rnd)
	activity, want := gen.Activity(entries, name, rnd, 0)
	return &backlog{entries: gen.QueueDocs(entries, name, "demo"), activity: activity, want: want}
}

// seed inserts the backlog as producers write it: the source data first,
// then the events.
func (b *backlog) seed(ctx context.Context, db *mongo.Database, cfg config.Config) error {
	colls := []*mongo.Collection{db.Collection("user_activity"), db.Collection(cfg.QueueCollection)}
	for c, docs := range [][]any{b.activity, b.entries} {
		for i := 0; i < len(docs); i += 1000 {
			if _, err := colls[c].InsertMany(ctx, docs[i:min(i+1000, len(docs))]); err != nil {
				return fmt.Errorf("seeding %s: %w", colls[c].Name(), err)
			}
		}
	}
	return nil
}

// verify checks every user's stored score against the sum of their seeded
// activity (the rules) or, with example, the example scorers' score of it at
// refreshedAt: 2 per activity document then plus their points.
func verify(ctx context.Context, svc *app.Service, b *backlog, example bool, out io.Writer) error {
	var docs []scoring.ScoreDoc
	var activity []struct {
		User   string        `bson:"username"`
		Points bson.RawValue `bson:"points"`
		At     time.Time     `bson:"at"`
	}
	err := readAll(ctx, svc.DB.Collection("user_scores"), "scores", &docs)
	if err == nil && example {
		err = readAll(ctx, svc.DB.Collection("user_activity"), "user_activity", &activity)
	}
	if err != nil {
		return err
	}
	got := map[string]scoring.ScoreDoc{}
	for _, d := range docs {
		got[d.Username] = d
	}
	events, points := map[string]float64{}, map[string]float64{}
	for _, a := range activity {
		if d, ok := got[a.User]; ok && !a.At.After(d.RefreshedAt) {
			p, _ := a.Points.AsFloat64OK()
			events[a.User]++
			points[a.User] += p
		}
	}
	wrong := 0
	for user, want := range b.want {
		d, ok := got[user]
		problem := fmt.Sprintf("scored %v, want %v", d.Score, want)
		if example {
			want = 2*events[user] + points[user]
			problem = fmt.Sprintf("scored %v %v, want %v (events %v, points %v)", d.Score, d.Components, want, events[user], points[user])
			ok = ok && d.Components["events"] == events[user] && !(math.Abs(d.Components["points"]-points[user]) > 1e-9)
		}
		if !ok || math.Abs(d.Score-want) > 1e-9 {
			if wrong < 5 {
				fmt.Fprintf(out, "  WRONG: %s %s\n", user, problem)
			}
			wrong++
		}
	}
	if wrong > 0 {
		return fmt.Errorf("%d of %d scores are wrong", wrong, len(b.want))
	}
	fmt.Fprintf(out, "verified: all %d scores equal %s\n", len(b.want),
		map[bool]string{false: "the sum of their seeded activity", true: "the example scorer's (2 per activity document plus its points)"}[example])
	return nil
}

// readAll reads every document of coll into docs, what naming it in the error.
func readAll(ctx context.Context, coll *mongo.Collection, what string, docs any) error {
	cur, err := coll.Find(ctx, bson.D{})
	if err == nil {
		err = cur.All(ctx, docs)
	}
	if err != nil {
		return fmt.Errorf("reading %s to verify: %w", what, err)
	}
	return nil
}

// untilDrained prints a progress line a second, from start, until the queue
// is empty (the time it was seen so), ctx ends (zero) or the service stops on
// its own (its error).
func untilDrained(ctx context.Context, svc *app.Service, out io.Writer, start time.Time, stopped <-chan struct{}) (time.Time, error) {
	tick, queue := time.Tick(time.Second), queuestate.New(svc.Colls.Queue, nil)
	lastAcked, lastUsers, last := 0.0, 0.0, start
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, nil
		case <-stopped:
			return time.Time{}, errors.New("the service stopped before the queue drained")
		case now := <-tick:
			st, err := queue.Read(ctx)
			if err != nil {
				fmt.Fprintf(out, "%6.1fs  (queue unreadable: %v)\n", now.Sub(start).Seconds(), err)
				continue
			}
			acked := metrics.Read(svc.Metrics.EntriesAcked)
			users := metrics.Read(svc.Metrics.Refreshes.WithLabelValues(metrics.OutcomeOK))
			dt := now.Sub(last).Seconds()
			fmt.Fprintf(out, "%6.1fs  depth %6d  oldest %7.1fs  %8.1f entries/s  %6.1f users/s  in flight %3.0f\n",
				now.Sub(start).Seconds(), st.Depth, st.OldestAge(now).Seconds(), (acked-lastAcked)/dt, (users-lastUsers)/dt,
				metrics.Read(svc.Metrics.UsersInFlight))
			lastAcked, lastUsers, last = acked, users, now
			if st.Depth == 0 {
				return now, nil
			}
		}
	}
}

// summary prints what a drain of secs did.
func summary(svc *app.Service, out io.Writer, secs float64, entries, users int) {
	m := svc.Metrics
	acked := metrics.Read(m.EntriesAcked)
	refreshes := metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeOK))
	fmt.Fprintf(out, "\ndrained %d entries of %d users in %.1fs: %.0f entries/s, %.1f users/s\n",
		entries, users, secs, acked/secs, refreshes/secs)
	fmt.Fprintf(out, "refreshes %.0f ok, %.0f failed; coalescing factor %.1f entries per refresh; OCC conflicts %.0f; dead letters %.0f\n",
		refreshes, metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeError)), acked/math.Max(refreshes, 1),
		metrics.Read(m.OCCConflicts),
		metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed))+metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts))+
			metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonTooLarge)))
	// The MongoDB round trips by command, per acknowledged entry.
	if mfs, err := svc.Registry.Gather(); err == nil {
		fmt.Fprint(out, "MongoDB commands (count, total server+network time):")
		total := 0.0
		for _, mf := range mfs {
			if mf.GetName() == "scorerefresh_mongo_command_duration_seconds" {
				for _, m := range mf.GetMetric() {
					h := m.GetHistogram()
					total += float64(h.GetSampleCount())
					fmt.Fprintf(out, " %s %d/%.1fs", m.GetLabel()[0].GetValue(), h.GetSampleCount(), h.GetSampleSum())
				}
			}
		}
		fmt.Fprintf(out, "; %.2f per entry\n", total/math.Max(acked, 1))
	}
	fmt.Fprintln(out, "(the progress line's counters are approximate: a line shows the entries acknowledged in that second, in flushes of up to 100 users)")
}

// scorerExample is --scorer-example: which example scorer of examples/ the
// demo drains through, "" for none (the rules). Bare, it is the Node one.
type scorerExample string

const (
	exampleNode = "node" // examples/nodescorer
	exampleGo   = "go"   // examples/httpscorer
)

func (e *scorerExample) String() string { return string(*e) }

// IsBoolFlag lets --scorer-example stand alone, meaning node.
func (e *scorerExample) IsBoolFlag() bool { return true }

func (e *scorerExample) Set(v string) error {
	x, ok := map[string]scorerExample{"true": exampleNode, exampleNode: exampleNode, exampleGo: exampleGo, "false": ""}[v]
	if !ok {
		return fmt.Errorf("%q: want node or go", v)
	}
	*e = x
	return nil
}

// takeScorerExampleArg reads "--scorer-example go": a boolean-style flag
// leaves its value as the first argument, and the flags after it unparsed.
func takeScorerExampleArg(fs *flag.FlagSet, e *scorerExample) error {
	if *e != exampleNode || fs.NArg() == 0 || (fs.Arg(0) != exampleNode && fs.Arg(0) != exampleGo) {
		return nil
	}
	*e = scorerExample(fs.Arg(0))
	return fs.Parse(fs.Args()[1:])
}

// withScorerExample builds or installs the example scorer which names (none
// when empty), starts it on a free loopback port reading cfg's database at
// uri, and points cfg at it once it listens. The context returned ends once
// the scorer exits: a demo draining through a dead scorer would wait forever.
func withScorerExample(ctx context.Context, cfg *config.Config, which scorerExample, uri string, stdout, stderr io.Writer) (_ context.Context, stop func(), err error) {
	if which == "" {
		return ctx, func() {}, nil
	}
	root, err := repoRoot()
	if err != nil {
		return nil, nil, err
	}
	var cmd *exec.Cmd
	tmp := "" // the Go scorer's binary's folder
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	switch which {
	case exampleNode:
		cmd, err = nodeScorer(ctx, filepath.Join(root, "examples", "nodescorer"), stderr)
	case exampleGo:
		if tmp, err = os.MkdirTemp("", "scorerefresh-demo-"); err == nil {
			cmd, err = goScorer(ctx, tmp)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	token := crand.Text()
	p, err := examplescorer.Start(ctx, cmd, []string{"MONGODB_URI=" + uri, "MONGODB_DATABASE=" + cfg.Database,
		"SCORER_TOKEN=" + token, "PORT=0", "LISTEN=127.0.0.1"}, stderr)
	if err != nil {
		return nil, nil, fmt.Errorf("the %s example scorer: %w (its log is above)", which, err)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	go func() {
		<-p.Done
		cancel(scorerExitError{fmt.Errorf("the %s example scorer exited (%v); its log is above", which, p.Err)})
	}()
	cfg.ScorerURL, cfg.ScorerToken = p.URL+"/score", token
	fmt.Fprintf(stdout, "the %s example scorer at %s computes the scores\n", which, cfg.ScorerURL)
	return runCtx, func() { p.Stop(); _ = os.RemoveAll(tmp) }, nil
}

// scorerExitError ends the context of withScorerExample: the example
// scorer exited (not an interrupt).
type scorerExitError struct{ error }

// nodeScorer is `node server.js`, after `npm ci` if its driver is not
// installed yet.
func nodeScorer(ctx context.Context, dir string, stderr io.Writer) (*exec.Cmd, error) {
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		return nil, errors.New("--scorer-example node needs node (20 or later) and npm on PATH (Debian: apt-get install nodejs npm); --scorer-example=go needs only Go")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "mongodb")); err != nil {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		install.Dir, install.Stdout, install.Stderr = dir, stderr, stderr
		if err := install.Run(); err != nil {
			return nil, fmt.Errorf("npm ci in %s: %w", dir, err)
		}
	}
	cmd := exec.Command(node, "server.js")
	cmd.Dir = dir
	return cmd, nil
}

// goScorer builds examples/httpscorer into dir.
func goScorer(ctx context.Context, dir string) (*exec.Cmd, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return nil, errors.New("--scorer-example go builds examples/httpscorer: it needs go on PATH")
	}
	bin, err := examplescorer.BuildGo(ctx, dir)
	return exec.Command(bin), err
}

// repoRoot is the repository holding examples/: the working directory or
// one of its parents, where `go run ./cmd/scorerefresh-demo` runs.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding examples/: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "examples", "nodescorer", "server.js")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("--scorer-example runs the scorers of examples/: run it inside the repository (not found above %s)", wd)
		}
	}
}
