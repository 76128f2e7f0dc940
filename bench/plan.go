//go:build !oldrelease

package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/plancmd"
	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/replay"
)

// PlanConfig is the plan scenario's settings (flags -plan-*): the capacity planner's
// predictions against measured replays (docs/capacity-planning.md).
type PlanConfig struct {
	Cases              string        // comma-separated validation cases (empty: all)
	MeasureConcurrency int           // pings in flight at once when the planner measures the round trip
	ReplayMax          time.Duration // a replay stops after this long even if entries remain
}

func planFlags(fs *flag.FlagSet, o *PlanConfig) {
	fs.StringVar(&o.Cases, "plan-cases", "", "plan: comma-separated validation cases to run (default: all; an unknown name lists them)")
	fs.IntVar(&o.MeasureConcurrency, "plan-measure-concurrency", 1, "plan: pings in flight at once when the planner measures the round trip")
	fs.DurationVar(&o.ReplayMax, "plan-max", 150*time.Second, "plan: a replay stops after this long even if entries remain")
}

// planCase is one validation: a generated backlog, a configuration, a
// server, and optionally a transient, replayed and planned alike.
type planCase struct {
	name, what     string
	shape          replay.Shape
	entries, users int
	span           time.Duration
	arrival        string
	speed          float64
	conc, held     int
	window         int
	knee           int
	slope          time.Duration
	trRTT          float64
	trAt, trFor    time.Duration
}

// planCases: three shapes under two configurations drained at once, a paced
// drain, and the transient cases: a server that slows down past 6 commands
// in flight (the adaptive scenario's knee) at two loads, one that recovers
// and one that wedges, and a plain server that recovers, like scenario 4
// (at a quarter of the quiet machine's capacity rather than half, so that
// it still has headroom when other work shares the cores).
func planCases() []planCase {
	c16 := func(c planCase) planCase { c.conc, c.held, c.window = 16, 64, 500; return c }
	c4 := func(c planCase) planCase { c.conc, c.held, c.window = 4, 8, 100; return c }
	knee := func(c planCase) planCase { c.knee, c.slope = 6, 15*time.Millisecond; return c }
	return []planCase{
		c16(planCase{name: "diverse-c16", what: "static drain", shape: replay.ShapeDiverse, entries: 2000, users: 2000}),
		c4(planCase{name: "diverse-c4", what: "static drain", shape: replay.ShapeDiverse, entries: 500, users: 500}),
		c16(planCase{name: "firehose-c16", what: "static drain", shape: replay.ShapeFirehose, entries: 10000, users: 300}),
		c4(planCase{name: "firehose-c4", what: "static drain", shape: replay.ShapeFirehose, entries: 4000, users: 150}),
		c16(planCase{name: "mixed-c16", what: "static drain", shape: replay.ShapeMixed, entries: 4000, users: 500}),
		c4(planCase{name: "mixed-c4", what: "static drain", shape: replay.ShapeMixed, entries: 2000, users: 300}),
		c16(planCase{name: "mixed-paced-c16", what: "arrivals at 20× their original pace", shape: replay.ShapeMixed, entries: 4000, users: 500,
			arrival: "original", speed: 20}),
		knee(c16(planCase{name: "knee-wedge", what: "8/s, round trips ×10 for 15 s at 15 s", shape: replay.ShapeDiverse, entries: 720, users: 100000,
			span: 90 * time.Second, arrival: "original", speed: 1, trRTT: 10, trAt: 15 * time.Second, trFor: 15 * time.Second})),
		knee(c16(planCase{name: "knee-steady", what: "8/s, no transient", shape: replay.ShapeDiverse, entries: 720, users: 100000,
			span: 90 * time.Second, arrival: "original", speed: 1})),
		knee(c16(planCase{name: "knee-recovery", what: "5/s, round trips ×10 for 15 s at 15 s", shape: replay.ShapeDiverse, entries: 450, users: 100000,
			span: 90 * time.Second, arrival: "original", speed: 1, trRTT: 10, trAt: 15 * time.Second, trFor: 15 * time.Second})),
		c16(planCase{name: "recovery", what: "12/s, round trips ×10 for 30 s at 15 s", shape: replay.ShapeDiverse, entries: 900, users: 100000,
			span: 75 * time.Second, arrival: "original", speed: 1, trRTT: 10, trAt: 15 * time.Second, trFor: 30 * time.Second}),
	}
}

