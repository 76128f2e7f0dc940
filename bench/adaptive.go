package bench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
)

// AdaptiveConfig is the adaptive scenario's settings (flags -adaptive-*).
type AdaptiveConfig struct {
	Knee         int           // busy connections the server model serves without extra delay
	Slope        time.Duration // extra delay per busy connection past the knee
	Cap          int           // REFRESH_CONCURRENCY, the adaptive limit's cap
	Entries      int           // diverse backlog of each knee run (part a) and of the three-instance runs (part c)
	DrainMax     time.Duration // each knee run (part a) lasts at most this long
	SteadyBefore time.Duration // steady state before the spike (part b)
	SpikeFor     time.Duration // how long the proxy delay is multiplied (part b)
	WatchAfter   time.Duration // how long the limit is watched after restore (part b)
	SpikeFactor  float64       // delay multiplier of the spike (part b)
	ThreeFor     time.Duration // duration of each three-instance run (part c)
}

func adaptiveFlags(fs *flag.FlagSet, o *AdaptiveConfig) {
	fs.IntVar(&o.Knee, "adaptive-knee", 6, "adaptive: busy connections the server serves without extra delay")
	fs.DurationVar(&o.Slope, "adaptive-slope", 15*time.Millisecond, "adaptive: extra delay per busy connection past the knee")
	fs.IntVar(&o.Cap, "adaptive-cap", 16, "adaptive: REFRESH_CONCURRENCY (the adaptive limit's cap)")
	fs.IntVar(&o.Entries, "adaptive-entries", 4000, "adaptive: diverse backlog of each knee run (part a) and of the three-instance run (part c)")
	fs.DurationVar(&o.DrainMax, "adaptive-drain", 30*time.Second, "adaptive: each knee run (part a) lasts at most this long")
	fs.DurationVar(&o.SteadyBefore, "adaptive-pre", 20*time.Second, "adaptive: steady state before the spike (part b)")
	fs.DurationVar(&o.SpikeFor, "adaptive-spike", 20*time.Second, "adaptive: how long the proxy delay is multiplied (part b)")
	fs.DurationVar(&o.WatchAfter, "adaptive-post", 30*time.Second, "adaptive: how long the limit is watched after restore (part b)")
	fs.Float64Var(&o.SpikeFactor, "adaptive-factor", 10, "adaptive: delay multiplier of the spike (part b)")
	fs.DurationVar(&o.ThreeFor, "adaptive-scale", 60*time.Second, "adaptive: duration of the three-instance run (part c)")
}

func shrinkAdaptive(shrink func(string, func()), o *AdaptiveConfig) {
	shrink("adaptive-entries", func() { o.Entries = 300 })
	shrink("adaptive-drain", func() { o.DrainMax = 2 * time.Second })
	shrink("adaptive-pre", func() { o.SteadyBefore = 2 * time.Second })
	shrink("adaptive-spike", func() { o.SpikeFor = 2 * time.Second })
	shrink("adaptive-post", func() { o.WatchAfter = 3 * time.Second })
	shrink("adaptive-scale", func() { o.ThreeFor = 2 * time.Second })
}

// limitSample is the adaptive limit of each instance at one moment.
type limitSample struct {
	T      float64   `json:"t"`
	Limits []float64 `json:"limits"`
}

// adaptiveRun is one run of the scenario with what was sampled beside it.
type adaptiveRun struct {
	Label    string        `json:"label"`
	Adaptive bool          `json:"adaptive"`
	Run      *runResult    `json:"run"`
	Limits   []limitSample `json:"limit_timeline,omitempty"`
	MaxOpen  []float64     `json:"max_pool_open,omitempty"` // per instance
}

