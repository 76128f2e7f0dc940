package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// target is one of the targets with the figure that decides it.
type target struct {
	Scenario string  `json:"scenario"`
	Target   string  `json:"target"`
	Figure   string  `json:"figure"`
	Value    float64 `json:"value"`
	Met      bool    `json:"met"`
	Applies  bool    `json:"applies"` // false: the condition of the target does not hold in this run
}

// pair is a scenario's two runs.
type pair struct {
	Reference    *runResult `json:"reference,omitempty"`
	Scorerefresh *runResult `json:"scorerefresh"`
}

func (p pair) ratio() float64 {
	if p.Reference == nil || p.Reference.Rate == 0 {
		return math.NaN()
	}
	return p.Scorerefresh.Rate / p.Reference.Rate
}

// drainResult is scenarios 1 and 2.
type drainResult struct {
	pair
	Entries       int           `json:"entries"`
	Users         int           `json:"users"`
	Ratio         float64       `json:"ratio"`
	Bounds        refreshBounds `json:"bounds"`
	FractionLower float64       `json:"fraction_of_lower_bound,omitempty"`
}

func (b *Bench) diverse(ctx context.Context) (*drainResult, error) {
	b.logf("\n== 1. diverse drain: %d entries of %d distinct users", b.cfg.DiverseEntries, b.cfg.DiverseEntries)
	backlog := diverseBacklog(b.cfg.DiverseEntries, time.Now(), b.cfg.Seed)
	r := &drainResult{Entries: b.cfg.DiverseEntries, Users: b.cfg.DiverseEntries, Bounds: b.cal.bounds(b.cfg.RTT, b.cfg.Concurrency)}
	var err error
	if r.Reference, err = b.measure(ctx, runSpec{scenario: "diverse", consumer: consumerReference, rtt: b.cfg.RTT, backlog: backlog, max: b.cfg.ReferenceMax}); err != nil {
		return nil, err
	}
	if r.Scorerefresh, err = b.measure(ctx, runSpec{scenario: "diverse", consumer: consumerScorerefresh, rtt: b.cfg.RTT, backlog: backlog, max: b.cfg.DrainMax}); err != nil {
		return nil, err
	}
	r.Ratio = r.ratio()
	// One entry per user: entries/s are refreshes/s, comparable to the bounds.
	r.FractionLower = r.Scorerefresh.Rate / r.Bounds.Lower
	b.logf("  ratio %.1f×; scorerefresh at %.0f%% of the %s bound (%.1f/s)", r.Ratio, 100*r.FractionLower, r.Bounds.Which, r.Bounds.Lower)
	b.targets = append(b.targets,
		target{Scenario: "1 diverse", Target: fmt.Sprintf("≥ 90%% of the lower bound at REFRESH_CONCURRENCY %d", b.cfg.Concurrency),
			Figure: fmt.Sprintf("%.1f entries/s = %.0f%% of the %s bound %.1f/s", r.Scorerefresh.Rate, 100*r.FractionLower, r.Bounds.Which, r.Bounds.Lower),
			Value:  r.FractionLower, Met: r.FractionLower >= 0.9, Applies: true},
		target{Scenario: "1 diverse", Target: "ratio ≥ 12 where the latency bound is the lower one",
			Figure: fmt.Sprintf("%.1f× (%.1f vs %.2f entries/s); binding bound: %s", r.Ratio, r.Scorerefresh.Rate, r.Reference.Rate, r.Bounds.Which),
			Value:  r.Ratio, Met: r.Ratio >= 12, Applies: r.Bounds.Which == "latency"},
	)
	return r, nil
}

func (b *Bench) firehose(ctx context.Context) (*drainResult, error) {
	b.logf("\n== 2. firehose drain: %d entries, %.0f%% one user, the rest over %d users", b.cfg.FirehoseEntries, 100*b.cfg.FirehoseShare, b.cfg.FirehoseUsers)
	backlog := firehoseBacklog(b.cfg.FirehoseEntries, b.cfg.FirehoseUsers, b.cfg.FirehoseShare, time.Now(), b.cfg.Seed)
	r := &drainResult{Entries: b.cfg.FirehoseEntries, Users: distinctUsers(backlog), Bounds: b.cal.bounds(b.cfg.RTT, b.cfg.Concurrency)}
	var err error
	if r.Reference, err = b.measure(ctx, runSpec{scenario: "firehose", consumer: consumerReference, rtt: b.cfg.RTT, backlog: backlog, max: b.cfg.ReferenceMax}); err != nil {
		return nil, err
	}
	if r.Scorerefresh, err = b.measure(ctx, runSpec{scenario: "firehose", consumer: consumerScorerefresh, rtt: b.cfg.RTT, backlog: backlog, max: b.cfg.DrainMax}); err != nil {
		return nil, err
	}
	r.Ratio = r.ratio()
	b.logf("  ratio %.1f×", r.Ratio)
	b.targets = append(b.targets, target{Scenario: "2 firehose", Target: "≥ 10× the reference",
		Figure: fmt.Sprintf("%.1f× (%.1f vs %.1f entries/s)", r.Ratio, r.Scorerefresh.Rate, r.Reference.Rate),
		Value:  r.Ratio, Met: r.Ratio >= 10, Applies: true})
	return r, nil
}