// planRow is one case's prediction against its measurement.
type planRow struct {
	Case, What, Shape, Config string
	RTTms, CostMs             float64 // what the planner measured
	Entries, Users            int
	PredDrain, MeasDrain      float64
	MeasDrained               bool
	PredPeakAge, MeasPeakAge  float64
	PredPeakDepth             int
	MeasPeakDepth             int64
	Capacity                  float64 // queries/s the planner measured
	ScanUs, EntryUs           float64 // per queued entry of a claim read, per entry deleted
	LoadAvg                   string  // the machine's 1-minute load average before and after the replay
	MeasRefreshMs             float64 // mean refresh duration in the replay
	PredRefreshMs             float64 // the same in the simulation
	Transient                 bool
	PredClass                 string
	PredRecovered             bool
	PredRecovery              float64
	MeasRecovered             bool
	MeasRecovery              float64
	PlanCommand, BenchCommand string
	Replay                    string // the drain report's directory
}

func (b *Bench) plan(ctx context.Context) ([]planRow, error) {
	cases := planCases()
	if names := b.cfg.Plan.Cases; names != "" {
		var picked []planCase
		for _, n := range strings.Split(names, ",") {
			i := slices.IndexFunc(cases, func(c planCase) bool { return c.name == strings.TrimSpace(n) })
			if i < 0 {
				var all []string
				for _, c := range cases {
					all = append(all, c.name)
				}
				return nil, fmt.Errorf("unknown plan case %q (have %s)", n, strings.Join(all, ", "))
			}
			picked = append(picked, cases[i])
		}
		cases = picked
	}
	b.logf("\n== plan: the capacity planner's predictions against replays (RTT %s through the proxy)", b.cfg.RTT)
	entryCost, err := b.measureEntryCost(ctx, 5000)
	if err != nil {
		return nil, fmt.Errorf("measuring the cost of deleting entries: %w", err)
	}
	b.logf("  deleting queue entries costs the server %.0f µs each (5000 in one deleteMany, $in, as a large ack does)", entryCost.Seconds()*1e6)
	var rows []planRow
	for _, c := range cases {
		row, err := b.planCase(ctx, c, entryCost)
		if err != nil {
			return rows, fmt.Errorf("case %s: %w", c.name, err)
		}
		rows = append(rows, row)
		if err := writePlanRows(b.cfg.Out, rows); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// planCase generates the case's backlog and loads it into a fresh database
// behind the case's own proxy; runs `scorerefresh plan --measure` against
// it, as an operator would against a queue holding it; then replays it
// from scratch (--drop) with the transient on schedule, and compares.
func (b *Bench) planCase(ctx context.Context, c planCase, entryCost time.Duration) (planRow, error) {
	row := planRow{Case: c.name, What: c.what, Shape: string(c.shape), Entries: c.entries,
		Config:       fmt.Sprintf("REFRESH_CONCURRENCY=%d MAX_USERS_IN_FLIGHT=%d CLAIM_WINDOW=%d", c.conc, c.held, c.window),
		BenchCommand: fmt.Sprintf("go run ./cmd/scorerefresh-bench -scenarios plan -plan-cases %s -out %s", c.name, b.cfg.Out)}
	dir := filepath.Join(b.cfg.Out, "plan", c.name)
	_ = os.RemoveAll(dir)
	_, err := replay.Generate(replay.GenerateConfig{Shape: c.shape, Entries: c.entries, Users: c.users, Rules: b.rules, Seed: b.cfg.Seed,
		Span: cmp.Or(c.span, 10*time.Minute), Out: filepath.Join(dir, "backlog"), Origin: "scorerefresh-bench plan " + c.name})
	if err != nil {
		return row, err
	}
	pcfg := faultproxy.Config{Target: b.srv.Addr, Up: b.cfg.RTT / 2, Down: b.cfg.RTT / 2}
	if c.slope > 0 {
		pcfg.DelayFunc = knee(c.knee, c.slope)
	}
	proxy, err := faultproxy.Start(context.Background(), pcfg)
	if err != nil {
		return row, err
	}
	defer proxy.Close()
	db := b.nextDatabase("plan_" + strings.ReplaceAll(c.name, "-", "_"))
	// REFRESH_BATCH_SIZE=1: the validation table measures one refresh per
	// user (the planner models batches, but no replay has checked them), and
	// the service's default is batched.
	environ := append(b.environ[:len(b.environ):len(b.environ)],
		"MONGODB_URI="+b.srv.uriVia(proxy.Addr()), "MONGODB_DATABASE="+db, "SCORING_RULES="+b.rulesPath,
		"REFRESH_BATCH_SIZE=1", fmt.Sprintf("REFRESH_CONCURRENCY=%d", c.conc), fmt.Sprintf("MAX_USERS_IN_FLIGHT=%d", c.held), fmt.Sprintf("CLAIM_WINDOW=%d", c.window))
	defer func() { _ = b.direct.Database(db).Drop(context.Background()) }()
	p, args, err := b.planPredict(ctx, c, environ, db, entryCost, dir)
	if err != nil {
		return row, err
	}
	before := loadAvg()
	rep, refreshMs, err := b.planReplay(ctx, c, environ, proxy, filepath.Join(dir, "report"))
	if err != nil {
		return row, err
	}
	row.LoadAvg = before + " → " + loadAvg()
	row.compare(c, p, rep)
	row.MeasRefreshMs = refreshMs
	row.PlanCommand = reproducible(c, args, p, b.cfg.Seed)
	b.logf("  %-16s drain %6.1fs predicted %6.1fs (%+.0f%%); peak oldest age %6.1fs predicted %6.1fs (%+.0f%%); refresh %.0f ms predicted %.0f ms; RTT %.2f ms, server %.2f ms, %.0f queries/s%s",
		c.name, row.MeasDrain, row.PredDrain, pct(row.PredDrain, row.MeasDrain), row.MeasPeakAge, row.PredPeakAge, pct(row.PredPeakAge, row.MeasPeakAge),
		row.MeasRefreshMs, row.PredRefreshMs, row.RTTms, row.CostMs, p.Server.Capacity, recoveryNote(row))
	return row, nil
}

// planPredict loads the backlog (all at once, as a queue holding it) and
// runs the planner against it.
func (b *Bench) planPredict(ctx context.Context, c planCase, environ []string, db string, entryCost time.Duration, dir string) (*planner.Plan, []string, error) {
	var out bytes.Buffer
	_, err := replay.Replay(ctx, replay.Options{In: filepath.Join(dir, "backlog"), ShiftToNow: true, Arrival: string(replay.ArrivalMax), Speed: 1},
		replay.Target{DB: b.direct.Database(db), Queue: "score_events", Claims: "score_claims", DeadLetter: "score_events_dead",
			Scores: "user_scores", Rules: b.rules}, &out, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the backlog: %w\n%s", err, out.String())
	}
	return b.runPlanner(c, environ, entryCost, filepath.Join(dir, "backlog"), filepath.Join(dir, "plan.svg"))
}

// compare fills the row from the plan's first row and the measured replay.
func (row *planRow) compare(c planCase, p *planner.Plan, rep *replay.Report) {
	row.Users, row.Replay = rep.DistinctUsers, "report"
	row.MeasDrain, row.MeasDrained, row.MeasPeakAge, row.MeasPeakDepth = rep.DurationSeconds, rep.Drained, rep.MaxOldestAgeSeconds, rep.MaxDepth
	r0 := p.Rows[0].Run
	if c.trRTT > 0 {
		r0 = p.Stability.Disturbed // the replay had the transient too
	}
	row.RTTms, row.CostMs, row.Capacity = p.Server.RTT*1000, p.Server.Cost*1000, p.Server.Capacity
	row.ScanUs, row.EntryUs = p.Server.ScanCost*1e6, p.Server.EntryCost*1e6
	row.PredDrain = r0.DrainSeconds
	row.PredRefreshMs = 1000 * r0.MeanRefreshSeconds
	// The replay's first sample is a second in: compare peaks from there.
	for _, s := range r0.Timeline {
		if s.T >= 1 {
			row.PredPeakAge, row.PredPeakDepth = math.Max(row.PredPeakAge, s.OldestAge), max(row.PredPeakDepth, s.Depth)
		}
	}
	row.PredClass = p.Stability.Assessment.Class
	if c.trRTT > 0 {
		row.Transient = true
		row.PredRecovered, row.PredRecovery = p.Stability.Recovered, p.Stability.RecoverySeconds
		row.MeasRecovered, row.MeasRecovery = measuredRecovery(rep, c)
	}
}

// planReplay is `scorerefresh replay --in DIR --drop --drain --shift-to-now`
// into the case's database, with the transient timed from the drain's
// start. It returns the report and the mean refresh duration.
func (b *Bench) planReplay(ctx context.Context, c planCase, environ []string, proxy *faultproxy.Proxy, reportDir string) (*replay.Report, float64, error) {
	cfg, err := config.Parse(append(environ, "METRICS_ADDR=", "LOG_LEVEL=warn"))
	if err != nil {
		return nil, 0, err
	}
	svc, err := app.New(ctx, cfg, app.Options{Logger: b.svcLog, Version: "bench"})
	if err != nil {
		return nil, 0, err
	}
	defer svc.Close(context.Background())
	var runner replay.Runner = svc
	if c.trRTT > 0 {
		runner = transientRunner{svc: svc, proxy: proxy, rtt: b.cfg.RTT, c: c}
	}
	o := replay.Options{In: filepath.Join(filepath.Dir(reportDir), "backlog"), ShiftToNow: true, Arrival: cmp.Or(c.arrival, string(replay.ArrivalMax)),
		Speed: max(c.speed, 1), Drop: true, Drain: true, Until: b.cfg.Plan.ReplayMax, ReportDir: reportDir, SampleInterval: time.Second}
	var out bytes.Buffer
	r, err := replay.Replay(ctx, o, replay.Target{
		DB: svc.DB, Queue: cfg.QueueCollection, Claims: cfg.ClaimsCollection, DeadLetter: cfg.DeadLetterCollection, Scores: cfg.ScoresCollection,
		Consumer: runner, Metrics: svc.Metrics, Rules: svc.Rules,
		Settings: replay.Settings{Server: b.srv.Name, Database: cfg.Database, RefreshConcurrency: cfg.RefreshConcurrency,
			MaxUsersInFlight: cfg.MaxUsersInFlight, ClaimWindow: cfg.ClaimWindow, MaxAttempts: cfg.MaxAttempts,
			Rules: svc.Rules.Source, Components: len(svc.Rules.Components), Version: "bench"},
	}, &out, nil)
	if err != nil && r == nil {
		return nil, 0, fmt.Errorf("replay: %w\n%s", err, out.String())
	}
	n, sum := histogram(svc.Metrics.RefreshDuration)
	mean := 0.0
	if n > 0 {
		mean = 1000 * sum / n
	}
	return r, mean, nil
}

// transientRunner runs the service and multiplies the proxy's delay on the
// case's schedule, counted from the moment the drain starts the consumer.
type transientRunner struct {
	svc   replay.Runner
	proxy *faultproxy.Proxy
	rtt   time.Duration
	c     planCase
}

func (t transientRunner) Run(ctx context.Context) error {
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer t.proxy.SetDelay(t.rtt/2, t.rtt/2)
		slow := time.Duration(float64(t.rtt) * t.c.trRTT)
		for _, step := range []struct{ at, rtt time.Duration }{{t.c.trAt, slow}, {t.c.trAt + t.c.trFor, t.rtt}} {
			select {
			case <-stop:
				return
			case <-time.After(time.Until(start.Add(step.at))):
			}
			t.proxy.SetDelay(step.rtt/2, step.rtt/2)
		}
	})
	err := t.svc.Run(ctx)
	close(stop)
	wg.Wait()
	return err
}

