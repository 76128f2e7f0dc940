// Package bench measures scorerefresh against the consumer it replaces, in
// one run, as ratios (these machines are noisy). cmd/scorerefresh-bench is
// its command line:
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
// and SVG/HTML charts to Config.Out.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Bench is one run of the suite: New checks its Config, Run runs it.
type Bench struct {
	cfg       Config
	environ   []string // the service's environment; scenarios add to it for their runs
	out       io.Writer
	srv       *server
	proxy     *faultproxy.Proxy
	direct    *mongo.Client // producers and the sampler: no proxy, not counted
	rulesPath string
	rules     *scoring.Rules
	svcLog    *slog.Logger
	cal       calibration
	runs      int    // databases created so far: each run gets a fresh, numbered one
	runID     string // this invocation's prefix of them: on a server of one's own, two benches at once must not share (and drop) each other's
	targets   []target
}

// New checks cfg and returns the run it describes.
func New(cfg Config) (*Bench, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out := cfg.Log
	if out == nil {
		out = io.Discard
	}
	return &Bench{cfg: cfg, environ: cfg.Environ, out: out, runID: fmt.Sprintf("%06x", rand.Uint32()>>8)}, nil
}

func (b *Bench) logf(format string, args ...any) { fmt.Fprintf(b.out, format+"\n", args...) }

// Run starts the server, calibrates it, runs the scenarios Config names
// and writes the results to Config.Out after each one, so partial results
// survive a failure or an interrupted run. It returns what it measured.
func (b *Bench) Run(ctx context.Context) (*Report, error) {
	o := b.cfg
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	started := time.Now()
	closeLog, err := b.setUp(ctx)
	defer closeLog()
	if err != nil {
		return nil, err
	}
	defer b.srv.Close()
	defer b.proxy.Close()
	defer b.direct.Disconnect(context.Background())

	rep := b.newReport(started)
	if rep.Compare, err = loadCompare(o.Fleet.Compare, o.Fleet.CompareLabel); err != nil {
		return nil, err
	}
	b.logf("scorerefresh-bench: %s; %s", b.srv.Name, rep.Machine)
	b.logf("RTT %s through pkg/faultproxy; REFRESH_CONCURRENCY %d; %d rule components over %d source documents; results in %s",
		o.RTT, o.Concurrency, len(b.rules.Components), o.Sources, o.Out)

	b.logf("\n== calibration (direct connection, no proxy)")
	if b.cal, err = b.calibrate(ctx, o.CalibrationRefreshes, o.CalibrationLevelTime); err != nil {
		return nil, fmt.Errorf("calibrating: %w", err)
	}
	b.cal.describe(b.logf)
	rep.Calibration = b.cal

	write := func() error {
		rep.Targets = b.targets
		rep.Seconds = time.Since(started).Seconds()
		return rep.write(o.Out)
	}
	if err := b.runScenarios(ctx, rep, write); err != nil {
		return rep, err
	}
	if err := write(); err != nil {
		return rep, err
	}
	b.logf("\n== targets")
	for _, t := range b.targets {
		b.logf("  %-4s %-12s %s: %s", verdict(t), t.Scenario, t.Target, t.Figure)
	}
	b.logf("\nwrote %s (%.0fs)", filepath.Join(o.Out, "report.md"), time.Since(started).Seconds())
	return rep, nil
}

// setUp writes the rules file, opens the service's log and starts the
// server, the proxy and the direct client. closeLog is never nil.
func (b *Bench) setUp(ctx context.Context) (closeLog func(), err error) {
	closeLog = func() {}
	// The rules file: the service loads it as SCORING_RULES, the reference
	// parses the same bytes.
	b.rulesPath = filepath.Join(b.cfg.Out, "rules.yaml")
	if err := os.WriteFile(b.rulesPath, []byte(rulesYAML), 0o644); err != nil {
		return closeLog, err
	}
	if b.rulesPath, err = filepath.Abs(b.rulesPath); err != nil {
		return closeLog, err
	}
	if b.rules, err = scoring.LoadRules(b.rulesPath); err != nil {
		return closeLog, err
	}
	if closeLog, err = b.openServiceLog(); err != nil {
		return func() {}, err
	}
	if b.srv, err = startServer(ctx, b.cfg.Backend, b.cfg.PostgreSQL, b.cfg.MongoDB, b.out); err != nil {
		return closeLog, err
	}
	if b.proxy, err = faultproxy.Start(context.Background(), faultproxy.Config{Target: b.srv.Addr}); err != nil {
		b.srv.Close()
		return closeLog, err
	}
	if b.direct, err = mongo.Connect(options.Client().ApplyURI(b.srv.URI).SetTimeout(5 * time.Minute)); err != nil {
		b.proxy.Close()
		b.srv.Close()
		return closeLog, err
	}
	return closeLog, nil
}