// wedgeResult is scenario 3.
type wedgeResult struct {
	pair
	Rate             float64 `json:"arrival_rate"`
	Note             string  `json:"note,omitempty"`
	RefFinalDepth    int64   `json:"reference_final_depth"`
	RefDepthSlope    float64 `json:"reference_depth_growth_per_second"`
	RefMaxOldestAge  float64 `json:"reference_max_oldest_age"`
	SRMaxOldestAge   float64 `json:"scorerefresh_max_oldest_age"`
	SRFinalDepth     int64   `json:"scorerefresh_final_depth"`
	SRDepthSlope     float64 `json:"scorerefresh_depth_growth_per_second"`
	SRGoodput        float64 `json:"scorerefresh_goodput"`
	ReferenceGoodput float64 `json:"reference_goodput"`
}

func (b *Bench) wedge(ctx context.Context, refRate, srRate float64) (*wedgeResult, error) {
	r := &wedgeResult{Rate: b.cfg.WedgeFactor * refRate}
	if r.Rate >= 0.8*srRate {
		r.Note = fmt.Sprintf("%.0f× the reference (%.1f/s) is not under scorerefresh's capacity (%.1f/s): capped at 80%% of it", b.cfg.WedgeFactor, r.Rate, srRate)
		r.Rate = 0.8 * srRate
	}
	b.logf("\n== 3. wedge: diverse arrivals at %.1f entries/s (%.1f× the reference's %.2f/s; scorerefresh drains %.1f/s) for %s",
		r.Rate, r.Rate/refRate, refRate, srRate, b.cfg.WedgeFor)
	produce := &produce{rate: r.Rate, pool: b.cfg.Pool}
	var err error
	if r.Reference, err = b.measure(ctx, runSpec{scenario: "wedge", consumer: consumerReference, rtt: b.cfg.RTT, produce: produce, max: b.cfg.WedgeFor, done: never}); err != nil {
		return nil, err
	}
	if r.Scorerefresh, err = b.measure(ctx, runSpec{scenario: "wedge", consumer: consumerScorerefresh, rtt: b.cfg.RTT, produce: produce, max: b.cfg.WedgeFor, done: never}); err != nil {
		return nil, err
	}
	half := b.cfg.WedgeFor.Seconds() / 2
	end := b.cfg.WedgeFor.Seconds()
	r.RefFinalDepth = last(r.Reference.Timeline).Depth
	r.RefDepthSlope = depthSlope(r.Reference.Timeline, half, end)
	r.RefMaxOldestAge = maxOldest(r.Reference.Timeline, 0)
	r.ReferenceGoodput = r.Reference.windowRate(half, end)
	r.SRFinalDepth = last(r.Scorerefresh.Timeline).Depth
	r.SRDepthSlope = depthSlope(r.Scorerefresh.Timeline, half, end)
	r.SRMaxOldestAge = maxOldest(r.Scorerefresh.Timeline, 0)
	r.SRGoodput = r.Scorerefresh.windowRate(half, end)
	b.logf("  reference: depth %d at the end, growing %.1f/s over the second half, oldest age up to %.0fs",
		r.RefFinalDepth, r.RefDepthSlope, r.RefMaxOldestAge)
	b.logf("  scorerefresh: depth %d at the end (%+.2f/s), oldest age at most %.1fs", r.SRFinalDepth, r.SRDepthSlope, r.SRMaxOldestAge)
	b.targets = append(b.targets,
		target{Scenario: "3 wedge", Target: "the reference's queue grows without bound",
			Figure: fmt.Sprintf("depth %d after %s, still growing %.1f entries/s over the second half; oldest age %.0f s", r.RefFinalDepth, b.cfg.WedgeFor, r.RefDepthSlope, r.RefMaxOldestAge),
			Value:  r.RefDepthSlope, Met: r.RefDepthSlope > 0.5*(r.Rate-refRate), Applies: true},
		target{Scenario: "3 wedge", Target: "scorerefresh's oldest age stays under 30 s",
			Figure: fmt.Sprintf("at most %.1f s (depth %d at the end)", r.SRMaxOldestAge, r.SRFinalDepth),
			Value:  r.SRMaxOldestAge, Met: r.SRMaxOldestAge < 30, Applies: true})
	return r, nil
}

