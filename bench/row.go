package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/sync/errgroup"

	"github.com/scorerefresh/scorerefresh/internal/backlog"
	"github.com/scorerefresh/scorerefresh/queuestate"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Row is one scenario: what is queued, what arrives, who drains it, in what
// network, for how long.
type Row struct {
	Preset   string        `json:"preset"`
	Name     string        `json:"row"`
	Consumer string        `json:"consumer"` // consumerScorerefresh (default) or consumerReference
	Backlog  backlog.Spec  `json:"backlog"`
	Replicas int           `json:"replicas"`      // scorerefresh processes (in process, a client each); default 1
	Env      []string      `json:"env,omitempty"` // the service's environment for this row, e.g. REFRESH_BATCH_SIZE=1
	Scorer   string        `json:"scorer"`        // scorerRules (default), scorerInstant, scorerActivity or scorerHTTP
	RTT      time.Duration `json:"rtt_ns"`
	Steps    []Step        `json:"steps,omitempty"` // faults, in time order

	Rate     float64      `json:"offered_per_second,omitempty"` // the producer's entries per second
	RateOf   string       `json:"-"`                            // set: Rate is a multiple of this consumer's estimated drain rate
	Arrivals backlog.Spec `json:"arrivals"`                     // the producer's users; Entries caps what it sends (0: no cap)

	For time.Duration `json:"for_ns,omitempty"` // the producer runs this long; the run lasts at least this long
	Max time.Duration `json:"max_ns"`           // the run lasts at most this long
}

// Step is the proxy's state from At on: the round trip, the delay added per busy
// connection past a knee (zero: none), an outage, and whether every refresh fails.
type Step struct {
	At     time.Duration `json:"at_ns"`
	RTT    time.Duration `json:"rtt_ns"`
	Knee   int           `json:"knee,omitempty"`
	Slope  time.Duration `json:"slope_ns,omitempty"`
	Outage bool          `json:"outage,omitempty"`
	Fail   bool          `json:"fail,omitempty"`
}

func (s Step) String() string {
	return fmt.Sprintf("at %s: RTT %s, +%s per busy connection past %d, outage %v, refreshes fail %v", s.At, s.RTT, s.Slope, s.Knee, s.Outage, s.Fail)
}

// Result is one row's measurement.
type Result struct {
	Row
	Users        int                `json:"users"` // distinct users of the backlog
	Produced     int64              `json:"produced"`
	Seconds      float64            `json:"seconds"`
	Done         float64            `json:"entries_done"`
	Drained      bool               `json:"drained"`
	Rate         float64            `json:"entries_per_second"`
	Ratio        float64            `json:"ratio_to_baseline,omitempty"` // this rate over the reference's on the same row (the HTTP scorer: over the rules')
	Refreshes    float64            `json:"refreshes"`
	DeadLettered float64            `json:"dead_lettered"`
	PeakDepth    int64              `json:"peak_depth"`
	MaxOldest    float64            `json:"max_oldest_age"`
	Commands     map[string]float64 `json:"commands"` // every command of the consumer's clients, by "command collection"
	PerEntry     float64            `json:"commands_per_entry"`
	CommandsPer  float64            `json:"commands_per_second"`
	Capacity     float64            `json:"drain_capacity,omitempty"` // the consumer's own estimate at the end (running.figures)
	Verified     int                `json:"verified,omitempty"`       // users whose stored score was checked against the seeded sources
	Wrong        int                `json:"wrong,omitempty"`
	Samples      []sample           `json:"samples"`

	queue *mongo.Collection  // the row's queue, on the direct connection
	want  map[string]float64 // expected scores, for the scorers reading user_activity
}

// sample is the queue as the bench saw it at one moment of a run.
type sample struct {
	T         float64 `json:"t"`          // seconds since the consumer started
	Depth     int64   `json:"depth"`      // entries in the queue
	OldestAge float64 `json:"oldest_age"` // seconds; 0 when empty
	Done      float64 `json:"done"`       // entries done so far
	Arrived   int64   `json:"arrived"`    // entries the producer has enqueued
}