// runPlanner runs `scorerefresh plan` in process against the case's database
// (after the replay: the sources are loaded, the queue is empty) and reads
// its JSON.
func (b *Bench) runPlanner(c planCase, environ []string, entryCost time.Duration, backlog, svg string) (*planner.Plan, []string, error) {
	args := []string{"--in", backlog, "--measure", "--measure-concurrency", fmt.Sprint(b.cfg.Plan.MeasureConcurrency),
		"--entry-cost", entryCost.Round(time.Microsecond).String(), "--max-replicas", "3", "--svg", svg}
	if c.slope == 0 {
		// The server under the fleet's load, found by loading it; with a
		// knee, the knee describes that instead.
		args = append(args, "--measure-capacity", "3s")
	}
	if c.arrival != "" {
		args = append(args, "--arrival", c.arrival, "--speed", fmt.Sprint(c.speed))
	}
	if c.slope > 0 {
		args = append(args, "--rtt-knee", fmt.Sprint(c.knee), "--rtt-slope", c.slope.String())
	}
	if c.trRTT > 0 {
		args = append(args, "--transient-rtt", fmt.Sprint(c.trRTT), "--transient-at", c.trAt.String(), "--transient-for", c.trFor.String())
	}
	var stdout, stderr bytes.Buffer
	if code := plancmd.Run(append(args, "--json"), environ, &stdout, &stderr); code != 0 {
		return nil, nil, fmt.Errorf("scorerefresh plan %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	var p planner.Plan
	if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
		return nil, nil, fmt.Errorf("reading the plan: %w", err)
	}
	var text bytes.Buffer
	if err := p.WriteText(&text); err == nil {
		_ = os.WriteFile(filepath.Join(filepath.Dir(backlog), "plan.txt"), append(stderr.Bytes(), text.Bytes()...), 0o644)
	}
	return &p, args, nil
}

// measureEntryCost is the server's time per entry of a large ack: n
// queue-shaped documents deleted by one deleteMany of their _ids, less a
// round trip, on the direct connection.
func (b *Bench) measureEntryCost(ctx context.Context, n int) (time.Duration, error) {
	coll := b.direct.Database(b.nextDatabase("plan_entrycost")).Collection("score_events")
	defer func() { _ = coll.Database().Drop(context.Background()) }()
	docs, ids := make([]any, n), make([]bson.ObjectID, n)
	now := time.Now()
	for i := range docs {
		ids[i] = bson.NewObjectID()
		docs[i] = bson.D{{Key: "_id", Value: ids[i]}, {Key: "username", Value: "user-00000"}, {Key: "createdAt", Value: now}}
	}
	if err := insertAll(ctx, coll, docs); err != nil {
		return 0, err
	}
	rtt := time.Now()
	if err := b.direct.Ping(ctx, nil); err != nil {
		return 0, err
	}
	ping := time.Since(rtt)
	start := time.Now()
	res, err := coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return 0, err
	}
	if res.DeletedCount != int64(n) {
		return 0, fmt.Errorf("deleted %d of %d", res.DeletedCount, n)
	}
	return max(0, time.Since(start)-ping) / time.Duration(n), nil
}