// recoveryResult is scenario 4.
type recoveryResult struct {
	pair
	Rate          float64 `json:"arrival_rate"`
	TriggerAt     float64 `json:"trigger_at"`
	RestoreAt     float64 `json:"restore_at"`
	TriggerRTTms  float64 `json:"trigger_rtt_ms"`
	PreLevel      float64 `json:"pre_trigger_oldest_age"`
	PeakDepth     int64   `json:"scorerefresh_peak_depth"`
	PeakAge       float64 `json:"scorerefresh_peak_oldest_age"`
	Recovery      float64 `json:"scorerefresh_recovery_seconds"` // -1: not recovered
	RefPreLevel   float64 `json:"reference_pre_trigger_oldest_age"`
	RefRecovery   float64 `json:"reference_recovery_seconds"` // -1: not recovered
	RefFinalDepth int64   `json:"reference_final_depth"`
	RefObserved   float64 `json:"reference_observed_after_restore"`
}

func (b *Bench) recovery(ctx context.Context, srRate float64) (*recoveryResult, error) {
	pre, trig := b.cfg.RecoveryBefore, b.cfg.TriggerFor
	r := &recoveryResult{Rate: 0.5 * srRate, TriggerAt: pre.Seconds(), RestoreAt: (pre + trig).Seconds(), TriggerRTTms: ms(b.cfg.RTT) * b.cfg.TriggerRTTFactor}
	b.logf("\n== 4. trigger and recovery: arrivals at %.1f/s (half of scorerefresh's %.1f/s); RTT × %.0f from %s to %s",
		r.Rate, srRate, b.cfg.TriggerRTTFactor, pre, pre+trig)
	slow := time.Duration(float64(b.cfg.RTT) * b.cfg.TriggerRTTFactor)
	events := []timedEvent{
		{at: pre, name: fmt.Sprintf("trigger: RTT %s", slow), do: func() { b.proxy.SetDelay(slow/2, slow/2) }},
		{at: pre + trig, name: fmt.Sprintf("restore: RTT %s", b.cfg.RTT), do: func() { b.proxy.SetDelay(b.cfg.RTT/2, b.cfg.RTT/2) }},
	}
	produce := &produce{rate: r.Rate, pool: b.cfg.Pool}
	warm := pre.Seconds() / 3
	recoveredBy := func(samples []sample) float64 {
		level := maxOldestIn(samples, warm, r.TriggerAt)
		for _, s := range samples {
			if s.T >= r.RestoreAt && s.OldestAge <= level {
				return s.T - r.RestoreAt
			}
		}
		return -1
	}
	var err error
	r.Reference, err = b.measure(ctx, runSpec{scenario: "recovery", consumer: consumerReference, rtt: b.cfg.RTT, produce: produce,
		events: events, max: pre + trig + b.cfg.RecoveryReferenceWatch, done: never})
	if err != nil {
		return nil, err
	}
	r.Scorerefresh, err = b.measure(ctx, runSpec{scenario: "recovery", consumer: consumerScorerefresh, rtt: b.cfg.RTT, produce: produce,
		events: events, max: pre + trig + b.cfg.RecoveryMax,
		done: func(samples []sample) bool {
			t := recoveredBy(samples)
			return t >= 0 && last(samples).T >= r.RestoreAt+t+5
		}})
	if err != nil {
		return nil, err
	}
	r.PreLevel = maxOldestIn(r.Scorerefresh.Timeline, warm, r.TriggerAt)
	r.Recovery = recoveredBy(r.Scorerefresh.Timeline)
	r.PeakAge = maxOldest(r.Scorerefresh.Timeline, r.TriggerAt)
	for _, s := range r.Scorerefresh.Timeline {
		r.PeakDepth = max(r.PeakDepth, s.Depth)
	}
	r.RefPreLevel = maxOldestIn(r.Reference.Timeline, warm, r.TriggerAt)
	r.RefRecovery = recoveredBy(r.Reference.Timeline)
	r.RefFinalDepth = last(r.Reference.Timeline).Depth
	r.RefObserved = last(r.Reference.Timeline).T - r.RestoreAt
	fig := fmt.Sprintf("recovered %.0f s after restore (oldest age back to ≤ %.1f s; peak %.0f s, depth %d)", r.Recovery, r.PreLevel, r.PeakAge, r.PeakDepth)
	if r.Recovery < 0 {
		fig = fmt.Sprintf("not recovered within %s of restore (pre-trigger oldest age %.1f s)", b.cfg.RecoveryMax, r.PreLevel)
	}
	b.logf("  scorerefresh: %s", fig)
	refFig := fmt.Sprintf("not recovered within %.0f s of restore: depth %d and rising, oldest age %.0f s", r.RefObserved, r.RefFinalDepth, last(r.Reference.Timeline).OldestAge)
	if r.RefRecovery >= 0 {
		refFig = fmt.Sprintf("recovered %.0f s after restore", r.RefRecovery)
	}
	b.logf("  reference: %s", refFig)
	b.targets = append(b.targets,
		target{Scenario: "4 recovery", Target: "scorerefresh back under its pre-trigger oldest age ≤ 60 s after restore",
			Figure: fig, Value: r.Recovery, Met: r.Recovery >= 0 && r.Recovery <= 60, Applies: true},
		target{Scenario: "4 recovery", Target: "the reference does not recover", Figure: refFig,
			Value: r.RefRecovery, Met: r.RefRecovery < 0, Applies: true})
	return r, nil
}