// runRow runs row on a fresh database: seed, start, produce, step the
// faults and sample until it ends, stop, verify, drop.
func (b *Bench) runRow(ctx context.Context, row Row) (*Result, error) {
	row.Consumer = cmp.Or(row.Consumer, consumerScorerefresh)
	row.Scorer = cmp.Or(row.Scorer, scorerRules)
	row.Replicas, row.RTT = max(row.Replicas, 1), cmp.Or(row.RTT, b.cfg.RTT)
	// RateOf's drain rate is estimated from the calibration: scorerefresh at
	// 90% of its lower bound, the reference one refresh at a time.
	switch row.RateOf {
	case consumerReference:
		row.Rate *= b.cal.bounds(b.cfg.RTT, 1).Latency
	case consumerScorerefresh:
		row.Rate *= 0.9 * b.cal.Bounds.Lower
	}
	db := b.direct.Database(b.nextDatabase(row.Name + "_" + row.Consumer[:3]))
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = db.Drop(dctx)
	}()
	row.Steps = slices.Clone(row.Steps)
	for i := range row.Steps { // a step's round trip defaults to the row's
		row.Steps[i].RTT = cmp.Or(row.Steps[i].RTT, row.RTT)
	}
	res := &Result{Row: row}
	if err := b.seed(ctx, db, res); err != nil {
		return nil, fmt.Errorf("seeding: %w", err)
	}
	b.logf("\n== %s/%s: %s, %d entries of %d users queued, %d replica(s), RTT %s, %s scorer, environment %v", row.Preset, row.Name, row.Consumer,
		row.Backlog.Entries, res.Users, row.Replicas, row.RTT, row.Scorer, row.Env)
	first := Step{RTT: row.RTT}
	if len(row.Steps) > 0 && row.Steps[0].At == 0 {
		first = row.Steps[0]
	}
	b.setFaults(first)
	defer b.setFaults(Step{})
	c, err := b.startConsumer(ctx, db.Name(), row)
	if err != nil {
		return nil, err
	}
	var arrived atomic.Int64
	var producer errgroup.Group
	prodCtx, stopProducer := context.WithTimeout(ctx, row.For) // a row with a Rate has a For
	if row.Rate > 0 {
		producer.Go(func() error { return b.produce(prodCtx, res.queue, row, &arrived) })
	}
	end, err := b.watch(ctx, row, c, res, &arrived)
	stopProducer()
	prodErr := producer.Wait()
	if err != nil {
		_ = c.stop()
		return nil, err
	}
	res.Seconds, res.Produced = end.Seconds(), arrived.Load()
	return b.finish(ctx, res, c, db, prodErr)
}

// finish reads a row's figures once it is over: the consumer's counters and
// capacity estimate, then, after its shutdown flush (which belongs to the
// run), the commands, the rates and the scores.
func (b *Bench) finish(ctx context.Context, res *Result, c *running, db *mongo.Database, prodErr error) (*Result, error) {
	res.Done, res.Refreshes, res.DeadLettered, res.Capacity = c.figures()
	if err := c.stop(); err != nil {
		b.logf("  (consumer stopped with: %v)", err)
	}
	if prodErr != nil {
		return nil, fmt.Errorf("producer: %w", prodErr)
	}
	res.Commands = c.counts()
	commands := 0.0
	for _, n := range res.Commands {
		commands += n
	}
	res.PerEntry = commands / math.Max(res.Done, 1)
	if res.Seconds > 0 {
		res.Rate, res.CommandsPer = res.Done/res.Seconds, commands/res.Seconds
	}
	if res.want != nil && res.Consumer == consumerScorerefresh { // every user's stored score
		var docs []scoring.ScoreDoc
		cur, err := db.Collection("user_scores").Find(ctx, bson.D{})
		if err == nil {
			err = cur.All(ctx, &docs)
		}
		if err != nil {
			return nil, fmt.Errorf("reading scores to verify: %w", err)
		}
		res.Verified, res.Wrong = len(res.want), len(res.want)
		for _, d := range docs { // one per user: the username is the _id
			if w, ok := res.want[d.Username]; ok && math.Abs(d.Score-w) <= 1e-9 {
				res.Wrong--
			}
		}
	}
	b.logf("  %.0f entries done in %.1fs (%.1f/s), drained %v, %.0f refreshes, %.2f commands/entry, peak depth %d, oldest %.1fs; %d scores verified, %d wrong",
		res.Done, res.Seconds, res.Rate, res.Drained, res.Refreshes, res.PerEntry, res.PeakDepth, res.MaxOldest, res.Verified, res.Wrong)
	if res.Wrong > 0 {
		return res, fmt.Errorf("%d of %d scores are wrong", res.Wrong, res.Verified)
	}
	return res, nil
}