// reproducible is the prediction alone, without a server: the backlog
// generated again (the queue file depends only on the shape, sizes, span
// and seed) and the planner given what it measured.
func reproducible(c planCase, args []string, p *planner.Plan, seed uint64) string {
	gen := fmt.Sprintf("scorerefresh backlog generate --shape %s --entries %d --users %d --seed %d", c.shape, c.entries, c.users, seed)
	if c.span > 0 {
		gen += " --span " + c.span.String()
	}
	gen += " --out /tmp/plan-" + c.name
	out := []string{"scorerefresh plan --in /tmp/plan-" + c.name, fmt.Sprintf("--components %d", p.Config.Components)}
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--measure":
			continue
		case "--in", "--svg", "--measure-concurrency", "--measure-capacity":
			i++
			continue
		}
		out = append(out, args[i])
	}
	s, cfg := p.Server, p.Config
	out = append(out, fmt.Sprintf("--rtt %.2fms --server-cost %.2fms", s.RTT*1000, s.Cost*1000))
	if s.Capacity > 0 {
		out = append(out, fmt.Sprintf("--server-capacity %.0f", s.Capacity))
	}
	if s.ScanCost > 0 {
		out = append(out, fmt.Sprintf("--scan-cost %.2fµs", s.ScanCost*1e6))
	}
	out = append(out, fmt.Sprintf("--change-streams=%t --concurrency %d --max-users-in-flight %d --claim-window %d --batch %d",
		cfg.ChangeStreams, cfg.Concurrency, cfg.MaxUsersInFlight, cfg.ClaimWindow, max(cfg.Batch, 1)))
	return gen + " && " + strings.Join(out, " ")
}

