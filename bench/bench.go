// Command scorerefresh-bench measures scorerefresh against the consumer it
// replaces, in one run, as ratios (these machines are noisy):
//
//	go run ./cmd/scorerefresh-bench -out bench/results          # the full run (about 25 minutes)
//	go run ./cmd/scorerefresh-bench -short -out /tmp/bench       # the smoke run CI does (seconds)
//
// Everything runs in this process: FerretDB (on a throwaway PostgreSQL when
// one can be started, else SQLite), the latency proxy (pkg/faultproxy), the
// producers, the reference consumer and scorerefresh itself, wired by
// internal/app exactly as `scorerefresh run` wires it. Each run first
// calibrates the server (time per query, queries per second) to report the
// two bounds a drain cannot beat, then runs the scenarios of
// docs/performance.md, each on a fresh database, reference and scorerefresh
// one after the other on identical data. It writes report.md, results.json
// and SVG/HTML charts to -out.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
	"github.com/scorerefresh/scorerefresh/scoring"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// benchOptions are the flags; defaults are the full run.
type benchOptions struct {
	out, backend, pgURL, scenarios, cpuProfile string
	short                                      bool
	seed                                       uint64

	rtt         time.Duration
	concurrency int
	sources     int // source documents over the three collections
	pool        int // users producers draw from
	sampleEvery time.Duration
	calSeq      int
	calLevel    time.Duration

	diverse, firehose, firehoseUsers int
	firehoseShare                    float64
	refMax, drainMax                 time.Duration

	wedge       time.Duration
	wedgeFactor float64

	recoveryPre, trigger, recoveryMax, recoveryRef time.Duration
	rttFactor                                      float64

	overload time.Duration

	scale, scaleWarm, scaleRTT time.Duration

	adaptiveOpts
	fleetOpts
	planOpts
	batchedOpts
	slowdownOpts
}

var allScenarios = []string{"diverse", "firehose", "wedge", "recovery", "overload", "scale", "adaptive", "fleet", "storm", "batched", "slowdown"}

