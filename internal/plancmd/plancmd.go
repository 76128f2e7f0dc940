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
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/replay"
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

// validate notes the flags fs was given and checks them together; every problem at once.
func (o *planOptions) validate(fs *flag.FlagSet) error {
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check((o.in == "") == !o.fromQueue, "give the backlog: --in FILE|DIR or --from-queue (one of them)")
	check(o.measure && o.rtt > 0, "--rtt and --measure exclude each other")
	check(!o.measure && o.rtt <= 0 && o.serverCost <= 0, "give the round trip: --rtt D or --measure")
	check(o.pings < 1 || o.measureConc < 1 || o.maxEntries < 1 || o.comps < 0 || o.measureCapacity < 0,
		"--pings, --measure-concurrency and --max-entries must be positive and --components not negative")
	check(min(o.rtt, o.serverCost, o.entryCost, o.scanCost, o.slope, o.trAt, o.trFor) < 0 || min(o.knee, o.burst) < 0 || o.capacity < 0,
		"times, capacities, knee and burst must not be negative")
	check(o.measureCapacity > 0 && (o.slope > 0 || o.capacity > 0),
		"--measure-capacity finds the server's behaviour under load, which --rtt-slope or --server-capacity give: use one or the other")
	check(autoBatch[o.serverKind] == 0, "--server-kind %q: want %s, %s or %s", o.serverKind, serverMongoDB, serverSQLite, serverPostgreSQL)
	check(o.batch < 0, "--batch %d: 0 (the service's default) or more", o.batch)
	check(o.trRTT != 0 && o.trRTT < 1, "--transient-rtt %g: a factor of at least 1", o.trRTT)
	return errors.Join(errs...)
}

// Run is `plan` with its arguments (after the command name) and the
// environment; exit code 0 done, 1 an error, 2 bad flags or configuration.
func Run(args, environ []string, stdout, stderr io.Writer) int {
	// The fleet's flags default to the environment's settings; with the
	// environment wrong, --help answers with the contract's defaults.
	help := cli.WantsHelp(args)
	cfg, cfgErr := config.Parse(environ)
	if cfgErr != nil && help {
		cfg = config.Defaults()
	}
	fs := cli.NewFlagSet("scorerefresh plan", planHelp, stderr)
	var o planOptions
	o.register(fs, cfg)
	if !help { // a mistake is named with the usage's first line only: the whole list of flags is --help's
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), planHelp[:strings.Index(planHelp, "\n")]+"\nrun scorerefresh plan --help for every flag")
		}
	}
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if cfgErr != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", cfgErr)
		return 2
	}
	if err := o.validate(fs); err != nil {
		return cli.Refuse(fs, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	in, err := o.input(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", err)
		return 1
	}
	p, err := planner.Make(in)
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", err)
		return 2
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			Format string `json:"format"`
			*planner.Plan
		}{"scorerefresh-plan/1", p})
	} else {
		err = p.WriteText(stdout)
	}
	if err == nil && o.svg != "" {
		if err = os.WriteFile(o.svg, []byte(planChart(p).SVG()), 0o666); err == nil && !o.json {
			fmt.Fprintf(stdout, "chart: %s\n", o.svg)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh plan: %v\n", err)
		return 1
	}
	return 0
}