// openServiceLog sends the service's warnings and errors to service.log in
// the results; the file is removed at the end if nothing was logged.
func (b *Bench) openServiceLog() (closeLog func(), err error) {
	logPath := filepath.Join(b.cfg.Out, "service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	b.svcLog = slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return func() {
		logFile.Close()
		if st, err := os.Stat(logPath); err == nil && st.Size() == 0 {
			os.Remove(logPath) // nothing logged at warn or above: no empty file among the results
		}
	}, nil
}

func (b *Bench) newReport(started time.Time) *Report {
	o := b.cfg
	return &Report{
		Started: started.UTC().Format(time.RFC3339), Short: o.Short, Server: b.srv.Name,
		Machine: machine(), GoVersion: runtime.Version(), Command: o.Command,
		RTTms: ms(o.RTT), Concurrency: o.Concurrency, Rules: len(b.rules.Components), Sources: o.Sources, Pool: o.Pool,
	}
}

// runScenarios runs the scenarios the Config names, in order, writing the
// results after each.
func (b *Bench) runScenarios(ctx context.Context, rep *Report, write func() error) error {
	want := b.cfg.wanted()
	// Later scenarios size their load from scenario 1's measured rates; when
	// it is skipped, from the calibration's bounds.
	rates := b.estimatedRates()
	if want["diverse"] {
		var err error
		if rep.Diverse, err = b.diverse(ctx); err != nil {
			return err
		}
		rates = drainRates{scorerefresh: rep.Diverse.Scorerefresh.Rate, reference: rep.Diverse.Reference.Rate}
		if err := write(); err != nil {
			return err
		}
	}
	for _, s := range b.scenarioSteps(ctx, rep, rates) {
		if !want[s.name] {
			continue
		}
		if err := s.run(); err != nil {
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		// Partial results survive a later failure or an interrupted run.
		if err := write(); err != nil {
			return err
		}
	}
	return nil
}

// drainRates are the entries per second each consumer drains a diverse
// backlog at: the load of the later scenarios is sized from them.
type drainRates struct{ scorerefresh, reference float64 }

// estimatedRates are drainRates from the calibration alone: scorerefresh
// at 90% of its lower bound, the reference one refresh at a time.
func (b *Bench) estimatedRates() drainRates {
	bounds := b.cal.bounds(b.cfg.RTT, b.cfg.Concurrency)
	return drainRates{
		scorerefresh: 0.9 * bounds.Lower,
		reference:    1 / (b.cal.RoundTrips * (b.cfg.RTT.Seconds() + b.cal.ServerMs/1000)),
	}
}

// scenarioStep is one scenario after the diverse drain, storing its result
// in the report.
type scenarioStep struct {
	name string
	run  func() error
}

func (b *Bench) scenarioSteps(ctx context.Context, rep *Report, rates drainRates) []scenarioStep {
	scorerefreshRate, referenceRate := rates.scorerefresh, rates.reference
	return []scenarioStep{
		{"firehose", func() (err error) { rep.Firehose, err = b.firehose(ctx); return }},
		{"wedge", func() (err error) { rep.Wedge, err = b.wedge(ctx, referenceRate, scorerefreshRate); return }},
		{"recovery", func() (err error) { rep.Recovery, err = b.recovery(ctx, scorerefreshRate); return }},
		{"overload", func() (err error) { rep.Overload, err = b.overload(ctx, scorerefreshRate); return }},
		{"scale", func() (err error) { rep.Scale, err = b.scale(ctx); return }},
		{"adaptive", func() (err error) { rep.Adaptive, err = b.adaptive(ctx); return }},
		{"fleet", func() (err error) { rep.Fleet, err = b.fleet(ctx); return }},
		{"storm", func() (err error) { rep.Storm, err = b.storm(ctx); return }},
		{"plan", func() (err error) { _, err = b.plan(ctx); return }},
		{"batched", func() (err error) { rep.Batched, err = b.batched(ctx, referenceRate); return }},
		{"slowdown", func() (err error) { rep.Slowdown, err = b.slowdown(ctx, scorerefreshRate); return }},
	}
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
