// Package plancmd is `plan`: the capacity planner's command line around
// package planner, run by the production binary (`scorerefresh plan`).
package plancmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/scoring"
)

const planHelp = `usage: scorerefresh plan (--in FILE|DIR | --from-queue) (--rtt D | --measure) [flags]

Predicts how a fleet drains a backlog, from first principles and a simulation
of the pipeline fed with the backlog's own entries (docs/capacity-planning.md):
drain time and the oldest entry's age for 1…--max-replicas replicas, the
highest arrival rate each fleet sustains, the replica count that keeps the
oldest age within --target-age, and whether a transient (slower round trips
for a while, or a burst) leaves the queue in a state it does not return from.

What it needs:
  the backlog      --in: a snapshot (scorerefresh snapshot), a generated backlog
                   (scorerefresh backlog generate) or a mongoexport file of the
                   queue; or --from-queue: the queue of MONGODB_URI, read-only,
                   the oldest --max-entries entries (username and createdAt only).
                   Who the entries belong to decides coalescing: a refresh
                   acknowledges every pending entry of its user.
  the rules        a refresh costs one round trip per component plus 2 (the score
                   read and write): --rules, else SCORING_RULES, else the built-in
                   rules; or --components N.
  the round trip   --rtt, measured from where the replicas run; or --measure: the
                   median of --pings pings to MONGODB_URI (read-only). Plus the
                   server's own time per command where known (--server-cost;
                   --measure estimates it by timing the rules' queries for a few
                   users of the backlog, read-only), its capacity
                   (--server-capacity; --measure-capacity loads the server with
                   those queries to find it), how it degrades under load
                   (--rtt-knee, --rtt-slope), what deleting an acknowledged
                   entry costs it (--entry-cost) and what a claim round's queue
                   reads cost per queued entry (--scan-cost).
  the fleet        REFRESH_CONCURRENCY, MAX_USERS_IN_FLIGHT, CLAIM_WINDOW,
                   POLL_INTERVAL and REFRESH_BATCH_SIZE come from the
                   environment, as for scorerefresh run; the flags below
                   override them. --replicas is the fleet now (the stability
                   verdict is for it), --batch the most users per batched
                   recompute, spread over the free slots as the service does
                   (REFRESH_BATCH_SIZE; unset, the service's default for
                   --server-kind: 16 on MongoDB and FerretDB on SQLite, 1 on
                   FerretDB on PostgreSQL; --measure asks the server).
  the load         --arrival max: the backlog is in the queue, nothing follows;
                   original: its entries arrive at their original spacing sped up
                   --speed times; rate: the backlog, then --rate entries/s for
                   --duration, their users drawn from the backlog's mix.
  a transient      --transient-rtt K for --transient-for D at --transient-at T
                   (round trips K times longer), and/or --burst N entries of new
                   users at --transient-at.

Output: a table (or --json), and with --svg FILE a chart of depth and oldest
age over time for each fleet size, and of the transient against the same load
without it.

flags:
`

// planOptions are the flags of `plan`.
type planOptions struct {
	in, rules, svg, arrival, serverKind     string
	fromQueue, measure, json, changeStreams bool
	maxEntries, pings, measureConc, comps   int
	rtt, serverCost, slope, target, poll    time.Duration
	entryCost, measureCapacity, scanCost    time.Duration
	capacity, speed, rate                   float64
	knee, replicas, maxReplicas, batch      int
	concurrency, maxUsers, window, burst    int
	duration, trAt, trFor                   time.Duration
	trRTT                                   float64
	seed                                    uint64
	set                                     map[string]bool // flags given on the command line
}

