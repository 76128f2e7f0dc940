package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Config is one run of the suite: every field is a flag of
// cmd/scorerefresh-bench (named in brackets), except the last three, which
// the caller fills in. The flags' defaults are the full run; Shrink gives
// the smoke run's sizes.
type Config struct {
	Out        string // results folder: report.md, results.json, charts [-out]
	Short      bool   // smoke mode: tiny sizes and durations; the figures mean nothing [-short]
	Backend    string // server: FerretDB on auto, sqlite or postgresql, or mongodb (MongoDB URI) [-backend]
	PostgreSQL string // PostgreSQL URL for the postgresql backend; empty: start a throwaway cluster [-postgres-url]
	MongoDB    string // a MongoDB of one's own for the mongodb backend [-mongodb-uri, or $TEST_MONGODB_URI]
	Scenarios  string // comma-separated scenarios to run; calibration always runs [-scenarios]
	CPUProfile string // a CPU profile of the whole run is written here by the caller; set, it tells the bench the profiler is taken [-cpuprofile]
	Seed       uint64 // random seed of the data [-seed]

	RTT         time.Duration // round-trip time the proxy adds to every MongoDB command [-rtt]
	Concurrency int           // REFRESH_CONCURRENCY of scorerefresh [-concurrency]
	Sources     int           // source documents over user_activity, posts and reviews [-sources]
	Pool        int           // users the producers draw from [-pool]
	SampleEvery time.Duration // how often queue depth and oldest age are sampled [-sample]

	CalibrationRefreshes int           // sequential refreshes timed by the calibration [-calibrate-refreshes]
	CalibrationLevelTime time.Duration // duration of each concurrency level of the throughput calibration [-calibrate-time]

	DiverseEntries  int           // scenario 1: entries, each of a distinct user [-diverse]
	FirehoseEntries int           // scenario 2: entries [-firehose]
	FirehoseShare   float64       // scenario 2: share of the entries of the one firehose user [-firehose-share]
	FirehoseUsers   int           // scenario 2: users the other entries are spread over [-firehose-users]
	ReferenceMax    time.Duration // scenarios 1-2: the reference's drain is measured for at most this long [-ref-max]
	DrainMax        time.Duration // scenarios 1-2: cap on scorerefresh's drain [-drain-max]

	WedgeFor    time.Duration // scenario 3: how long the producer runs [-wedge]
	WedgeFactor float64       // scenario 3: arrival rate as a multiple of the reference's capacity [-wedge-factor]

	RecoveryBefore         time.Duration // scenario 4: steady state before the trigger [-recovery-pre]
	TriggerFor             time.Duration // scenario 4: how long the RTT is multiplied [-trigger]
	TriggerRTTFactor       float64       // scenario 4: RTT multiplier during the trigger [-rtt-factor]
	RecoveryMax            time.Duration // scenario 4: how long scorerefresh is watched after restore, at most [-recovery-max]
	RecoveryReferenceWatch time.Duration // scenario 4: how long the reference is watched after restore [-recovery-ref]

	OverloadPerLevel time.Duration // scenario 5: duration of each load level [-overload]

	ScaleWindow time.Duration // scenario 6: measurement window [-scale]
	ScaleWarmUp time.Duration // scenario 6: warm-up before the window [-scale-warm]
	ScaleRTT    time.Duration // scenario 6: RTT; 0 picks one at which three processes stay latency-bound [-scale-rtt]

	Adaptive AdaptiveConfig
	Fleet    FleetConfig // the fleet and the storm scenarios
	Plan     PlanConfig
	Batched  BatchedConfig
	Slowdown SlowdownConfig

	// Environ is the environment the service under test starts from, as
	// `scorerefresh run` reads it (the bench adds the connection, database,
	// rules and concurrency of each run).
	Environ []string
	// Log receives the progress lines and figures as the run goes; nil
	// discards them.
	Log io.Writer
	// Command is how to reproduce the run, for the report.
	Command string
}

// Scenarios in the order they run; "plan" runs only when named.
var allScenarios = []string{"diverse", "firehose", "wedge", "recovery", "overload", "scale", "adaptive", "fleet", "storm", "batched", "slowdown"}

// RegisterFlags defines the flags of c on fs, with the full run's defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.coreFlags(fs)
	c.scenarioFlags(fs)
	adaptiveFlags(fs, &c.Adaptive)
	fleetFlags(fs, &c.Fleet)
	planFlags(fs, &c.Plan)
	batchedFlags(fs, &c.Batched)
	slowdownFlags(fs, &c.Slowdown)
}