// adaptiveResult is the adaptive scenario.
type adaptiveResult struct {
	Knee         int     `json:"knee"`
	SlopeMs      float64 `json:"slope_ms"`
	RTTms        float64 `json:"rtt_ms"`
	Cap          int     `json:"cap"`
	Entries      int     `json:"entries"`
	DrainSeconds float64 `json:"drain_seconds"`
	// Part a.
	Fixed          []adaptiveRun `json:"fixed"`
	AdaptiveAtKnee adaptiveRun   `json:"adaptive"`
	BestFixed      int           `json:"best_fixed_concurrency"`
	BestRate       float64       `json:"best_fixed_rate"`
	Fraction       float64       `json:"adaptive_fraction_of_best"`
	// Part b.
	Factor       float64     `json:"spike_factor"`
	SpikeRate    float64     `json:"spike_arrival_rate"`
	SpikeAt      float64     `json:"spike_at"`
	RestoreAt    float64     `json:"restore_at"`
	Spike        adaptiveRun `json:"spike"`
	PreLimit     float64     `json:"pre_spike_limit"`
	SpikeLimit   float64     `json:"min_limit_during_spike"`
	CutAfter     float64     `json:"cut_seconds_after_spike"`       // -1: never cut
	RecoverAfter float64     `json:"recover_seconds_after_restore"` // -1: not recovered
	// Part c.
	Three        adaptiveRun `json:"three"`
	PoolSize     int         `json:"pool_size"`
	MeanLimit    []float64   `json:"three_mean_limits"` // per instance, second half of the run
	Fairness     float64     `json:"three_fairness"`    // Jain's index of MeanLimit: 1 = equal shares
	ThreeOverOne float64     `json:"three_fraction_of_one"`
	// The same three with a fixed limit each: the best fixed one split three ways.
	ThreeFixed    adaptiveRun `json:"three_fixed"`
	ThreeFixedN   int         `json:"three_fixed_concurrency"`
	ThreeFraction float64     `json:"three_adaptive_fraction_of_fixed"`
}

func (x *adaptiveResult) runs() [][]*runResult {
	var rows [][]*runResult
	for _, f := range x.Fixed {
		rows = append(rows, []*runResult{f.Run})
	}
	for _, r := range []adaptiveRun{x.AdaptiveAtKnee, x.Spike, x.Three, x.ThreeFixed} {
		if r.Run != nil {
			rows = append(rows, []*runResult{r.Run})
		}
	}
	return rows
}

// knee is the server model: no extra delay up to knee busy connections,
// then slope more for each one past it.
func knee(k int, slope time.Duration) func(busy int) (time.Duration, time.Duration) {
	return func(busy int) (time.Duration, time.Duration) {
		if busy <= k {
			return 0, 0
		}
		return slope * time.Duration(busy-k), 0
	}
}

// observer samples each instance's limit once a second (adaptive only) and
// its open connections every tick.
func (r *adaptiveRun) observer() func(time.Duration, running) {
	next := time.Duration(0)
	return func(elapsed time.Duration, c running) {
		s, ok := c.(*scorerefresh)
		if !ok {
			return
		}
		if len(r.MaxOpen) < len(s.svcs) {
			r.MaxOpen = make([]float64, len(s.svcs))
		}
		for i, svc := range s.svcs {
			r.MaxOpen[i] = math.Max(r.MaxOpen[i], metrics.Read(svc.Mongo.PoolOpen))
		}
		if r.Adaptive && elapsed >= next {
			ls := limitSample{T: math.Round(elapsed.Seconds()*10) / 10}
			for _, svc := range s.svcs {
				ls.Limits = append(ls.Limits, metrics.Read(svc.Metrics.ConcurrencyLimit))
			}
			r.Limits = append(r.Limits, ls)
			next = elapsed.Truncate(time.Second) + time.Second
		}
	}
}