func parseFlags(args []string, stderr io.Writer) (benchOptions, error) {
	fs := flag.NewFlagSet("scorerefresh-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchOptions
	fs.StringVar(&o.out, "out", "bench/results", "results folder: report.md, results.json, charts")
	fs.BoolVar(&o.short, "short", false, "smoke mode: tiny sizes and durations (seconds), SQLite unless -backend says otherwise; what CI runs")
	fs.StringVar(&o.backend, "backend", backendAuto, "FerretDB backend: auto (postgresql if a PostgreSQL can be started, else sqlite), sqlite, postgresql")
	fs.StringVar(&o.pgURL, "postgres-url", "", "PostgreSQL for -backend postgresql (default: start a throwaway cluster from the local binaries)")
	fs.StringVar(&o.scenarios, "scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run (calibration always runs)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server included) to this file")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of the data")
	fs.DurationVar(&o.rtt, "rtt", 20*time.Millisecond, "round-trip time the proxy adds to every MongoDB command")
	fs.IntVar(&o.concurrency, "concurrency", 16, "REFRESH_CONCURRENCY of scorerefresh")
	fs.IntVar(&o.sources, "sources", 150, "source documents over user_activity, posts and reviews (keep small: FerretDB scans them)")
	fs.IntVar(&o.pool, "pool", 2000, "users the producers of scenarios 3-5 draw from")
	fs.DurationVar(&o.sampleEvery, "sample", time.Second, "how often depth and oldest age are sampled")
	fs.IntVar(&o.calSeq, "calibrate-refreshes", 200, "sequential refreshes timed by the calibration")
	fs.DurationVar(&o.calLevel, "calibrate-time", 5*time.Second, "duration of each concurrency level of the throughput calibration")
	fs.IntVar(&o.diverse, "diverse", 2000, "scenario 1: entries, each of a distinct user")
	fs.IntVar(&o.firehose, "firehose", 20000, "scenario 2: entries")
	fs.Float64Var(&o.firehoseShare, "firehose-share", 0.94, "scenario 2: share of the entries of the one firehose user")
	fs.IntVar(&o.firehoseUsers, "firehose-users", 500, "scenario 2: users the other entries are spread over")
	fs.DurationVar(&o.refMax, "ref-max", 90*time.Second, "scenarios 1-2: the reference's drain is measured for at most this long (its rate is steady; a full drain takes it 10+ minutes)")
	fs.DurationVar(&o.drainMax, "drain-max", 10*time.Minute, "scenarios 1-2: cap on scorerefresh's drain")
	fs.DurationVar(&o.wedge, "wedge", 5*time.Minute, "scenario 3: how long the producer runs")
	fs.Float64Var(&o.wedgeFactor, "wedge-factor", 5, "scenario 3: arrival rate as a multiple of the reference's capacity")
	fs.DurationVar(&o.recoveryPre, "recovery-pre", 30*time.Second, "scenario 4: steady state before the trigger")
	fs.DurationVar(&o.trigger, "trigger", 60*time.Second, "scenario 4: how long the RTT is multiplied")
	fs.Float64Var(&o.rttFactor, "rtt-factor", 10, "scenario 4: RTT multiplier during the trigger")
	fs.DurationVar(&o.recoveryMax, "recovery-max", 120*time.Second, "scenario 4: how long scorerefresh is watched after restore, at most")
	fs.DurationVar(&o.recoveryRef, "recovery-ref", 75*time.Second, "scenario 4: how long the reference is watched after restore")
	fs.DurationVar(&o.overload, "overload", 60*time.Second, "scenario 5: duration of each load level")
	fs.DurationVar(&o.scale, "scale", 30*time.Second, "scenario 6: measurement window")
	fs.DurationVar(&o.scaleWarm, "scale-warm", 5*time.Second, "scenario 6: warm-up before the window")
	fs.DurationVar(&o.scaleRTT, "scale-rtt", 0, "scenario 6: RTT (0: the lowest multiple of 10 ms at which three processes stay latency-bound)")
	adaptiveFlags(fs, &o.adaptiveOpts)
	fleetFlags(fs, &o.fleetOpts)
	planFlags(fs, &o.planOpts)
	batchedFlags(fs, &o.batchedOpts)
	slowdownFlags(fs, &o.slowdownOpts)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		shrink := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		shrink("backend", func() { o.backend = backendSQLite })
		shrink("rtt", func() { o.rtt = 5 * time.Millisecond })
		shrink("sources", func() { o.sources = 40 })
		shrink("pool", func() { o.pool = 300 })
		shrink("sample", func() { o.sampleEvery = 250 * time.Millisecond })
		shrink("calibrate-refreshes", func() { o.calSeq = 10 })
		shrink("calibrate-time", func() { o.calLevel = 500 * time.Millisecond })
		shrink("diverse", func() { o.diverse = 60 })
		shrink("firehose", func() { o.firehose = 400 })
		shrink("firehose-users", func() { o.firehoseUsers = 20 })
		shrink("ref-max", func() { o.refMax = 4 * time.Second })
		shrink("drain-max", func() { o.drainMax = 30 * time.Second })
		shrink("wedge", func() { o.wedge = 5 * time.Second })
		shrink("recovery-pre", func() { o.recoveryPre = 3 * time.Second })
		shrink("trigger", func() { o.trigger = 3 * time.Second })
		shrink("recovery-max", func() { o.recoveryMax = 8 * time.Second })
		shrink("recovery-ref", func() { o.recoveryRef = 2 * time.Second })
		shrink("overload", func() { o.overload = 3 * time.Second })
		shrink("scale", func() { o.scale = 3 * time.Second })
		shrink("scale-warm", func() { o.scaleWarm = 3 * time.Second })
		shrink("scale-rtt", func() { o.scaleRTT = 10 * time.Millisecond })
		shrinkAdaptive(shrink, &o.adaptiveOpts)
		shrinkFleet(shrink, &o.fleetOpts)
		shrinkBatched(shrink, &o.batchedOpts)
		shrinkSlowdown(shrink, &o.slowdownOpts)
	}
	for _, s := range strings.Split(o.scenarios, ",") {
		// plan (the capacity planner's validation) runs only when named.
		if s := strings.TrimSpace(s); !slices.Contains(allScenarios, s) && s != "plan" {
			return o, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
	}
	if o.concurrency <= 0 || o.sources <= 0 || o.pool <= 0 || o.diverse <= 0 || o.firehose <= 0 || o.firehoseUsers <= 0 || o.rtt < 0 {
		return o, fmt.Errorf("sizes must be positive and -rtt not negative")
	}
	return o, o.fleetOpts.validate()
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
		}
		return 2
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := benchmark(ctx, o, environ, stdout); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
		return 1
	}
	return 0
}

// bench is one run of the suite.
type bench struct {
	opts      benchOptions
	environ   []string
	out       io.Writer
	srv       *server
	proxy     *faultproxy.Proxy
	direct    *mongo.Client // producers and the sampler: no proxy, not counted
	rulesPath string
	rules     *scoring.Rules
	svcLog    *slog.Logger
	cal       calibration
	seq       int
	targets   []target
}

func (b *bench) logf(format string, args ...any) { fmt.Fprintf(b.out, format+"\n", args...) }