func (c *Config) coreFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Out, "out", "bench/results", "results folder: report.md, results.json, charts")
	fs.BoolVar(&c.Short, "short", false, "smoke mode: tiny sizes and durations (seconds), SQLite unless -backend says otherwise; what CI runs")
	fs.StringVar(&c.Backend, "backend", backendAuto, "server: auto (FerretDB on postgresql if a PostgreSQL can be started, else sqlite), sqlite, postgresql, or mongodb (a server of one's own: -mongodb-uri; auto picks it when that is set)")
	fs.StringVar(&c.PostgreSQL, "postgres-url", "", "PostgreSQL for -backend postgresql (default: start a throwaway cluster from the local binaries)")
	fs.StringVar(&c.MongoDB, "mongodb-uri", os.Getenv("TEST_MONGODB_URI"), "MongoDB for -backend mongodb: one host (a standalone mongod or a replica set's primary; the proxy forwards to one address), credentials and options kept; each run's database is dropped at its end (default $TEST_MONGODB_URI)")
	fs.StringVar(&c.Scenarios, "scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run (calibration always runs)")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run (server included) to this file")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed of the data")
	fs.DurationVar(&c.RTT, "rtt", 20*time.Millisecond, "round-trip time the proxy adds to every MongoDB command")
	fs.IntVar(&c.Concurrency, "concurrency", 16, "REFRESH_CONCURRENCY of scorerefresh")
	fs.IntVar(&c.Sources, "sources", 150, "source documents over user_activity, posts and reviews (keep small: FerretDB scans them)")
	fs.IntVar(&c.Pool, "pool", 2000, "users the producers of scenarios 3-5 draw from")
	fs.DurationVar(&c.SampleEvery, "sample", time.Second, "how often depth and oldest age are sampled")
	fs.IntVar(&c.CalibrationRefreshes, "calibrate-refreshes", 200, "sequential refreshes timed by the calibration")
	fs.DurationVar(&c.CalibrationLevelTime, "calibrate-time", 5*time.Second, "duration of each concurrency level of the throughput calibration")
}

func (c *Config) scenarioFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.DiverseEntries, "diverse", 2000, "scenario 1: entries, each of a distinct user")
	fs.IntVar(&c.FirehoseEntries, "firehose", 20000, "scenario 2: entries")
	fs.Float64Var(&c.FirehoseShare, "firehose-share", 0.94, "scenario 2: share of the entries of the one firehose user")
	fs.IntVar(&c.FirehoseUsers, "firehose-users", 500, "scenario 2: users the other entries are spread over")
	fs.DurationVar(&c.ReferenceMax, "ref-max", 90*time.Second, "scenarios 1-2: the reference's drain is measured for at most this long (its rate is steady; a full drain takes it 10+ minutes)")
	fs.DurationVar(&c.DrainMax, "drain-max", 10*time.Minute, "scenarios 1-2: cap on scorerefresh's drain")
	fs.DurationVar(&c.WedgeFor, "wedge", 5*time.Minute, "scenario 3: how long the producer runs")
	fs.Float64Var(&c.WedgeFactor, "wedge-factor", 5, "scenario 3: arrival rate as a multiple of the reference's capacity")
	fs.DurationVar(&c.RecoveryBefore, "recovery-pre", 30*time.Second, "scenario 4: steady state before the trigger")
	fs.DurationVar(&c.TriggerFor, "trigger", 60*time.Second, "scenario 4: how long the RTT is multiplied")
	fs.Float64Var(&c.TriggerRTTFactor, "rtt-factor", 10, "scenario 4: RTT multiplier during the trigger")
	fs.DurationVar(&c.RecoveryMax, "recovery-max", 120*time.Second, "scenario 4: how long scorerefresh is watched after restore, at most")
	fs.DurationVar(&c.RecoveryReferenceWatch, "recovery-ref", 75*time.Second, "scenario 4: how long the reference is watched after restore")
	fs.DurationVar(&c.OverloadPerLevel, "overload", 60*time.Second, "scenario 5: duration of each load level")
	fs.DurationVar(&c.ScaleWindow, "scale", 30*time.Second, "scenario 6: measurement window")
	fs.DurationVar(&c.ScaleWarmUp, "scale-warm", 5*time.Second, "scenario 6: warm-up before the window")
	fs.DurationVar(&c.ScaleRTT, "scale-rtt", 0, "scenario 6: RTT (0: the lowest multiple of 10 ms at which three processes stay latency-bound)")
}