// measuredRecovery applies the planner's recovery rule to the replay's
// measured oldest ages.
func measuredRecovery(r *replay.Report, c planCase) (bool, float64) {
	var tl []planner.Sample
	for _, s := range r.Timeline {
		if s.Measured {
			tl = append(tl, planner.Sample{T: s.T, OldestAge: s.OldestAge})
		}
	}
	at, end := c.trAt.Seconds(), (c.trAt + c.trFor).Seconds()
	level := 0.0
	for _, s := range tl {
		if s.T >= at/3 && s.T < at {
			level = math.Max(level, s.OldestAge)
		}
	}
	loadEnd := math.Max(end, c.span.Seconds()/max(c.speed, 1))
	t, ok := planner.RecoveredAt(tl, level, end, loadEnd, true)
	if !ok {
		return false, -1
	}
	return true, t - end
}

// loadAvg is the machine's 1-minute load average: the bench shares its
// cores with whatever else runs, and says so.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func pct(pred, meas float64) float64 {
	if meas == 0 {
		return math.NaN()
	}
	return 100 * (pred - meas) / meas
}

func recoveryNote(r planRow) string {
	if !r.Transient {
		return ""
	}
	word := func(ok bool, t float64) string {
		if ok {
			return fmt.Sprintf("recovers after %.0fs", t)
		}
		return "does not recover"
	}
	return fmt.Sprintf("; transient: measured %s, predicted %s (%s)", word(r.MeasRecovered, r.MeasRecovery), word(r.PredRecovered, r.PredRecovery), r.PredClass)
}

