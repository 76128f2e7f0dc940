// Package bench measures scorerefresh, and the consumer it replaces, over a
// table of scenarios (presets.go), each row on a fresh database, in this
// process as `scorerefresh run` wires it (internal/app). cmd/scorerefresh-bench
// is its command line; docs/performance.md says what it measures.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Config is one run: the flags (ParseArgs says what each means), and what the caller fills in.
type Config struct {
	Out, Scenarios, Rows, Backend, PostgreSQL, MongoDB, CPUProfile string
	Short                                                          bool
	RTT                                                            time.Duration
	Concurrency                                                    int
	Seed                                                           uint64

	Environ []string  // the service's environment, as `scorerefresh run` reads it; each row adds its own
	Log     io.Writer // progress lines; nil discards them
	Command string    // how to reproduce the run, for the report
}

// ParseArgs reads the command line into a Config; flag.ErrHelp when -h
// asked for the usage, which it wrote to stderr, as it does parse errors.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("scorerefresh-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	fs.StringVar(&c.Out, "out", "bench/results", "results folder: report.md, results.json")
	fs.BoolVar(&c.Short, "short", false, "every row at smoke size (seconds): what CI runs")
	fs.StringVar(&c.Scenarios, "scenarios", strings.Join(presetNames(), ","), "comma-separated presets: "+strings.Join(presetNames(), ", "))
	fs.StringVar(&c.Rows, "rows", "", "comma-separated row names: run only these rows of the presets (an unknown name lists them)")
	fs.StringVar(&c.Backend, "backend", backendSQLite, "server: sqlite (embedded FerretDB), postgresql (FerretDB on a throwaway PostgreSQL cluster, or -postgres-url) or mongodb (-mongodb-uri; picked when that is set)")
	fs.StringVar(&c.PostgreSQL, "postgres-url", "", "PostgreSQL for -backend postgresql (default: start a throwaway cluster from the local binaries)")
	fs.StringVar(&c.MongoDB, "mongodb-uri", os.Getenv("TEST_MONGODB_URI"), "MongoDB for -backend mongodb: one host (the proxy forwards to one address); each row's database is dropped at its end (default $TEST_MONGODB_URI)")
	fs.DurationVar(&c.RTT, "rtt", 20*time.Millisecond, "round trip the proxy adds to every command, unless a row sets its own")
	fs.IntVar(&c.Concurrency, "concurrency", 16, "REFRESH_CONCURRENCY, unless a row's environment sets it")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed of the data")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run (server included) to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if c.MongoDB != "" && !explicit["backend"] {
		c.Backend = backendMongoDB
	}
	if c.Short && !explicit["rtt"] {
		c.RTT = size(true).rtt()
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	for _, s := range splitList(c.Scenarios) {
		if !slices.Contains(presetNames(), s) {
			return fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(presetNames(), ", "))
		}
	}
	switch {
	case !slices.Contains([]string{backendSQLite, backendPostgreSQL, backendMongoDB}, c.Backend):
		return fmt.Errorf("-backend %q: want sqlite, postgresql or mongodb", c.Backend)
	case c.Backend == backendMongoDB && c.MongoDB == "":
		return errors.New("-backend mongodb needs -mongodb-uri (or $TEST_MONGODB_URI)")
	case c.Concurrency <= 0 || c.RTT < 0:
		return errors.New("-concurrency must be positive and -rtt not negative")
	}
	return nil
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

// Bench is one run: New checks its Config, Run runs it.
type Bench struct {
	cfg         Config
	srv         *server
	proxy       *faultproxy.Proxy
	knee, slope atomic.Int64  // the proxy's delay past a knee of busy connections (setUp), set by a row's steps
	failing     atomic.Bool   // a step's Fail: every refresh of scorerefresh fails (startService)
	direct      *mongo.Client // producers, seeding and the sampler: no proxy, not counted
	svcLog      *slog.Logger
	cal         calibration
	tmp         string // the run's scratch folder
	runs        int    // databases created so far: each row gets a fresh, numbered one
	runID       string // this run's prefix of them: two benches on one server must not drop each other's
	closers     []func()
}