func (o *planOptions) register(fs *flag.FlagSet, cfg config.Config) {
	fs.StringVar(&o.in, "in", "", "the backlog: a snapshot directory or file, a generated backlog, or a mongoexport file of the queue")
	fs.BoolVar(&o.fromQueue, "from-queue", false, "read the backlog from the queue of MONGODB_URI instead (read-only)")
	fs.IntVar(&o.maxEntries, "max-entries", 1_000_000, "with --from-queue, read at most this many of the oldest entries")
	fs.StringVar(&o.rules, "rules", cfg.ScoringRules, "rules file: round trips per refresh = components + 2 (default SCORING_RULES, else the built-in rules)")
	fs.IntVar(&o.comps, "components", 0, "rule components, instead of a rules file")
	fs.DurationVar(&o.rtt, "rtt", 0, "round-trip time from the replicas to MongoDB")
	fs.BoolVar(&o.measure, "measure", false, "measure the round trip (and, unless --server-cost is given, the server's time per command) against MONGODB_URI, read-only")
	fs.IntVar(&o.pings, "pings", 20, "with --measure, pings to time (the median is used)")
	fs.IntVar(&o.measureConc, "measure-concurrency", 1, "with --measure, pings in flight at once (REFRESH_CONCURRENCY measures the round trip as a busy replica's refreshes see it)")
	fs.DurationVar(&o.measureCapacity, "measure-capacity", 0, "with --measure, also load the server for this long with the rules' queries (reads only) from --replicas × REFRESH_CONCURRENCY workers, and take the queries/s as --server-capacity: it loads a production server, use with care (default: not)")
	fs.DurationVar(&o.serverCost, "server-cost", 0, "the server's time per command, uncontended (Command latency p50 minus the RTT; default 0, or measured)")
	fs.Float64Var(&o.capacity, "server-capacity", 0, "the most commands a second the server answers (0: no limit)")
	fs.DurationVar(&o.entryCost, "entry-cost", 0, "the server's time per queue entry an ack deletes: a firehose user's refresh acknowledges thousands at once (default 0)")
	fs.DurationVar(&o.scanCost, "scan-cost", 0, "the server's time per queued entry for each of a claim round's two queue reads: about 0 where they are index reads (MongoDB), not on a server that scans the queue (FerretDB); --measure times the claim window on a queue of 1,000 entries or more")
	fs.IntVar(&o.knee, "rtt-knee", 0, "commands in flight (fleet-wide) the server serves before it slows down; with --rtt-slope")
	fs.DurationVar(&o.slope, "rtt-slope", 0, "extra time per command for each command in flight past --rtt-knee (0: the server does not degrade)")
	fs.IntVar(&o.concurrency, "concurrency", cfg.RefreshConcurrency, "REFRESH_CONCURRENCY: refreshes running at once per replica")
	fs.IntVar(&o.maxUsers, "max-users-in-flight", cfg.MaxUsersInFlight, "MAX_USERS_IN_FLIGHT: users claimed and not yet acknowledged per replica")
	fs.IntVar(&o.window, "claim-window", cfg.ClaimWindow, "CLAIM_WINDOW: oldest entries one claim round reads")
	fs.DurationVar(&o.poll, "poll", cfg.PollInterval, "POLL_INTERVAL: how often an idle replica looks for work without change streams")
	fs.BoolVar(&o.changeStreams, "change-streams", true, "the server has change streams, so arrivals wake idle replicas at once (MongoDB replica sets do, FerretDB does not; --measure detects it)")
	fs.IntVar(&o.replicas, "replicas", 1, "replicas running now: the stability verdict is for this fleet")
	fs.IntVar(&o.maxReplicas, "max-replicas", 8, "the table covers 1 to this many replicas")
	fs.IntVar(&o.batch, "batch", cfg.RefreshBatchSize,
		"REFRESH_BATCH_SIZE: most users per batched recompute (components + 2 round trips per batch), spread over the free slots; 0: the service's default for --server-kind; 1: one refresh per user")
	fs.StringVar(&o.serverKind, "server-kind", serverMongoDB, "the server the fleet runs against, for REFRESH_BATCH_SIZE's default: mongodb, ferretdb-sqlite or ferretdb-postgresql (--measure asks the server)")
	fs.StringVar(&o.arrival, "arrival", planner.ArrivalMax, "max, original or rate (see above)")
	fs.Float64Var(&o.speed, "speed", 1, "with --arrival original, arrivals this many times faster than they were")
	fs.Float64Var(&o.rate, "rate", 0, "with --arrival rate, entries a second after the backlog")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "with --arrival rate, how long arrivals go on (the simulated time)")
	fs.Uint64Var(&o.seed, "seed", 1, "with --arrival rate, the random seed that draws the arrivals' users")
	fs.DurationVar(&o.target, "target-age", 5*time.Minute, "the oldest age to stay within (the oldest-entry page fires at 5m)")
	fs.Float64Var(&o.trRTT, "transient-rtt", 0, "a transient: round trips take this many times longer (e.g. 10)")
	fs.DurationVar(&o.trFor, "transient-for", time.Minute, "how long the slower round trips last")
	fs.DurationVar(&o.trAt, "transient-at", 30*time.Second, "when the transient begins, from the start")
	fs.IntVar(&o.burst, "burst", 0, "a transient: this many entries of as many new users arrive at --transient-at")
	fs.BoolVar(&o.json, "json", false, "print the plan as JSON (timelines included) instead of the table")
	fs.StringVar(&o.svg, "svg", "", "also draw the plan as an SVG chart into this file")
}