// overloadLevel is one offered load of scenario 5.
type overloadLevel struct {
	Factor  float64    `json:"factor"`
	Offered float64    `json:"offered"`
	Goodput float64    `json:"goodput"`
	Run     *runResult `json:"run"`
}

func (b *Bench) overload(ctx context.Context, srRate float64) ([]overloadLevel, error) {
	b.logf("\n== 5. overload: offered load 0.5×, 1×, 1.5×, 2× scorerefresh's %.1f entries/s, %s each", srRate, b.cfg.OverloadPerLevel)
	var levels []overloadLevel
	warm := math.Min(10, b.cfg.OverloadPerLevel.Seconds()/4)
	for _, f := range []float64{0.5, 1, 1.5, 2} {
		l := overloadLevel{Factor: f, Offered: f * srRate}
		var err error
		l.Run, err = b.measure(ctx, runSpec{scenario: fmt.Sprintf("overload%.1fx", f), consumer: consumerScorerefresh, rtt: b.cfg.RTT,
			produce: &produce{rate: l.Offered, pool: b.cfg.Pool}, max: b.cfg.OverloadPerLevel, done: never})
		if err != nil {
			return nil, err
		}
		l.Goodput = l.Run.windowRate(warm, b.cfg.OverloadPerLevel.Seconds())
		b.logf("  offered %.1f/s -> goodput %.1f/s", l.Offered, l.Goodput)
		levels = append(levels, l)
	}
	at1 := levels[1].Goodput
	worst := math.Min(levels[2].Goodput, levels[3].Goodput)
	b.targets = append(b.targets, target{Scenario: "5 overload", Target: "goodput plateaus, never collapses (1.5× and 2× keep ≥ 80% of the goodput at 1×)",
		Figure: fmt.Sprintf("goodput %.1f / %.1f / %.1f / %.1f entries/s at 0.5× / 1× / 1.5× / 2×", levels[0].Goodput, levels[1].Goodput, levels[2].Goodput, levels[3].Goodput),
		Value:  worst / at1, Met: worst >= 0.8*at1, Applies: true})
	return levels, nil
}

// scaleResult is scenario 6.
type scaleResult struct {
	RTTms      float64       `json:"rtt_ms"`
	Entries    int           `json:"entries"`
	One        *runResult    `json:"one"`
	Three      *runResult    `json:"three"`
	RateOne    float64       `json:"rate_one"`
	RateThree  float64       `json:"rate_three"`
	Efficiency float64       `json:"efficiency"`
	BoundsOne  refreshBounds `json:"bounds_one"`
	// LatencyThree is three processes' latency bound; the server bound is shared.
	LatencyThree float64 `json:"latency_bound_three"`
}