// writePlanRows writes the validation table (Markdown) and its data (JSON).
func writePlanRows(out string, rows []planRow) error {
	dir := filepath.Join(out, "plan")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "validation.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("| case | backlog, load | config | planner's inputs | drain measured | predicted | error | peak oldest age measured | predicted | error | refresh ms measured / predicted | transient: measured | predicted | load avg |\n")
	b.WriteString("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, r := range rows {
		tm, tp := "", ""
		if r.Transient {
			tm, tp = recoveryWord(r.MeasRecovered, r.MeasRecovery), recoveryWord(r.PredRecovered, r.PredRecovery)+" ("+r.PredClass+")"
		}
		drained := ""
		if !r.MeasDrained {
			drained = " (not drained)"
		}
		fmt.Fprintf(&b, "| %s | %s %d/%d users, %s | %s | RTT %.1f ms, server %.2f ms, %.0f q/s, scan %.1f µs, delete %.0f µs | %.1fs%s | %.1fs | %+.0f%% | %.1fs | %.1fs | %+.0f%% | %.0f / %.0f | %s | %s | %s |\n",
			r.Case, r.Shape, r.Entries, r.Users, r.What, r.Config, r.RTTms, r.CostMs, r.Capacity, r.ScanUs, r.EntryUs,
			r.MeasDrain, drained, r.PredDrain, pct(r.PredDrain, r.MeasDrain), r.MeasPeakAge, r.PredPeakAge, pct(r.PredPeakAge, r.MeasPeakAge),
			r.MeasRefreshMs, r.PredRefreshMs, tm, tp, r.LoadAvg)
	}
	b.WriteString("\nReproduce a row (measurement and prediction): the bench command; the prediction alone, with the measured round trip:\n\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- %s: `%s`; `%s`\n", r.Case, r.BenchCommand, r.PlanCommand)
	}
	return os.WriteFile(filepath.Join(dir, "validation.md"), []byte(b.String()), 0o644)
}

func recoveryWord(ok bool, t float64) string {
	if ok {
		return fmt.Sprintf("recovers in %.0fs", t)
	}
	return "does not recover"
}