// validate checks the flags together; every problem at once.
func (o *planOptions) validate() error {
	var errs []error
	if (o.in == "") == !o.fromQueue {
		errs = append(errs, errors.New("give the backlog: --in FILE|DIR or --from-queue (one of them)"))
	}
	switch {
	case o.measure && o.rtt > 0:
		errs = append(errs, errors.New("--rtt and --measure exclude each other"))
	case !o.measure && o.rtt <= 0 && o.serverCost <= 0:
		errs = append(errs, errors.New("give the round trip: --rtt D or --measure"))
	}
	if o.pings < 1 || o.measureConc < 1 || o.maxEntries < 1 || o.comps < 0 || o.measureCapacity < 0 {
		errs = append(errs, errors.New("--pings, --measure-concurrency and --max-entries must be positive and --components not negative"))
	}
	if o.rtt < 0 || o.serverCost < 0 || o.entryCost < 0 || o.scanCost < 0 || o.slope < 0 || o.knee < 0 || o.capacity < 0 || o.burst < 0 || o.trAt < 0 || o.trFor < 0 {
		errs = append(errs, errors.New("times, capacities, knee and burst must not be negative"))
	}
	if o.measureCapacity > 0 && (o.slope > 0 || o.capacity > 0) {
		errs = append(errs, errors.New("--measure-capacity finds the server's behaviour under load, which --rtt-slope or --server-capacity give: use one or the other"))
	}
	if autoBatch(o.serverKind) == 0 {
		errs = append(errs, fmt.Errorf("--server-kind %q: want %s, %s or %s", o.serverKind, serverMongoDB, serverSQLite, serverPostgreSQL))
	}
	if o.batch < 0 {
		errs = append(errs, fmt.Errorf("--batch %d: 0 (the service's default) or more", o.batch))
	}
	if o.trRTT != 0 && o.trRTT < 1 {
		errs = append(errs, fmt.Errorf("--transient-rtt %g: a factor of at least 1", o.trRTT))
	}
	return errors.Join(errs...)
}

// Run is `plan` with its arguments (after the command name) and the
// environment; it returns the exit code: 0 done, 1 an error, 2 bad flags or
// configuration.
func Run(args, environ []string, stdout, stderr io.Writer) int {
	// The fleet's flags default to the environment's settings; the help
	// prints the contract's defaults when the environment is wrong, so
	// that --help always answers.
	cfg, cfgErr := config.Parse(environ)
	if cfgErr != nil && cli.WantsHelp(args) {
		cfg = config.Defaults()
	}
	fs := cli.NewFlagSet("scorerefresh plan", planHelp, stderr)
	var o planOptions
	o.register(fs, cfg)
	if cli.WantsHelp(args) {
		fs.SetOutput(stdout)
		cli.PrintUsage(fs, planHelp)
		return cli.ExitHelp
	}
	// A mistake is named with the usage's first line only: the whole list
	// of flags is --help's.
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), planHelp[:strings.Index(planHelp, "\n")]+"\nrun scorerefresh plan --help for every flag")
	}
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if cfgErr != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", cfgErr)
		return 2
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if err := o.validate(); err != nil {
		return cli.Refuse(fs, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	in, err := o.input(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", err)
		return 1
	}
	if cfg.AdaptiveConcurrency {
		fmt.Fprintln(stderr, "note: ADAPTIVE_CONCURRENCY is on; the plan holds the limit at REFRESH_CONCURRENCY, where the adaptive limiter would lower it on a server that slows down under load")
	}
	p, err := planner.Make(in)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", err)
		return 2
	}
	return writePlan(p, o, stdout, stderr)
}

func writePlan(p *planner.Plan, o planOptions, stdout, stderr io.Writer) int {
	var err error
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(jsonPlan(p))
	} else {
		err = p.WriteText(stdout)
	}
	if err == nil && o.svg != "" {
		err = writePlanSVG(o.svg, p)
		if err == nil && !o.json {
			fmt.Fprintf(stdout, "chart: %s\n", o.svg)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", err)
		return 1
	}
	return 0
}