func benchmark(ctx context.Context, o benchOptions, environ []string, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	b := &bench{opts: o, environ: environ, out: stdout}
	started := time.Now()

	// The rules file: the service loads it as SCORING_RULES, the reference
	// parses the same bytes.
	b.rulesPath = filepath.Join(o.out, "rules.yaml")
	if err := os.WriteFile(b.rulesPath, []byte(rulesYAML), 0o644); err != nil {
		return err
	}
	var err error
	if b.rulesPath, err = filepath.Abs(b.rulesPath); err != nil {
		return err
	}
	if b.rules, err = scoring.LoadRules(b.rulesPath); err != nil {
		return err
	}
	logPath := filepath.Join(o.out, "service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer func() {
		logFile.Close()
		if st, err := os.Stat(logPath); err == nil && st.Size() == 0 {
			os.Remove(logPath) // nothing logged at warn or above: no empty file among the results
		}
	}()
	b.svcLog = slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))

	b.srv, err = startServer(ctx, o.backend, o.pgURL, stdout)
	if err != nil {
		return err
	}
	defer b.srv.Close()
	b.proxy, err = faultproxy.Start(context.Background(), faultproxy.Config{Target: b.srv.Addr})
	if err != nil {
		return err
	}
	defer b.proxy.Close()
	b.direct, err = mongo.Connect(options.Client().ApplyURI(b.srv.URI).SetTimeout(5 * time.Minute))
	if err != nil {
		return err
	}
	defer b.direct.Disconnect(context.Background())

	rep := &report{
		Started: started.UTC().Format(time.RFC3339), Short: o.short, Server: b.srv.Name,
		Machine: machine(), GoVersion: runtime.Version(), Command: commandLine(o),
		RTTms: ms(o.rtt), Concurrency: o.concurrency, Rules: len(b.rules.Components), Sources: o.sources, Pool: o.pool,
	}
	if rep.Compare, err = loadCompare(o.compare, o.compareLabel); err != nil {
		return err
	}
	b.logf("scorerefresh-bench: %s; %s", b.srv.Name, rep.Machine)
	b.logf("RTT %s through pkg/faultproxy; REFRESH_CONCURRENCY %d; %d rule components over %d source documents; results in %s",
		o.rtt, o.concurrency, len(b.rules.Components), o.sources, o.out)

	b.logf("\n== calibration (direct connection, no proxy)")
	if b.cal, err = b.calibrate(ctx, o.calSeq, o.calLevel); err != nil {
		return fmt.Errorf("calibrating: %w", err)
	}
	b.cal.describe(b.logf)
	rep.Calibration = b.cal

	want := map[string]bool{}
	for _, s := range strings.Split(o.scenarios, ",") {
		want[strings.TrimSpace(s)] = true
	}
	// Later scenarios size their load from scenario 1's measured rates; when
	// it is skipped, from the calibration's bounds.
	bounds := b.cal.bounds(o.rtt, o.concurrency)
	srRate := 0.9 * bounds.Lower
	refRate := 1 / (b.cal.RoundTrips * (o.rtt.Seconds() + b.cal.ServerMs/1000))
	write := func() error {
		rep.Targets = b.targets
		rep.Seconds = time.Since(started).Seconds()
		return rep.write(o.out)
	}
	if want["diverse"] {
		if rep.Diverse, err = b.diverse(ctx); err != nil {
			return err
		}
		srRate, refRate = rep.Diverse.Scorerefresh.Rate, rep.Diverse.Reference.Rate
		if err := write(); err != nil {
			return err
		}
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"firehose", func() (err error) { rep.Firehose, err = b.firehose(ctx); return }},
		{"wedge", func() (err error) { rep.Wedge, err = b.wedge(ctx, refRate, srRate); return }},
		{"recovery", func() (err error) { rep.Recovery, err = b.recovery(ctx, srRate); return }},
		{"overload", func() (err error) { rep.Overload, err = b.overload(ctx, srRate); return }},
		{"scale", func() (err error) { rep.Scale, err = b.scale(ctx); return }},
		{"adaptive", func() (err error) { rep.Adaptive, err = b.adaptive(ctx); return }},
		{"fleet", func() (err error) { rep.Fleet, err = b.fleet(ctx); return }},
		{"storm", func() (err error) { rep.Storm, err = b.storm(ctx); return }},
		{"plan", func() (err error) { _, err = b.plan(ctx); return }},
		{"batched", func() (err error) { rep.Batched, err = b.batched(ctx, refRate); return }},
		{"slowdown", func() (err error) { rep.Slowdown, err = b.slowdown(ctx, srRate); return }},
	}
	for _, s := range steps {
		if !want[s.name] {
			continue
		}
		if err := s.do(); err != nil {
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		// Partial results survive a later failure or an interrupted run.
		if err := write(); err != nil {
			return err
		}
	}
	if err := write(); err != nil {
		return err
	}
	b.logf("\n== targets")
	for _, t := range b.targets {
		b.logf("  %-4s %-12s %s: %s", verdict(t), t.Scenario, t.Target, t.Figure)
	}
	b.logf("\nwrote %s (%.0fs)", filepath.Join(o.out, "report.md"), time.Since(started).Seconds())
	return nil
}

func verdict(t target) string {
	switch {
	case !t.Applies:
		return "n/a"
	case t.Met:
		return "met"
	}
	return "NOT"
}

// commandLine is how to reproduce this run.
func commandLine(o benchOptions) string {
	var b strings.Builder
	b.WriteString("go run ./cmd/scorerefresh-bench")
	for _, a := range os.Args[1:] {
		b.WriteString(" " + a)
	}
	return b.String()
}

func machine() string {
	cpu := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s/%s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH)
}