// input gathers the backlog, the rules, the round trip and the configuration.
func (o *planOptions) input(ctx context.Context, cfg config.Config, stderr io.Writer) (planner.Input, error) {
	rules, err := scoring.DefaultRules(), error(nil)
	if o.rules != "" {
		rules, err = scoring.LoadRules(o.rules)
	}
	if err != nil {
		return planner.Input{}, err
	}
	var conn *planConn
	if o.fromQueue || o.measure {
		if conn, err = dialPlan(ctx, cfg); err != nil {
			return planner.Input{}, err
		}
		defer func() { _ = conn.client.Disconnect(context.Background()) }()
	}
	var backlog planner.Backlog
	if o.fromQueue {
		if err := conn.readQueue(ctx, cfg, o.maxEntries, backlog.Add, stderr); err != nil {
			return planner.Input{}, err
		}
		backlog.Build(time.Now()) // the live queue's ages count from now
	} else {
		scan, err := replay.ReadQueue(ctx, o.in, cfg.QueueCollection, false, backlog.Add)
		if err != nil {
			return planner.Input{}, err
		}
		if scan.Malformed > 0 {
			fmt.Fprintf(stderr, "%s: %d malformed entries left out (the consumer dead-letters them)\n", scan.Path, scan.Malformed)
		}
		backlog.Build(scan.Reference)
	}
	srv := planner.Server{RTT: o.rtt.Seconds(), Cost: o.serverCost.Seconds(), Capacity: o.capacity, Knee: o.knee, Slope: o.slope.Seconds(),
		EntryCost: o.entryCost.Seconds(), ScanCost: o.scanCost.Seconds()}
	if o.measure {
		m, err := conn.measure(ctx, o, cfg.QueueCollection, rules, backlog.Names[:min(200, len(backlog.Names))], &srv)
		if err != nil {
			return planner.Input{}, err
		}
		fmt.Fprintf(stderr, "measured %s: round trip %.2f ms (median of %d pings, %d at once)%s%s%s%s; change streams: %t\n",
			conn.server, srv.RTT*1000, o.pings*o.measureConc, o.measureConc, m.cost, m.capacity, m.scan, m.kind, m.changeStreams)
	}
	if cfg.AdaptiveConcurrency {
		fmt.Fprintln(stderr, "note: ADAPTIVE_CONCURRENCY is on; the plan holds the limit at REFRESH_CONCURRENCY, where the adaptive limiter would lower it on a server that slows down under load")
	}
	return planner.Input{
		Backlog: &backlog,
		Arrival: planner.Arrival{Mode: o.arrival, Speed: o.speed, Rate: o.rate, Duration: o.duration.Seconds(), Seed: o.seed},
		Config: planner.Config{Components: cmp.Or(o.comps, len(rules.Components)), Concurrency: o.concurrency, MaxUsersInFlight: o.maxUsers, ClaimWindow: o.window,
			Replicas: o.replicas, Batch: cmp.Or(o.batch, autoBatch[o.serverKind]), PollInterval: o.poll.Seconds(), ChangeStreams: o.changeStreams},
		Server: srv, MaxReplicas: max(o.maxReplicas, o.replicas), TargetAge: o.target.Seconds(),
		Transient: planner.Transient{At: o.trAt.Seconds(), For: o.trFor.Seconds(), RTTFactor: o.trRTT, Burst: o.burst},
	}, nil
}

// The servers --server-kind names.
const (
	serverMongoDB    = "mongodb"
	serverSQLite     = "ferretdb-sqlite"
	serverPostgreSQL = "ferretdb-postgresql"
)

// autoBatch is REFRESH_BATCH_SIZE unset (consumer.BatchAuto) as the consumer resolves it on each server.
var autoBatch = map[string]int{serverMongoDB: consumer.DefaultBatchSize, serverSQLite: consumer.DefaultBatchSize, serverPostgreSQL: 1}

// planChart is the plan as stacked panels: depth and oldest age over time for
// each fleet size, then the transient against the same load without it.
func planChart(p *planner.Plan) svgchart.Chart {
	depth := svgchart.Panel{Title: "Queue depth (entries), by replicas"}
	age := svgchart.Panel{Title: "Oldest entry age, by replicas", Unit: "s"}
	for i, r := range p.Rows {
		name := fmt.Sprintf("%d replica%s", r.Replicas, strings.Repeat("s", min(r.Replicas-1, 1)))
		d, a := series(name, svgchart.Palette[i%len(svgchart.Palette)], r.Run)
		depth.Series, age.Series = append(depth.Series, d), append(age.Series, a)
	}
	r := p.Rows[0].Run
	what := cmp.Or(planner.When(p.Arrival.Mode == planner.ArrivalRate, "backlog cleared in %s", planner.Seconds(r.ClearSeconds)),
		planner.When(!r.Drained, "not drained after %s", planner.Seconds(r.EndSeconds)),
		fmt.Sprintf("drain %s, peak oldest age %s", planner.Seconds(r.DrainSeconds), planner.Seconds(r.PeakOldestAge)))
	c := svgchart.Chart{Title: fmt.Sprintf("Plan: %d entries of %d users — 1 replica: %s", p.Entries, p.Users, what),
		Panels: []svgchart.Panel{depth, age}, XUnit: "s",
		Footer: "simulated time from the start of the plan (s); generated by scorerefresh plan"}
	target := cmp.Or(planner.When(p.ReplicasForTarget > 0, "met from %d replica(s)", p.ReplicasForTarget), fmt.Sprintf("not met by %d replicas", len(p.Rows)))
	c.Subtitle = []string{
		fmt.Sprintf("RTT %.1f ms + server %.2f ms per command · %d round trips per refresh", p.Server.RTT*1000, p.Server.Cost*1000, p.RoundTrips),
		fmt.Sprintf("REFRESH_CONCURRENCY=%d MAX_USERS_IN_FLIGHT=%d CLAIM_WINDOW=%d batch %d", p.Config.Concurrency, p.Config.MaxUsersInFlight, p.Config.ClaimWindow, p.Config.Batch),
		fmt.Sprintf("arrival %s · load %.1f entries/s · target oldest age %s: %s", p.Arrival.Mode, p.Load, planner.Seconds(p.TargetAge), target),
	}
	if sp := p.Stability; sp != nil && sp.Disturbed != nil {
		name := fmt.Sprintf("Transient at %d replica(s)", sp.Replicas)
		bd, ba := series("without the transient", "#4b5563", sp.Baseline)
		dd, da := series("with it", "#dc2626", sp.Disturbed)
		c.Panels = append(c.Panels, svgchart.Panel{Title: name + ": queue depth", Series: []svgchart.Series{bd, dd}},
			svgchart.Panel{Title: name + ": oldest entry age", Unit: "s", Series: []svgchart.Series{ba, da}})
		c.Subtitle = append(c.Subtitle, wrap("transient: "+sp.Verdict, 140)...)
	}
	return c
}