// input gathers the model's inputs: the backlog, the rules, the round trip
// and the configuration.
func (o *planOptions) input(ctx context.Context, cfg config.Config, stderr io.Writer) (planner.Input, error) {
	rules, err := scoring.DefaultRules(), error(nil)
	if o.rules != "" {
		rules, err = scoring.LoadRules(o.rules)
	}
	if err != nil {
		return planner.Input{}, err
	}
	comps := len(rules.Components)
	if o.comps > 0 {
		comps = o.comps
	}
	var conn *planConn
	if o.fromQueue || o.measure {
		if conn, err = dialPlan(ctx, cfg); err != nil {
			return planner.Input{}, err
		}
		defer conn.close()
	}
	backlog, users, err := o.loadBacklog(ctx, cfg, conn, stderr)
	if err != nil {
		return planner.Input{}, err
	}
	srv := planner.Server{RTT: o.rtt.Seconds(), Cost: o.serverCost.Seconds(), Capacity: o.capacity, Knee: o.knee, Slope: o.slope.Seconds(),
		EntryCost: o.entryCost.Seconds(), ScanCost: o.scanCost.Seconds()}
	changeStreams := o.changeStreams
	if o.measure {
		if err := o.measured(ctx, conn, cfg, rules, users, &srv, &changeStreams, stderr); err != nil {
			return planner.Input{}, err
		}
	}
	batch := cmp.Or(o.batch, autoBatch(o.serverKind))
	in := planner.Input{
		Backlog: backlog,
		Arrival: planner.Arrival{Mode: o.arrival, Speed: o.speed, Rate: o.rate, Duration: o.duration.Seconds(), Seed: o.seed},
		Config: planner.Config{Components: comps, Concurrency: o.concurrency, MaxUsersInFlight: o.maxUsers, ClaimWindow: o.window,
			Replicas: o.replicas, Batch: batch, PollInterval: o.poll.Seconds(), ChangeStreams: changeStreams},
		Server: srv, MaxReplicas: max(o.maxReplicas, o.replicas), TargetAge: o.target.Seconds(),
		Transient: planner.Transient{At: o.trAt.Seconds(), For: o.trFor.Seconds(), RTTFactor: o.trRTT, Burst: o.burst},
	}
	return in, nil
}

// measured replaces the server's figures the flags left unset with what
// --measure found: the round trip, a query's cost and the server's
// capacity, the scan cost, change streams and the server's kind.
func (o *planOptions) measured(ctx context.Context, conn *planConn, cfg config.Config, rules *scoring.Rules, users []string, srv *planner.Server, changeStreams *bool, stderr io.Writer) error {
	want := measureCost{cost: !o.set["server-cost"] && o.comps == 0, workers: o.replicas * o.concurrency,
		scan: !o.set["scan-cost"], window: o.window}
	if !o.set["server-capacity"] && o.comps == 0 {
		want.capacity = o.measureCapacity
	}
	m, err := conn.measure(ctx, o, cfg.QueueCollection, rules, users, want)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, m.describe())
	srv.RTT = m.rtt
	if !o.set["server-cost"] && m.costMeasured {
		srv.Cost = m.cost
	}
	if m.capacity > 0 {
		srv.Capacity = m.capacity
	}
	if !o.set["scan-cost"] && m.scanMeasured {
		srv.ScanCost = m.scan
	}
	if !o.set["change-streams"] {
		*changeStreams = m.changeStreams
	}
	if !o.set["server-kind"] && m.kind != "" {
		o.serverKind = m.kind
	}
	return nil
}

// The servers --server-kind names.
const (
	serverMongoDB    = "mongodb"
	serverSQLite     = "ferretdb-sqlite"
	serverPostgreSQL = "ferretdb-postgresql"
)

// autoBatch is REFRESH_BATCH_SIZE unset (consumer.BatchAuto) as the
// consumer resolves it on each server: batches where a batch's $in is an
// index read (MongoDB) or where a user's own query decodes the collection
// as a batch's does (FerretDB on SQLite); one user per slot on FerretDB on
// PostgreSQL, which answers a user's query from its storage and a batch's
// by decoding everything. 0: not a server it knows.
func autoBatch(kind string) int {
	switch kind {
	case serverMongoDB, serverSQLite:
		return consumer.DefaultBatchSize
	case serverPostgreSQL:
		return 1
	}
	return 0
}

// loadBacklog reads the backlog and returns it with a couple of hundred of
// its users (the oldest first), for measuring the rules' queries.
func (o *planOptions) loadBacklog(ctx context.Context, cfg config.Config, conn *planConn, stderr io.Writer) (*planner.Backlog, []string, error) {
	var sample []string
	seen := map[string]bool{}
	keep := func(user string) {
		if len(sample) < 200 && !seen[user] {
			seen[user] = true
			sample = append(sample, user)
		}
	}
	if o.fromQueue {
		b, err := conn.readQueue(ctx, cfg, o.maxEntries, keep, stderr)
		return b, sample, err
	}
	b, err := readSnapshot(ctx, o.in, cfg.QueueCollection, keep, stderr)
	return b, sample, err
}