func (b *Bench) adaptive(ctx context.Context) (*adaptiveResult, error) {
	o := b.cfg.Adaptive
	x := &adaptiveResult{Knee: o.Knee, SlopeMs: ms(o.Slope), RTTms: ms(b.cfg.RTT), Cap: o.Cap,
		Entries: o.Entries, DrainSeconds: o.DrainMax.Seconds()}
	b.logf("\n== 7. adaptive concurrency: server with a knee at %d busy connections, +%s per connection past it; RTT %s; cap %d",
		o.Knee, o.Slope, b.cfg.RTT, o.Cap)
	proxy, err := faultproxy.Start(context.Background(), faultproxy.Config{Target: b.srv.Addr, DelayFunc: knee(o.Knee, o.Slope)})
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	saved := b.proxy
	b.proxy = proxy
	defer func() { b.proxy = saved }()

	backlog := diverseBacklog(o.Entries, time.Now(), b.cfg.Seed+2)
	for _, part := range []func(context.Context, *adaptiveResult, []any) error{b.adaptiveKnee, b.adaptiveSpike, b.adaptiveThree} {
		if err := part(ctx, x, backlog); err != nil {
			return nil, err
		}
	}
	b.targets = append(b.targets, adaptiveTargets(x, o.SpikeFactor)...)
	return x, nil
}

// measureAdaptive runs spec as r says (adaptive or fixed), watching each
// instance's limit and connections.
func (b *Bench) measureAdaptive(ctx context.Context, r *adaptiveRun, spec runSpec) error {
	spec.observe = r.observer()
	var env []string
	if r.Adaptive {
		env = []string{"ADAPTIVE_CONCURRENCY=true"}
	}
	return b.withEnv(env, func() (err error) { r.Run, err = b.measure(ctx, spec); return err })
}

// adaptiveKnee is part a: fixed limits against the adaptive one, on the
// same backlog, past the server's knee.
func (b *Bench) adaptiveKnee(ctx context.Context, x *adaptiveResult, backlog []any) error {
	o := b.cfg.Adaptive
	for _, n := range []int{2, 4, 8, 16} {
		r := adaptiveRun{Label: fmt.Sprintf("fixed %d", n)}
		if err := b.measureAdaptive(ctx, &r, runSpec{scenario: fmt.Sprintf("adaptive-fixed%d", n), consumer: consumerScorerefresh, concurrency: n,
			rtt: b.cfg.RTT, backlog: backlog, max: o.DrainMax}); err != nil {
			return err
		}
		x.Fixed = append(x.Fixed, r)
		if r.Run.Rate > x.BestRate {
			x.BestRate, x.BestFixed = r.Run.Rate, n
		}
	}
	x.AdaptiveAtKnee = adaptiveRun{Label: fmt.Sprintf("adaptive (cap %d)", o.Cap), Adaptive: true}
	if err := b.measureAdaptive(ctx, &x.AdaptiveAtKnee, runSpec{scenario: "adaptive-knee", consumer: consumerScorerefresh, concurrency: o.Cap,
		rtt: b.cfg.RTT, backlog: backlog, max: o.DrainMax}); err != nil {
		return err
	}
	x.Fraction = math.NaN()
	if x.BestRate > 0 {
		x.Fraction = x.AdaptiveAtKnee.Run.Rate / x.BestRate
	}
	b.logf("  best fixed: %d at %.1f/s; adaptive %.1f/s = %.2f of it; limit %s", x.BestFixed, x.BestRate, x.AdaptiveAtKnee.Run.Rate, x.Fraction, limitTrace(x.AdaptiveAtKnee.Limits, 0))
	return nil
}