// watch steps the faults and samples the queue every 50 ms until the row
// is over, and returns how long it ran.
func (b *Bench) watch(ctx context.Context, row Row, c *running, res *Result, arrived *atomic.Int64) (time.Duration, error) {
	tick := time.Tick(50 * time.Millisecond)
	steps, queue := row.Steps, queuestate.New(res.queue, nil)
	every := max(100*time.Millisecond, min(time.Second, cmp.Or(row.Max, row.For)/100))
	start, nextSample, nextLog := time.Now(), time.Duration(0), 10*time.Second
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick:
		}
		elapsed := time.Since(start)
		for len(steps) > 0 && elapsed >= steps[0].At {
			b.logf("  %6.1fs  %s", elapsed.Seconds(), steps[0])
			b.setFaults(steps[0])
			steps = steps[1:]
		}
		done, _, _, _ := c.figures()
		// Everything queued and sent is done, and the producer has stopped.
		drained := done >= float64(row.Backlog.Entries)+float64(arrived.Load()) &&
			(row.Rate == 0 || elapsed >= row.For || row.Arrivals.Entries > 0 && arrived.Load() >= int64(row.Arrivals.Entries))
		// A smoke row given work runs past Max (by 30 s at most) until it
		// has done some: on a loaded machine the first refresh can be slow.
		capped := row.Max > 0 && elapsed >= row.Max && (done > 0 || !b.cfg.Short || elapsed >= row.Max+30*time.Second)
		over := drained && elapsed >= row.For || capped
		if elapsed >= nextSample || over {
			// On the direct connection; a failed read leaves the depth and age
			// at 0: the timeline stays regular.
			s := sample{T: math.Round(elapsed.Seconds()*100) / 100, Done: done, Arrived: arrived.Load()}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if st, err := queue.Read(sctx); err == nil {
				s.Depth, s.OldestAge = st.Depth, st.OldestAge(time.Now()).Seconds()
			}
			cancel()
			res.Samples = append(res.Samples, s)
			res.PeakDepth, res.MaxOldest = max(res.PeakDepth, s.Depth), math.Max(res.MaxOldest, s.OldestAge)
			nextSample = elapsed + every
			if elapsed >= nextLog {
				b.logf("  %6.1fs  depth %6d  oldest %6.1fs  done %7.0f  arrived %6d", s.T, s.Depth, s.OldestAge, s.Done, s.Arrived)
				nextLog += 10 * time.Second
			}
		}
		if over {
			res.Drained = drained
			return elapsed, nil
		}
	}
}

// setFaults puts the proxies and the scorer in step s's state.
func (b *Bench) setFaults(s Step) {
	b.proxy.SetDelay(s.RTT/2, s.RTT/2)
	b.knee.Store(int64(s.Knee))
	b.slope.Store(int64(s.Slope))
	b.proxy.Refuse(s.Outage)
	b.proxy.Blackhole(s.Outage)
	b.failing.Store(s.Fail)
}

// produce enqueues entries at row.Rate every 50 ms on the direct connection:
// producers are other applications, not behind the consumer's latency.
func (b *Bench) produce(ctx context.Context, queue *mongo.Collection, row Row, sent *atomic.Int64) error {
	spec := row.Arrivals
	if spec.Users == 0 {
		spec = backlog.Spec{Shape: backlog.Diverse, Users: b.pool()}
	}
	pick := backlog.Picker(spec.Shape, rand.New(rand.NewPCG(b.cfg.Seed, uint64(b.runs))), spec.Users, spec.Hot)
	start := time.Now()
	tick := time.Tick(50 * time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
		due := int64(row.Rate*time.Since(start).Seconds()) - sent.Load()
		if spec.Entries > 0 {
			due = min(due, int64(spec.Entries)-sent.Load())
		}
		if due <= 0 {
			continue
		}
		now := time.Now()
		entries := make([]backlog.Entry, due)
		for i := range entries {
			entries[i] = backlog.Entry{User: pick(), At: now}
		}
		if _, err := queue.InsertMany(ctx, backlog.QueueDocs(entries, userName, "bench")); err != nil {
			// The driver's socket deadline is ctx's: at the end of For it
			// may fire a moment before ctx says it is done.
			if deadline, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(deadline) < time.Second {
				return nil
			}
			return err
		}
		sent.Add(due)
	}
}