// series is run's depth and oldest age over time.
func series(name, color string, run *planner.Run) (depth, age svgchart.Series) {
	depth, age = svgchart.Series{Name: name, Color: color}, svgchart.Series{Name: name, Color: color}
	for _, x := range run.Timeline {
		depth.Points = append(depth.Points, [2]float64{x.T, float64(x.Depth)})
		age.Points = append(age.Points, [2]float64{x.T, x.OldestAge})
	}
	return depth, age
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

// planConn is the plan's read-only connection to MONGODB_URI.
type planConn struct {
	client *mongo.Client
	db     *mongo.Database
	server string // redacted, for messages
}

func dialPlan(ctx context.Context, cfg config.Config) (*planConn, error) {
	server := redact.URI(cfg.MongoURI)
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.MongoURI).SetAppName("scorerefresh plan").
		SetMaxPoolSize(uint64(max(cfg.RefreshConcurrency, 16))).SetTimeout(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", server, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("reaching %s: %w", server, err)
	}
	return &planConn{client: client, db: client.Database(cfg.Database), server: server}, nil
}

// measurement is what --measure found besides planner.Server's figures, as its line words it (empty: not measured).
type measurement struct {
	cost, capacity, scan, kind string
	changeStreams              bool
}

// serverKind is the server as --server-kind names it, from what it says of
// itself (servertraits, as the consumer asks); empty when it does not answer.
func (c *planConn) serverKind(ctx context.Context) string {
	t := servertraits.New()
	if err := t.Probe(ctx, c.db); err != nil {
		return ""
	}
	if t.BackendUnknown() {
		// FerretDB names its storage once it has opened a database, which
		// the change-stream check before this did.
		_, _ = t.Reprobe(ctx, c.db)
	}
	switch info := t.Info(); {
	case info.FerretDB == "":
		return serverMongoDB
	case !t.PushesEqualityDown():
		return serverSQLite
	}
	return serverPostgreSQL
}

// measure times pings and, for the figures the flags leave unset, the claim
// window and the rules' queries for users of the backlog, the first seen first
// (reads only: the recompute without its write); what it finds goes into srv and o.
func (c *planConn) measure(ctx context.Context, o *planOptions, queue string, rules *scoring.Rules, users []string, srv *planner.Server) (measurement, error) {
	var m measurement
	var err error
	if srv.RTT, err = c.pingMedian(ctx, o.pings, o.measureConc); err != nil {
		return m, fmt.Errorf("measuring the round trip to %s: %w", c.server, err)
	}
	m.changeStreams = consumer.DetectChangeStreams(ctx, c.db.Collection(queue))
	if !o.set["change-streams"] {
		o.changeStreams = m.changeStreams
	}
	if kind := c.serverKind(ctx); kind != "" {
		m.kind = "; server: " + kind
		if !o.set["server-kind"] {
			o.serverKind = kind
		}
	}
	if !o.set["scan-cost"] {
		if err := c.measureScan(ctx, &m, srv, queue, o.window); err != nil {
			return m, err
		}
	}
	wantCost, capacityFor := !o.set["server-cost"] && o.comps == 0, time.Duration(0)
	if !o.set["server-capacity"] && o.comps == 0 {
		capacityFor = o.measureCapacity
	}
	if !wantCost && capacityFor == 0 {
		return m, nil
	}
	if len(users) == 0 {
		m.cost = "; server time not measured: the backlog is empty"
		return m, nil
	}
	rec := scoring.NewRecomputer(c.db, rules)
	if wantCost {
		var perCommand []float64
		for _, u := range users[:min(5, len(users))] {
			start := time.Now()
			if _, err := rec.Recompute(ctx, u, start); err != nil {
				m.cost = fmt.Sprintf("; server time not measured: the rules' queries failed (%v)", err)
				return m, nil
			}
			perCommand = append(perCommand, time.Since(start).Seconds()/float64(len(rules.Components)))
		}
		srv.Cost = max(0, median(perCommand)-srv.RTT)
		m.cost = fmt.Sprintf("; server time %.2f ms per command (the rules' queries for %d users of the backlog, less the round trip)", srv.Cost*1000, len(perCommand))
	}
	if capacityFor > 0 {
		workers := o.replicas * o.concurrency
		if srv.Capacity, err = loadServer(ctx, rec, users, len(rules.Components), workers, capacityFor); err != nil {
			return m, fmt.Errorf("measuring the server's capacity: %w", err)
		}
		m.capacity = planner.When(srv.Capacity > 0, "; %.0f queries/s with %d refreshes' queries at once", srv.Capacity, workers)
	}
	return m, nil
}