// adaptiveSpike is part b: a spike of the delay under a steady producer.
func (b *Bench) adaptiveSpike(ctx context.Context, x *adaptiveResult, _ []any) error {
	o := b.cfg.Adaptive
	before, spike := o.SteadyBefore, o.SpikeFor
	x.SpikeAt, x.RestoreAt, x.Factor = before.Seconds(), (before + spike).Seconds(), o.SpikeFactor
	x.SpikeRate = 0.8 * math.Max(x.AdaptiveAtKnee.Run.Rate, 1)
	slow := time.Duration(float64(b.cfg.RTT) * o.SpikeFactor)
	x.Spike = adaptiveRun{Label: "spike", Adaptive: true}
	if err := b.measureAdaptive(ctx, &x.Spike, runSpec{scenario: "adaptive-spike", consumer: consumerScorerefresh, concurrency: o.Cap, rtt: b.cfg.RTT,
		produce: &produce{rate: x.SpikeRate, pool: b.cfg.Pool}, events: b.rttTrigger("spike", before, spike, slow),
		max: before + spike + o.WatchAfter, done: never}); err != nil {
		return err
	}
	x.PreLimit, x.SpikeLimit, x.CutAfter, x.RecoverAfter = spikeFigures(x.Spike.Limits, x.SpikeAt, x.RestoreAt)
	b.logf("  spike: limit %.1f before (mean), down to %.0f; cut %s, back %s; limit %s", x.PreLimit, x.SpikeLimit,
		seconds(x.CutAfter, "after the spike"), seconds(x.RecoverAfter, "after restore"), limitTrace(x.Spike.Limits, 0))
	return nil
}

// adaptiveThree is part c: three instances, whose clients' pools must stay
// within their size, adaptive against the best fixed limit split three ways.
func (b *Bench) adaptiveThree(ctx context.Context, x *adaptiveResult, backlog []any) error {
	o := b.cfg.Adaptive
	cfg, err := b.serviceConfig("x", o.Cap)
	if err != nil {
		return err
	}
	x.PoolSize = int(app.PoolSize(cfg))
	spec := runSpec{scenario: "adaptive-three", consumer: consumerScorerefresh, instances: 3, concurrency: o.Cap,
		rtt: b.cfg.RTT, backlog: backlog, max: o.ThreeFor, done: never}
	x.Three = adaptiveRun{Label: "three instances", Adaptive: true}
	if err := b.measureAdaptive(ctx, &x.Three, spec); err != nil {
		return err
	}
	x.ThreeFixedN = max(1, int(math.Round(float64(x.BestFixed)/3)))
	x.ThreeFixed = adaptiveRun{Label: fmt.Sprintf("three instances, fixed %d each", x.ThreeFixedN)}
	spec.scenario, spec.concurrency = "adaptive-three-fixed", x.ThreeFixedN
	if err := b.measureAdaptive(ctx, &x.ThreeFixed, spec); err != nil {
		return err
	}
	x.ThreeFraction = x.Three.Run.Rate / math.Max(x.ThreeFixed.Run.Rate, 1e-9)
	x.MeanLimit = meanLimits(x.Three.Limits, 3)
	x.Fairness = jain(x.MeanLimit)
	x.ThreeOverOne = x.Three.Run.Rate / math.Max(x.AdaptiveAtKnee.Run.Rate, 1e-9)
	b.logf("  three instances: max open connections %v (pool size %d); mean limits %s, fairness %.2f; %.1f entries/s together = %.2f of one adaptive instance, %.2f of three fixed at %d (%.1f/s)",
		x.Three.MaxOpen, x.PoolSize, floatsf(x.MeanLimit, "%.1f"), x.Fairness, x.Three.Run.Rate, x.ThreeOverOne, x.ThreeFraction, x.ThreeFixedN, x.ThreeFixed.Run.Rate)
	return nil
}