func userName(i int) string { return fmt.Sprintf("user-%05d", i) }

// Report is one run: results.json holds it, report.md shows it.
type Report struct {
	Started     string      `json:"started"`
	Seconds     float64     `json:"seconds"`
	Short       bool        `json:"short"`
	Command     string      `json:"command"`
	Server      string      `json:"server"`
	Machine     string      `json:"machine"`
	GoVersion   string      `json:"go"`
	RTTms       float64     `json:"rtt_ms"`
	Concurrency int         `json:"concurrency"`
	Calibration calibration `json:"calibration"`
	Results     []*Result   `json:"results"`
	Targets     []target    `json:"targets"`
}

// target is one of the judgements a preset makes of its rows.
type target struct {
	Preset  string `json:"preset"`
	Target  string `json:"target"`
	Figure  string `json:"figure"`
	Met     bool   `json:"met"`
	Applies bool   `json:"applies"` // false: the run cannot show it (say, no reference rate)
}

func (t target) verdict() string {
	if !t.Applies {
		return "n/a"
	}
	return map[bool]string{true: "met", false: "MISS"}[t.Met]
}

func (r *Report) find(preset, row, consumer string) *Result {
	if i := slices.IndexFunc(r.Results, func(x *Result) bool { return x.Preset == preset && x.Name == row && x.Consumer == consumer }); i >= 0 {
		return r.Results[i]
	}
	return nil
}

// judge fills in the ratios to the reference and the targets that are
// cheap to judge, for the rows that have run.
func (r *Report) judge() {
	r.Targets = nil
	add := func(preset, what string, met, applies bool, format string, args ...any) {
		r.Targets = append(r.Targets, target{Preset: preset, Target: what, Figure: fmt.Sprintf(format, args...), Met: met, Applies: applies})
	}
	for _, x := range r.Results {
		// The baseline is the row's reference run; for the HTTP scorer, the
		// same backlog scored by rules.
		ref := r.find(x.Preset, x.Name, consumerReference)
		if x.Scorer == scorerHTTP {
			ref = r.find(x.Preset, "scorer-rules", consumerScorerefresh)
		}
		if ref != nil && x != ref && ref.Rate > 0 {
			x.Ratio = x.Rate / ref.Rate
		}
		if x.Ratio > 0 && (x.Preset == "diverse" || x.Preset == "firehose") {
			add(x.Preset, "≥ 10× the reference", x.Ratio >= 10, true, "%.1f×", x.Ratio)
		}
		switch {
		case x.Preset == "storm" || x.Preset == "slowdown":
			add(x.Preset, x.Name+": nobody dead-lettered, the backlog drains", x.DeadLettered == 0 && x.Drained, true,
				"%.0f dead-lettered; %.0f of %d entries done", x.DeadLettered, x.Done, int64(x.Backlog.Entries)+x.Produced)
		case x.Verified > 0:
			add(x.Preset, x.Name+": every score right", x.Wrong == 0, true, "%d verified, %d wrong", x.Verified, x.Wrong)
		}
	}
	svc := func(preset, row string) *Result { return r.find(preset, row, consumerScorerefresh) }
	if x, lower := svc("diverse", "diverse"), r.Calibration.Bounds.Lower; x != nil {
		add("diverse", "≥ 90% of the lower bound", x.Rate >= 0.9*lower, lower > 0, "%.1f/s of %.1f/s (%s)", x.Rate, lower, r.Calibration.Bounds)
	}
	if x := svc("recovery", "recovery"); x != nil && len(x.Steps) == 2 {
		pre, back := recovered(x.Samples, x.Steps[0].At.Seconds(), x.Steps[1].At.Seconds())
		add("recovery", "back under the pre-trigger oldest age ≤ 60 s after restore", back >= 0 && back <= 60, pre > 0,
			"pre-trigger %.1f s; back after %.0f s (-1: never)", pre, back)
	}
	if one, two := svc("overload", "overload-1.0x"), svc("overload", "overload-2.0x"); one != nil && two != nil {
		add("overload", "goodput plateaus: at 2× it keeps ≥ 80% of the goodput at 1×", two.Rate >= 0.8*one.Rate, true, "%.1f/s at 2×, %.1f/s at 1×", two.Rate, one.Rate)
	}
	if one, three := svc("scale", "scale-1"), svc("scale", "scale-3"); one != nil && three != nil && one.Rate > 0 {
		e := three.Rate / (3 * one.Rate)
		add("scale", "3-process rate / (3 × 1-process rate) ≥ 0.9", e >= 0.9, true, "%.2f (%.1f/s against %.1f/s)", e, three.Rate, one.Rate)
	}
}