func New(cfg Config) (*Bench, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Bench{cfg: cfg, runID: fmt.Sprintf("%06x", rand.Uint32()>>8)}, nil
}

func (b *Bench) logf(format string, args ...any) {
	if b.cfg.Log != nil {
		fmt.Fprintf(b.cfg.Log, format+"\n", args...)
	}
}

// Run starts the server, calibrates it, runs the rows of the presets and
// writes the report after each row, so partial results survive a failure.
func (b *Bench) Run(ctx context.Context) (*Report, error) {
	rows, err := selectRows(splitList(b.cfg.Scenarios), splitList(b.cfg.Rows), b.cfg.Short)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.cfg.Out, 0o755); err != nil {
		return nil, err
	}
	started := time.Now()
	defer func() {
		for _, undo := range slices.Backward(b.closers) {
			undo()
		}
	}()
	if err := b.setUp(ctx); err != nil {
		return nil, err
	}
	rep := &Report{Started: started.UTC().Format(time.RFC3339), Short: b.cfg.Short, Server: b.srv.Name, Machine: machine(),
		GoVersion: runtime.Version(), Command: b.cfg.Command, RTTms: ms(b.cfg.RTT), Concurrency: b.cfg.Concurrency}
	b.logf("scorerefresh-bench: %s; %s; %d rows; results in %s", b.srv.Name, rep.Machine, len(rows), b.cfg.Out)
	if b.cal, err = b.calibrate(ctx); err != nil {
		return nil, fmt.Errorf("calibrating: %w", err)
	}
	rep.Calibration = b.cal
	b.logf("calibration: %.1f round trips per refresh, %.2f ms of server per query, %.0f queries/s at most; bounds at RTT %s: %s",
		b.cal.RoundTrips, b.cal.ServerMs, b.cal.QPS, b.cfg.RTT, b.cal.Bounds)
	for _, row := range rows {
		res, err := b.runRow(ctx, row)
		if err != nil {
			return rep, fmt.Errorf("row %s: %w", row.Name, err)
		}
		rep.Results = append(rep.Results, res)
		rep.judge()
		rep.Seconds = time.Since(started).Seconds()
		if err := rep.write(b.cfg.Out); err != nil {
			return rep, err
		}
	}
	for _, t := range rep.Targets {
		b.logf("  %-4s %-10s %s: %s", t.verdict(), t.Preset, t.Target, t.Figure)
	}
	b.logf("wrote %s (%.0fs)", filepath.Join(b.cfg.Out, "report.md"), time.Since(started).Seconds())
	return rep, nil
}

// setUp makes the scratch folder, opens the service's log and starts the
// server, the proxy and the direct client; b.closers undo whatever it did.
func (b *Bench) setUp(ctx context.Context) (err error) {
	if b.tmp, err = os.MkdirTemp("", "scorerefresh-bench-"); err != nil {
		return err
	}
	b.closers = append(b.closers, func() { os.RemoveAll(b.tmp) })
	logPath := filepath.Join(b.cfg.Out, "service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func() {
		logFile.Close()
		if st, err := os.Stat(logPath); err == nil && st.Size() == 0 {
			os.Remove(logPath) // nothing logged at warn or above: no empty file among the results
		}
	})
	b.svcLog = slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if b.srv, err = b.startServer(ctx); err != nil {
		return err
	}
	knee := func(busy int) (up, down time.Duration) { // the current step's slope per busy connection past its knee, upstream
		if k := int(b.knee.Load()); busy > k {
			return time.Duration(b.slope.Load()) * time.Duration(busy-k), 0
		}
		return 0, 0
	}
	if b.proxy, err = faultproxy.Start(context.Background(), faultproxy.Config{Target: b.srv.Addr, DelayFunc: knee}); err != nil {
		return err
	}
	b.closers = append(b.closers, b.proxy.Close)
	b.direct, err = mongo.Connect(options.Client().ApplyURI(b.srv.URI).SetTimeout(5 * time.Minute))
	if err == nil {
		b.closers = append(b.closers, func() { _ = b.direct.Disconnect(context.Background()) })
	}
	return err
}