// adaptiveTargets judge the three parts.
func adaptiveTargets(x *adaptiveResult, spikeFactor float64) []target {
	poolOK := len(x.Three.MaxOpen) == 3
	for _, m := range x.Three.MaxOpen {
		poolOK = poolOK && m <= float64(x.PoolSize)
	}
	return []target{
		{Scenario: "7 adaptive", Target: "adaptive ≥ 0.9 × the best fixed REFRESH_CONCURRENCY past a load knee",
			Figure: fmt.Sprintf("%.2f (adaptive %.1f/s vs fixed %d at %.1f/s; fixed %s)", x.Fraction, x.AdaptiveAtKnee.Run.Rate, x.BestFixed, x.BestRate, fixedRates(x.Fixed)),
			Value:  x.Fraction, Met: x.Fraction >= 0.9, Applies: true},
		{Scenario: "7 adaptive", Target: fmt.Sprintf("limit cut within seconds of a ×%.0f delay spike", spikeFactor),
			Figure: fmt.Sprintf("limit %.1f (mean before) → %.0f, below its steady-state low %s", x.PreLimit, x.SpikeLimit, seconds(x.CutAfter, "after the spike")),
			Value:  x.CutAfter, Met: x.CutAfter >= 0 && x.CutAfter <= 5, Applies: true},
		{Scenario: "7 adaptive", Target: "limit grows back after restore",
			Figure: fmt.Sprintf("back to ≥ %.0f %s", math.Round(x.PreLimit), seconds(x.RecoverAfter, "after restore")),
			Value:  x.RecoverAfter, Met: x.RecoverAfter >= 0, Applies: x.CutAfter >= 0},
		{Scenario: "7 adaptive", Target: "three instances: no client opens more than its pool size",
			Figure: fmt.Sprintf("max open %s; pool size %d (REFRESH_CONCURRENCY %d + %d)", floats(x.Three.MaxOpen), x.PoolSize, x.Cap, app.PoolOverhead),
			Value:  maxOf(x.Three.MaxOpen), Met: poolOK, Applies: true},
		{Scenario: "7 adaptive", Target: "three instances share the server: Jain's index of their mean limits ≥ 0.9",
			Figure: fmt.Sprintf("%.2f (mean limits %s over the second half)", x.Fairness, floatsf(x.MeanLimit, "%.1f")),
			Value:  x.Fairness, Met: x.Fairness >= 0.9, Applies: true},
		{Scenario: "7 adaptive", Target: "three adaptive instances drain ≥ 0.9 × three fixed at the best fixed limit split three ways",
			Figure: fmt.Sprintf("%.2f (%.1f vs %.1f entries/s at %d each; one adaptive instance alone: %.1f)", x.ThreeFraction, x.Three.Run.Rate, x.ThreeFixed.Run.Rate, x.ThreeFixedN, x.AdaptiveAtKnee.Run.Rate),
			Value:  x.ThreeFraction, Met: x.ThreeFraction >= 0.9, Applies: true},
	}
}

// spikeFigures are the limit before the spike (the mean over the second
// half of the steady state: the limit saws around it, so the value at one
// instant says little), its lowest during the spike, the seconds until it
// fell below everything the steady state saw, and the seconds after restore
// until it was back to the rounded mean.
func spikeFigures(ls []limitSample, at, restore float64) (pre, low, cut, back float64) {
	cut, back, low = -1, -1, math.Inf(1)
	floor, n := math.Inf(1), 0.0
	for _, s := range ls {
		if s.T > at/2 && s.T <= at {
			pre += s.Limits[0]
			n++
			floor = math.Min(floor, s.Limits[0])
		}
	}
	if n == 0 {
		return 0, 0, -1, -1
	}
	pre /= n
	for _, s := range ls {
		l := s.Limits[0]
		if s.T > at && s.T <= restore {
			low = math.Min(low, l)
			if cut < 0 && l < floor {
				cut = s.T - at
			}
		}
		if s.T >= restore && back < 0 && l >= math.Round(pre) {
			back = s.T - restore
		}
	}
	if math.IsInf(low, 1) {
		low = pre
	}
	return
}

// meanLimits is each of n instances' mean limit over the second half of
// the samples: the first half is the search from the starting limit.
func meanLimits(ls []limitSample, n int) []float64 {
	out := make([]float64, n)
	half := ls[len(ls)/2:]
	for i := range out {
		for _, s := range half {
			if i < len(s.Limits) {
				out[i] += s.Limits[i] / float64(len(half))
			}
		}
	}
	return out
}