func (b *Bench) scale(ctx context.Context) (*scaleResult, error) {
	rtt := b.cfg.ScaleRTT
	if rtt == 0 {
		// Latency-bound even with three processes: their combined latency
		// bound at most 15% of what the server serves to refreshes, since
		// on FerretDB every claim round and ack flush of each process
		// also reads the whole queue, which the server bound leaves out.
		need := 3 * float64(b.cfg.Concurrency) / (b.cal.RoundTrips * 0.15 * b.cal.bounds(b.cfg.RTT, b.cfg.Concurrency).Server)
		rtt = max(b.cfg.RTT, time.Duration((need-b.cal.ServerMs/1000)*float64(time.Second)))
		rtt = (rtt + 10*time.Millisecond - 1).Truncate(10 * time.Millisecond)
	}
	r := &scaleResult{RTTms: ms(rtt), BoundsOne: b.cal.bounds(rtt, b.cfg.Concurrency)}
	r.LatencyThree = 3 * r.BoundsOne.Latency
	warm := b.cfg.ScaleWarmUp
	window := b.cfg.ScaleWindow
	r.Entries = max(200, int(1.3*math.Min(r.LatencyThree, r.BoundsOne.Server)*(warm+window).Seconds()))
	b.logf("\n== 6. scale-out: 1 vs 3 scorerefresh processes (in process, separate clients) at RTT %s; %d diverse entries; rate over %s after %s",
		rtt, r.Entries, window, warm)
	b.logf("  bounds: one process %.1f/s (latency), three %.1f/s (latency), server %.1f/s", r.BoundsOne.Latency, r.LatencyThree, r.BoundsOne.Server)
	backlog := diverseBacklog(r.Entries, time.Now(), b.cfg.Seed+1)
	done := func(samples []sample) bool { return last(samples).T >= (warm + window).Seconds() }
	var err error
	if r.One, err = b.measure(ctx, runSpec{scenario: "scale1", consumer: consumerScorerefresh, rtt: rtt, backlog: backlog, max: warm + window + 5*time.Second, done: done}); err != nil {
		return nil, err
	}
	if r.Three, err = b.measure(ctx, runSpec{scenario: "scale3", consumer: consumerScorerefresh, instances: 3, rtt: rtt, backlog: backlog, max: warm + window + 5*time.Second, done: done}); err != nil {
		return nil, err
	}
	r.RateOne = r.One.windowRate(warm.Seconds(), (warm + window).Seconds())
	r.RateThree = r.Three.windowRate(warm.Seconds(), (warm + window).Seconds())
	r.Efficiency = r.RateThree / (3 * r.RateOne)
	b.logf("  one process %.1f/s, three %.1f/s: efficiency %.2f", r.RateOne, r.RateThree, r.Efficiency)
	b.targets = append(b.targets, target{Scenario: "6 scale-out", Target: "3-process rate / (3 × 1-process rate) ≥ 0.9",
		Figure: fmt.Sprintf("%.2f (%.1f vs 3 × %.1f entries/s at RTT %s; latency bounds %.1f and %.1f/s, server %.1f/s)",
			r.Efficiency, r.RateThree, r.RateOne, rtt, r.BoundsOne.Latency, r.LatencyThree, r.BoundsOne.Server),
		Value: r.Efficiency, Met: r.Efficiency >= 0.9, Applies: true})
	return r, nil
}

func never([]sample) bool { return false }

func last(s []sample) sample {
	if len(s) == 0 {
		return sample{}
	}
	return s[len(s)-1]
}

func maxOldest(s []sample, from float64) float64 {
	m := 0.0
	for _, x := range s {
		if x.T >= from {
			m = math.Max(m, x.OldestAge)
		}
	}
	return m
}

func maxOldestIn(s []sample, from, to float64) float64 {
	m := 0.0
	for _, x := range s {
		if x.T >= from && x.T < to {
			m = math.Max(m, x.OldestAge)
		}
	}
	return m
}

// depthSlope is the least-squares growth of depth per second between t0 and t1.
func depthSlope(s []sample, t0, t1 float64) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, x := range s {
		if x.T < t0 || x.T > t1 {
			continue
		}
		d := float64(x.Depth)
		n++
		sx += x.T
		sy += d
		sxx += x.T * x.T
		sxy += x.T * d
	}
	if n < 2 || n*sxx-sx*sx == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

func distinctUsers(docs []any) int {
	users := map[any]bool{}
	for _, d := range docs {
		for _, e := range d.(bson.D) {
			if e.Key == "username" {
				users[e.Value] = true
			}
		}
	}
	return len(users)
}