// Shrink sets the smoke run's sizes and durations (what -short means) on
// every field whose flag was not given explicitly.
func (c *Config) Shrink(explicit func(flag string) bool) {
	shrink := func(name string, apply func()) {
		if !explicit(name) {
			apply()
		}
	}
	c.shrinkCore(shrink)
	shrinkAdaptive(shrink, &c.Adaptive)
	shrinkFleet(shrink, &c.Fleet)
	shrinkBatched(shrink, &c.Batched)
	shrinkSlowdown(shrink, &c.Slowdown)
}

func (c *Config) shrinkCore(shrink func(string, func())) {
	shrink("backend", func() { c.Backend = backendSQLite })
	shrink("rtt", func() { c.RTT = 5 * time.Millisecond })
	shrink("sources", func() { c.Sources = 40 })
	shrink("pool", func() { c.Pool = 300 })
	shrink("sample", func() { c.SampleEvery = 250 * time.Millisecond })
	shrink("calibrate-refreshes", func() { c.CalibrationRefreshes = 10 })
	shrink("calibrate-time", func() { c.CalibrationLevelTime = 500 * time.Millisecond })
	shrink("diverse", func() { c.DiverseEntries = 60 })
	shrink("firehose", func() { c.FirehoseEntries = 400 })
	shrink("firehose-users", func() { c.FirehoseUsers = 20 })
	shrink("ref-max", func() { c.ReferenceMax = 4 * time.Second })
	shrink("drain-max", func() { c.DrainMax = 30 * time.Second })
	shrink("wedge", func() { c.WedgeFor = 5 * time.Second })
	shrink("recovery-pre", func() { c.RecoveryBefore = 3 * time.Second })
	shrink("trigger", func() { c.TriggerFor = 3 * time.Second })
	shrink("recovery-max", func() { c.RecoveryMax = 8 * time.Second })
	shrink("recovery-ref", func() { c.RecoveryReferenceWatch = 2 * time.Second })
	shrink("overload", func() { c.OverloadPerLevel = 3 * time.Second })
	shrink("scale", func() { c.ScaleWindow = 3 * time.Second })
	shrink("scale-warm", func() { c.ScaleWarmUp = 3 * time.Second })
	shrink("scale-rtt", func() { c.ScaleRTT = 10 * time.Millisecond })
}

// ParseArgs reads the command line of cmd/scorerefresh-bench into a Config
// (with -short applied); flag.ErrHelp when -h asked for the usage, which
// it wrote to stderr, as it does parse errors.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("scorerefresh-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if c.MongoDB != "" && c.Backend == backendAuto {
		c.Backend = backendMongoDB
	}
	if c.Short {
		c.Shrink(func(name string) bool {
			// A MongoDB of one's own is not shrunk to SQLite.
			return explicit[name] || (name == "backend" && c.Backend == backendMongoDB)
		})
	}
	return c, c.validate()
}

// validate reports the first setting the run cannot start with.
func (c *Config) validate() error {
	for _, s := range strings.Split(c.Scenarios, ",") {
		// plan (the capacity planner's validation) runs only when named.
		if s := strings.TrimSpace(s); !slices.Contains(allScenarios, s) && s != "plan" {
			return fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
	}
	switch c.Backend {
	case backendAuto, backendSQLite, backendPostgreSQL:
	case backendMongoDB:
		if c.MongoDB == "" {
			return errors.New("-backend mongodb needs -mongodb-uri (or $TEST_MONGODB_URI)")
		}
	default:
		return fmt.Errorf("-backend %q: want auto, sqlite, postgresql or mongodb", c.Backend)
	}
	if c.Concurrency <= 0 || c.Sources <= 0 || c.Pool <= 0 || c.DiverseEntries <= 0 || c.FirehoseEntries <= 0 || c.FirehoseUsers <= 0 || c.RTT < 0 {
		return errors.New("sizes must be positive and -rtt not negative")
	}
	return c.Fleet.validate()
}

// wanted is the set of scenarios c names.
func (c *Config) wanted() map[string]bool {
	want := map[string]bool{}
	for _, s := range strings.Split(c.Scenarios, ",") {
		want[strings.TrimSpace(s)] = true
	}
	return want
}