// jain is Jain's fairness index: (Σx)² / (n·Σx²), 1 when all are equal,
// 1/n when one has everything.
func jain(x []float64) float64 {
	var sum, sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	if sq == 0 {
		return math.NaN()
	}
	return sum * sum / (float64(len(x)) * sq)
}

func limitTrace(ls []limitSample, i int) string {
	var parts []string
	for _, s := range ls {
		if i < len(s.Limits) {
			parts = append(parts, fmt.Sprintf("%.0f", s.Limits[i]))
		}
	}
	return strings.Join(parts, " ")
}

func fixedRates(fs []adaptiveRun) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%d: %.1f/s", f.Run.Concurrency, f.Run.Rate))
	}
	return strings.Join(parts, ", ")
}

func floats(v []float64) string { return floatsf(v, "%.0f") }

func floatsf(v []float64, format string) string {
	var parts []string
	for _, f := range v {
		parts = append(parts, fmt.Sprintf(format, f))
	}
	return strings.Join(parts, " / ")
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, f := range v {
		m = math.Max(m, f)
	}
	return m
}

func (x *adaptiveResult) markdown(w func(string, ...any)) {
	w("## Adaptive concurrency")
	w("")
	w("Server model: pkg/faultproxy DelayFunc adds no delay up to %d busy connections and %.0f ms per busy connection past them, on top of the %.0f ms RTT. Same %d-entry diverse backlog, each run at most %.0f s.",
		x.Knee, x.SlopeMs, x.RTTms, x.Entries, x.DrainSeconds)
	w("")
	w("(a) throughput past the knee:")
	w("")
	w("| REFRESH_CONCURRENCY | entries/s | mean refresh ms | refreshes running on average |")
	w("|---|---:|---:|---:|")
	for _, f := range append(append([]adaptiveRun{}, x.Fixed...), x.AdaptiveAtKnee) {
		if f.Run == nil {
			continue
		}
		w("| %s | %.1f | %.0f | %.1f |", f.Label, f.Run.Rate, f.Run.MeanRefreshMs, f.Run.BusySlots)
	}
	w("")
	w("Best fixed: %d at %.1f entries/s; adaptive: %.1f entries/s = **%.2f** of it (target ≥ 0.9).", x.BestFixed, x.BestRate, x.AdaptiveAtKnee.Run.Rate, x.Fraction)
	w("Adaptive limit, each second: %s.", limitTrace(x.AdaptiveAtKnee.Limits, 0))
	w("")
	w("(b) delay ×%.0f from %.0f s to %.0f s, arrivals %.1f/s: limit %.1f before (mean of the steady state's second half), lowest %.0f during; below the steady state's low %s, back to %.0f %s.",
		x.Factor, x.SpikeAt, x.RestoreAt, x.SpikeRate, x.PreLimit, x.SpikeLimit,
		seconds(x.CutAfter, "after the spike"), math.Round(x.PreLimit), seconds(x.RecoverAfter, "after restore"))
	w("Limit, each second: %s.", limitTrace(x.Spike.Limits, 0))
	w("")
	w("(c) three instances (separate clients), adaptive on, cap %d: max open connections per client %s; pool size %d.",
		x.Cap, floats(x.Three.MaxOpen), x.PoolSize)
	w("Mean limits over the second half %s: Jain's fairness index **%.2f** (1 = equal shares). Together %.1f entries/s = **%.2f** of the same three with a fixed %d each (%.1f/s), %.2f of one adaptive instance in (a).",
		floatsf(x.MeanLimit, "%.1f"), x.Fairness, x.Three.Run.Rate, x.ThreeFraction, x.ThreeFixedN, x.ThreeFixed.Run.Rate, x.ThreeOverOne)
	for i := range x.Three.MaxOpen {
		w("Instance %d limit, each second: %s.", i+1, limitTrace(x.Three.Limits, i))
	}
	w("")
}