// jsonPlan is the plan as --json prints it.
func jsonPlan(p *planner.Plan) any {
	return struct {
		Format string `json:"format"`
		*planner.Plan
	}{"scorerefresh-plan/1", p}
}

// planChart is the plan as stacked panels: depth and oldest age over time for
// each fleet size, then the transient against the same load without it.
func planChart(p *planner.Plan) svgchart.Chart {
	depth := svgchart.Panel{Title: "Queue depth (entries), by replicas"}
	age := svgchart.Panel{Title: "Oldest entry age, by replicas", Unit: "s"}
	for i, r := range p.Rows {
		color := svgchart.Palette[i%len(svgchart.Palette)]
		name := fmt.Sprintf("%d replica", r.Replicas)
		if r.Replicas > 1 {
			name += "s"
		}
		depth.Series = append(depth.Series, series(name, color, r.Run, func(s planner.Sample) float64 { return float64(s.Depth) }))
		age.Series = append(age.Series, series(name, color, r.Run, func(s planner.Sample) float64 { return s.OldestAge }))
	}
	c := svgchart.Chart{Title: planTitle(p), Panels: []svgchart.Panel{depth, age},
		XUnit:  "s",
		Footer: "simulated time from the start of the plan (s); generated by scorerefresh plan"}
	cfg := p.Config
	c.Subtitle = []string{
		fmt.Sprintf("RTT %.1f ms + server %.2f ms per command · %d round trips per refresh", p.Server.RTT*1000, p.Server.Cost*1000, p.RoundTrips),
		fmt.Sprintf("REFRESH_CONCURRENCY=%d MAX_USERS_IN_FLIGHT=%d CLAIM_WINDOW=%d batch %d", cfg.Concurrency, cfg.MaxUsersInFlight, cfg.ClaimWindow, cfg.Batch),
		fmt.Sprintf("arrival %s · load %.1f entries/s · target oldest age %s: %s", p.Arrival.Mode, p.Load, planner.Seconds(p.TargetAge), targetText(p)),
	}
	if sp := p.Stability; sp != nil && sp.Disturbed != nil {
		name := fmt.Sprintf("Transient at %d replica(s)", sp.Replicas)
		c.Panels = append(c.Panels,
			svgchart.Panel{Title: name + ": queue depth", Series: []svgchart.Series{
				series("without the transient", "#4b5563", sp.Baseline, func(s planner.Sample) float64 { return float64(s.Depth) }),
				series("with it", "#dc2626", sp.Disturbed, func(s planner.Sample) float64 { return float64(s.Depth) }),
			}},
			svgchart.Panel{Title: name + ": oldest entry age", Unit: "s", Series: []svgchart.Series{
				series("without the transient", "#4b5563", sp.Baseline, func(s planner.Sample) float64 { return s.OldestAge }),
				series("with it", "#dc2626", sp.Disturbed, func(s planner.Sample) float64 { return s.OldestAge }),
			}})
		c.Subtitle = append(c.Subtitle, wrap("transient: "+sp.Verdict, 140)...)
	}
	return c
}

func series(name, color string, run *planner.Run, value func(planner.Sample) float64) svgchart.Series {
	s := svgchart.Series{Name: name, Color: color}
	for _, x := range run.Timeline {
		s.Points = append(s.Points, [2]float64{x.T, value(x)})
	}
	return s
}

func planTitle(p *planner.Plan) string {
	r := p.Rows[0].Run
	what := fmt.Sprintf("drain %s, peak oldest age %s", planner.Seconds(r.DrainSeconds), planner.Seconds(r.PeakOldestAge))
	if p.Arrival.Mode == planner.ArrivalRate {
		what = fmt.Sprintf("backlog cleared in %s", planner.Seconds(r.ClearSeconds))
	}
	if !r.Drained && p.Arrival.Mode != planner.ArrivalRate {
		what = fmt.Sprintf("not drained after %s", planner.Seconds(r.EndSeconds))
	}
	return fmt.Sprintf("Plan: %d entries of %d users — 1 replica: %s", p.Entries, p.Users, what)
}

func targetText(p *planner.Plan) string {
	if p.ReplicasForTarget == 0 {
		return fmt.Sprintf("not met by %d replicas", len(p.Rows))
	}
	return fmt.Sprintf("met from %d replica(s)", p.ReplicasForTarget)
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > width {
			lines, line = append(lines, line), w
			continue
		}
		line = strings.TrimSpace(line + " " + w)
	}
	return append(lines, line)
}