// minScanDepth is the least queue depth whose claim window's cost says something per entry.
const minScanDepth = 1000

// measureScan times the claim window's query (reads only) on the queue as
// it is: the best of three, less the round trip, per queued entry.
func (c *planConn) measureScan(ctx context.Context, m *measurement, srv *planner.Server, queue string, window int) error {
	coll := c.db.Collection(queue)
	depth, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return fmt.Errorf("counting %s: %w", queue, err)
	}
	if depth < minScanDepth {
		return nil
	}
	var times []float64
	for range 3 {
		start := time.Now()
		cur, err := coll.Find(ctx, bson.D{{Key: "username", Value: bson.D{{Key: "$nin", Value: bson.A{}}}}},
			options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(int64(window)).
				SetBatchSize(int32(window)).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}))
		if err == nil {
			err = cur.All(ctx, &[]bson.Raw{})
		}
		if err != nil {
			return fmt.Errorf("timing the claim window on %s: %w", queue, err)
		}
		times = append(times, time.Since(start).Seconds())
	}
	srv.ScanCost = max(0, slices.Min(times)-srv.RTT) / float64(depth)
	m.scan = fmt.Sprintf("; claim window %.2f µs per queued entry (at %d entries)", srv.ScanCost*1e6, depth)
	return nil
}

// loadServer runs the rules' queries for users, round robin, from workers
// goroutines for d, and returns the queries answered per second.
func loadServer(ctx context.Context, rec *scoring.Recomputer, users []string, components, workers int, d time.Duration) (float64, error) {
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var next, done atomic.Int64
	var g errgroup.Group
	start := time.Now()
	for range workers {
		g.Go(func() error {
			for lctx.Err() == nil {
				u := users[int(next.Add(1))%len(users)]
				if _, err := rec.Recompute(lctx, u, time.Now()); err != nil {
					// The end of the measurement cuts a refresh short; the
					// driver may see its deadline a moment before ctx does.
					if lctx.Err() == nil && !mongo.IsTimeout(err) && !errors.Is(err, context.DeadlineExceeded) {
						return err
					}
					return nil
				}
				done.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(done.Load()*int64(components)) / time.Since(start).Seconds(), nil
}

// pingMedian is the median of n pings from each of conc goroutines, after
// one unmeasured ping each to open the connections.
func (c *planConn) pingMedian(ctx context.Context, n, conc int) (float64, error) {
	admin := c.client.Database("admin")
	times := make([][]float64, conc)
	var g errgroup.Group
	for i := range conc {
		g.Go(func() error {
			for j := range n + 1 {
				start := time.Now()
				if err := admin.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
					return err
				}
				if j > 0 {
					times[i] = append(times[i], time.Since(start).Seconds())
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return median(slices.Concat(times...)), nil
}

// median is the median of xs, which is not empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// readQueue reads the oldest max entries of the live queue, username and
// enqueue time only, in the claim index's order.
func (c *planConn) readQueue(ctx context.Context, cfg config.Config, limit int, add func(string, time.Time), stderr io.Writer) error {
	coll := c.db.Collection(cfg.QueueCollection)
	total, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return fmt.Errorf("counting %s: %w", cfg.QueueCollection, err)
	}
	cur, err := coll.Find(ctx, bson.D{}, options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(int64(limit)).SetBatchSize(10_000).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}))
	if err != nil {
		return fmt.Errorf("reading %s: %w", cfg.QueueCollection, err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	read, malformed := 0, 0
	for cur.Next(ctx) {
		read++
		user, at := replay.QueueEntry(cur.Current)
		if user == "" || at.IsZero() {
			malformed++
			continue
		}
		add(user, at)
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("reading %s after %d entries: %w", cfg.QueueCollection, read, err)
	}
	fmt.Fprintf(stderr, "read the oldest %d of about %d entries of %s.%s%s%s\n", read, total, cfg.Database, cfg.QueueCollection,
		planner.When(int64(read) < total, " (--max-entries %d: the plan leaves the rest out)", limit),
		planner.When(malformed > 0, "; %d malformed entries left out (the consumer dead-letters them)", malformed))
	return nil
}