// recovered is the highest oldest age before at (past its first third, the
// warm-up) and how long after restore the oldest age was back under it (-1:
// never).
func recovered(s []sample, at, restore float64) (pre, back float64) {
	for _, x := range s {
		if x.T >= at/3 && x.T < at {
			pre = math.Max(pre, x.OldestAge)
		}
	}
	for _, x := range s {
		if x.T >= restore && x.OldestAge <= pre {
			return pre, x.T - restore
		}
	}
	return pre, -1
}

func (r *Report) write(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644)
	}
	if err != nil {
		return fmt.Errorf("writing results.json: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644)
}

func (r *Report) markdown() string {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }
	w("# scorerefresh-bench results\n\n- command: `%s`", r.Command)
	w("- started %s, %.0f s; server: %s; machine: %s; %s", r.Started, r.Seconds, r.Server, r.Machine, r.GoVersion)
	w("- RTT %.0f ms (pkg/faultproxy) and REFRESH_CONCURRENCY %d unless a row says otherwise", r.RTTms, r.Concurrency)
	if r.Short {
		w("- **smoke run (-short)**: every row in seconds; the figures mean little")
	}
	c := r.Calibration
	w("\n## Calibration\n\nOn the direct connection: %.1f round trips per refresh of the bench's rules, %.2f ms of server per query, at most %.0f queries/s. "+
		"Bounds of a drain of distinct users at the run's RTT and concurrency (planner.LatencyCeiling, planner.ServerCeiling): %s.", c.RoundTrips, c.ServerMs, c.QPS, c.Bounds)
	w("\n## Results\n\n| preset | row | consumer | replicas | environment | scorer | RTT ms | backlog (users) | offered/s | seconds | done | drained | entries/s | × baseline | dead-lettered | peak depth | max oldest s | commands/entry | commands/s | capacity estimate/s | estimate ÷ entries/s |")
	w("|---|---|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.Results {
		ratio := strings.TrimPrefix(fmt.Sprintf("%.1f×", x.Ratio), "0.0×")
		estimate, vs := "", ""
		if x.Capacity > 0 {
			estimate = fmt.Sprintf("%.1f", x.Capacity)
			if x.Rate > 0 {
				vs = fmt.Sprintf("%.2f", x.Capacity/x.Rate)
			}
		}
		w("| %s | %s | %s | %d | %s | %s | %.0f | %d (%d) | %.1f | %.1f | %.0f | %v | %.1f | %s | %.0f | %d | %.1f | %.2f | %.0f | %s | %s |",
			x.Preset, x.Name, x.Consumer, x.Replicas, strings.Join(x.Env, " "), x.Scorer, ms(x.RTT), x.Backlog.Entries, x.Users, x.Row.Rate,
			x.Seconds, x.Done, x.Drained, x.Rate, ratio, x.DeadLettered, x.PeakDepth, x.MaxOldest, x.PerEntry, x.CommandsPer, estimate, vs)
	}
	w("\n## Faults and commands\n\nCommands per entry done, by command and collection, from the one recorder of each row (all its clients):\n")
	for _, x := range r.Results {
		var parts []string
		for _, s := range x.Steps {
			parts = append(parts, s.String())
		}
		keys := slices.SortedFunc(maps.Keys(x.Commands), func(a, b string) int {
			return cmp.Or(cmp.Compare(x.Commands[b], x.Commands[a]), strings.Compare(a, b))
		})
		for i, k := range keys {
			keys[i] = fmt.Sprintf("%s %.2f", k, x.Commands[k]/math.Max(x.Done, 1))
		}
		w("- %s/%s, %s%s: %s", x.Preset, x.Name, x.Consumer, strings.TrimSuffix(" ("+strings.Join(parts, "; ")+")", " ()"), strings.Join(keys, ", "))
	}
	w("\n## Targets\n\n| preset | target | figure | verdict |\n|---|---|---|---|")
	for _, t := range r.Targets {
		w("| %s | %s | %s | %s |", t.Preset, t.Target, t.Figure, t.verdict())
	}
	return sb.String()
}