func (b *Bench) nextDatabase(name string) string {
	b.runs++
	return fmt.Sprintf("bench%s_%02d_%s", b.runID, b.runs, strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

func machine() string {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	_, model, _ := strings.Cut(string(cpuinfo), "model name")
	model, _, _ = strings.Cut(strings.TrimLeft(model, "\t :"), "\n")
	return fmt.Sprintf("%d cores (%s), %s/%s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// calibration is what the server costs, measured on the direct connection
// before the rows.
type calibration struct {
	RoundTrips float64 `json:"round_trips_per_refresh"`
	ServerMs   float64 `json:"server_ms_per_query"`
	QPS        float64 `json:"max_queries_per_second"`
	Bounds     bounds  `json:"bounds"` // at the run's RTT and REFRESH_CONCURRENCY
}

// bounds are the two ceilings of a drain of distinct users (refreshes per
// second), from the planner's arithmetic.
type bounds struct {
	Latency float64 `json:"latency"` // every slot busy, each refresh its round trips of RTT + server time
	Server  float64 `json:"server"`  // the server's queries per second over a refresh's round trips
	Lower   float64 `json:"lower"`
}

func (b bounds) String() string {
	return fmt.Sprintf("latency %.1f/s, server %.1f/s", b.Latency, b.Server)
}

// bounds at rtt with slots refreshes at once.
func (c calibration) bounds(rtt time.Duration, slots int) bounds {
	latency := planner.LatencyCeiling(float64(slots), c.RoundTrips, rtt.Seconds()+c.ServerMs/1000)
	server := planner.ServerCeiling(c.QPS, c.RoundTrips)
	return bounds{Latency: latency, Server: server, Lower: min(latency, server)}
}

func (b *Bench) calibrate(ctx context.Context) (calibration, error) {
	sequential, level := pick(size(b.cfg.Short), 200, 10), pick(size(b.cfg.Short), 5*time.Second, 500*time.Millisecond)
	var commands, nanos atomic.Int64
	monitor := &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		commands.Add(1)
		nanos.Add(int64(e.Duration))
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(b.srv.URI).SetMaxPoolSize(200).SetMonitor(monitor))
	if err != nil {
		return calibration{}, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(b.nextDatabase("calibrate"))
	defer func() { _ = db.Drop(context.Background()) }()
	_, rules, err := b.rulesFile(scorerRules)
	if err == nil {
		err = b.seedSources(ctx, db)
	}
	if err != nil {
		return calibration{}, err
	}
	refresher := scoring.NewRefresher(scoring.NewRecomputer(db, rules), scoring.NewStore(db.Collection("user_scores"), scoring.StoreConfig{}))
	var next atomic.Int64
	refresh := func(ctx context.Context) error {
		return refresher.Refresh(ctx, userName(int(next.Add(1))%b.pool()), time.Now())
	}
	for i := range sequential + 5 {
		if i == 5 { // the first few warm the server up
			commands.Store(0)
			nanos.Store(0)
		}
		if err = refresh(ctx); err != nil {
			return calibration{}, err
		}
	}
	c := calibration{RoundTrips: float64(commands.Load()) / float64(sequential)}
	c.ServerMs = ms(time.Duration(nanos.Load())) / float64(max(commands.Load(), 1))
	for _, workers := range []int{4, 16, 48} {
		commands.Store(0)
		wctx, cancel := context.WithTimeout(ctx, level)
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for wctx.Err() == nil {
					_ = refresh(wctx)
				}
			})
		}
		wg.Wait()
		cancel()
		c.QPS = max(c.QPS, float64(commands.Load())/time.Since(start).Seconds())
	}
	c.Bounds = c.bounds(b.cfg.RTT, b.cfg.Concurrency)
	return c, ctx.Err()
}
