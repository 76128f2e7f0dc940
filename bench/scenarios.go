package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

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
	n := b.cfg.DiverseEntries
	b.logf("\n== 1. diverse drain: %d entries of %d distinct users", n, n)
	backlog := diverseBacklog(n, time.Now(), b.cfg.Seed)
	r := &drainResult{Entries: n, Users: n, Bounds: b.cal.bounds(b.cfg.RTT, b.cfg.Concurrency)}
	var err error
	if r.pair, err = b.measureDrains(ctx, "diverse", backlog); err != nil {
		return nil, err
	}
	r.Ratio = r.ratio()
	// One entry per user: entries/s are refreshes/s, comparable to the bounds.
	r.FractionLower = r.Scorerefresh.Rate / r.Bounds.Lower
	b.logf("  ratio %.1f×; scorerefresh at %.0f%% of the %s bound (%.1f/s)", r.Ratio, 100*r.FractionLower, r.Bounds.Which, r.Bounds.Lower)
	b.targets = append(b.targets, diverseTargets(r, b.cfg.Concurrency)...)
	return r, nil
}

func (b *Bench) firehose(ctx context.Context) (*drainResult, error) {
	n := b.cfg.FirehoseEntries
	b.logf("\n== 2. firehose drain: %d entries, %.0f%% one user, the rest over %d users", n, 100*b.cfg.FirehoseShare, b.cfg.FirehoseUsers)
	backlog := firehoseBacklog(n, b.cfg.FirehoseUsers, b.cfg.FirehoseShare, time.Now(), b.cfg.Seed)
	r := &drainResult{Entries: n, Users: distinctUsers(backlog), Bounds: b.cal.bounds(b.cfg.RTT, b.cfg.Concurrency)}
	var err error
	if r.pair, err = b.measureDrains(ctx, "firehose", backlog); err != nil {
		return nil, err
	}
	r.Ratio = r.ratio()
	b.logf("  ratio %.1f×", r.Ratio)
	b.targets = append(b.targets, firehoseTarget(r))
	return r, nil
}

// measureDrains drains backlog with the reference (for at most
// ReferenceMax) and then with scorerefresh (at most DrainMax).
func (b *Bench) measureDrains(ctx context.Context, scenario string, backlog []any) (pair, error) {
	spec := runSpec{scenario: scenario, rtt: b.cfg.RTT, backlog: backlog}
	return b.measurePair(ctx, spec.of(consumerReference, b.cfg.ReferenceMax), spec.of(consumerScorerefresh, b.cfg.DrainMax))
}

// measurePair measures the reference's run, then scorerefresh's.
func (b *Bench) measurePair(ctx context.Context, reference, ours runSpec) (pair, error) {
	var p pair
	var err error
	if p.Reference, err = b.measure(ctx, reference); err != nil {
		return p, err
	}
	p.Scorerefresh, err = b.measure(ctx, ours)
	return p, err
}

// of is s for one consumer, capped at max.
func (s runSpec) of(consumer string, max time.Duration) runSpec {
	s.consumer, s.max = consumer, max
	return s
}

// wedgeResult is scenario 3.
type wedgeResult struct {
	pair
	Rate                     float64 `json:"arrival_rate"`
	Note                     string  `json:"note,omitempty"`
	ReferenceFinalDepth      int64   `json:"reference_final_depth"`
	ReferenceDepthSlope      float64 `json:"reference_depth_growth_per_second"`
	ReferenceMaxOldestAge    float64 `json:"reference_max_oldest_age"`
	ScorerefreshMaxOldestAge float64 `json:"scorerefresh_max_oldest_age"`
	ScorerefreshFinalDepth   int64   `json:"scorerefresh_final_depth"`
	ScorerefreshDepthSlope   float64 `json:"scorerefresh_depth_growth_per_second"`
	ScorerefreshGoodput      float64 `json:"scorerefresh_goodput"`
	ReferenceGoodput         float64 `json:"reference_goodput"`
}

func (b *Bench) wedge(ctx context.Context, referenceRate, scorerefreshRate float64) (*wedgeResult, error) {
	r := &wedgeResult{}
	r.Rate, r.Note = wedgeRate(b.cfg.WedgeFactor, referenceRate, scorerefreshRate)
	b.logf("\n== 3. wedge: diverse arrivals at %.1f entries/s (%.1f× the reference's %.2f/s; scorerefresh drains %.1f/s) for %s",
		r.Rate, r.Rate/referenceRate, referenceRate, scorerefreshRate, b.cfg.WedgeFor)
	spec := runSpec{scenario: "wedge", rtt: b.cfg.RTT, produce: &produce{rate: r.Rate, pool: b.cfg.Pool}, done: never}
	var err error
	if r.pair, err = b.measurePair(ctx, spec.of(consumerReference, b.cfg.WedgeFor), spec.of(consumerScorerefresh, b.cfg.WedgeFor)); err != nil {
		return nil, err
	}
	r.measureGrowth(b.cfg.WedgeFor.Seconds())
	b.logf("  reference: depth %d at the end, growing %.1f/s over the second half, oldest age up to %.0fs",
		r.ReferenceFinalDepth, r.ReferenceDepthSlope, r.ReferenceMaxOldestAge)
	b.logf("  scorerefresh: depth %d at the end (%+.2f/s), oldest age at most %.1fs", r.ScorerefreshFinalDepth, r.ScorerefreshDepthSlope, r.ScorerefreshMaxOldestAge)
	b.targets = append(b.targets, wedgeTargets(r, referenceRate, b.cfg.WedgeFor)...)
	return r, nil
}

// measureGrowth reads both runs' queue growth over the second half of the
// producer's end seconds, their final depth and their oldest age.
func (r *wedgeResult) measureGrowth(end float64) {
	half := end / 2
	theirs, ours := r.Reference, r.Scorerefresh
	r.ReferenceFinalDepth = last(theirs.Timeline).Depth
	r.ReferenceDepthSlope = depthSlope(theirs.Timeline, half, end)
	r.ReferenceMaxOldestAge = maxOldest(theirs.Timeline, 0)
	r.ReferenceGoodput = theirs.windowRate(half, end)
	r.ScorerefreshFinalDepth = last(ours.Timeline).Depth
	r.ScorerefreshDepthSlope = depthSlope(ours.Timeline, half, end)
	r.ScorerefreshMaxOldestAge = maxOldest(ours.Timeline, 0)
	r.ScorerefreshGoodput = ours.windowRate(half, end)
}

// recoveryResult is scenario 4.
type recoveryResult struct {
	pair
	Rate                float64 `json:"arrival_rate"`
	TriggerAt           float64 `json:"trigger_at"`
	RestoreAt           float64 `json:"restore_at"`
	TriggerRTTms        float64 `json:"trigger_rtt_ms"`
	PreLevel            float64 `json:"pre_trigger_oldest_age"`
	PeakDepth           int64   `json:"scorerefresh_peak_depth"`
	PeakAge             float64 `json:"scorerefresh_peak_oldest_age"`
	Recovery            float64 `json:"scorerefresh_recovery_seconds"` // -1: not recovered
	ReferencePreLevel   float64 `json:"reference_pre_trigger_oldest_age"`
	ReferenceRecovery   float64 `json:"reference_recovery_seconds"` // -1: not recovered
	ReferenceFinalDepth int64   `json:"reference_final_depth"`
	ReferenceObserved   float64 `json:"reference_observed_after_restore"`
}

func (b *Bench) recovery(ctx context.Context, scorerefreshRate float64) (*recoveryResult, error) {
	before, trigger := b.cfg.RecoveryBefore, b.cfg.TriggerFor
	r := &recoveryResult{Rate: 0.5 * scorerefreshRate, TriggerAt: before.Seconds(), RestoreAt: (before + trigger).Seconds(), TriggerRTTms: ms(b.cfg.RTT) * b.cfg.TriggerRTTFactor}
	b.logf("\n== 4. trigger and recovery: arrivals at %.1f/s (half of scorerefresh's %.1f/s); RTT × %.0f from %s to %s",
		r.Rate, scorerefreshRate, b.cfg.TriggerRTTFactor, before, before+trigger)
	warm := before.Seconds() / 3
	spec := runSpec{scenario: "recovery", rtt: b.cfg.RTT, produce: &produce{rate: r.Rate, pool: b.cfg.Pool},
		events: b.rttTrigger("trigger", before, trigger, b.slowRTT()), done: never}
	ours := spec.of(consumerScorerefresh, before+trigger+b.cfg.RecoveryMax)
	ours.done = recoveredFor5s(warm, r.TriggerAt, r.RestoreAt)
	var err error
	if r.pair, err = b.measurePair(ctx, spec.of(consumerReference, before+trigger+b.cfg.RecoveryReferenceWatch), ours); err != nil {
		return nil, err
	}
	r.measureRecovery(warm)
	fig, refFig := recoveryFigures(r, b.cfg.RecoveryMax)
	b.logf("  scorerefresh: %s", fig)
	b.logf("  reference: %s", refFig)
	b.targets = append(b.targets, recoveryTargets(r, fig, refFig)...)
	return r, nil
}

// slowRTT is the RTT during scenario 4's trigger.
func (b *Bench) slowRTT() time.Duration {
	return time.Duration(float64(b.cfg.RTT) * b.cfg.TriggerRTTFactor)
}

// rttTrigger sets the proxy's RTT to slow at `at` (an event called name)
// and back to the bench's RTT after `lasts`.
func (b *Bench) rttTrigger(name string, at, lasts, slow time.Duration) []timedEvent {
	return []timedEvent{
		{at: at, name: fmt.Sprintf("%s: RTT %s", name, slow), do: func() { b.proxy.SetDelay(slow/2, slow/2) }},
		{at: at + lasts, name: fmt.Sprintf("restore: RTT %s", b.cfg.RTT), do: func() { b.proxy.SetDelay(b.cfg.RTT/2, b.cfg.RTT/2) }},
	}
}

// recoveredFor5s ends a run 5 s after its oldest age is back under its
// pre-trigger level.
func recoveredFor5s(warm, triggerAt, restoreAt float64) func([]sample) bool {
	return func(s []sample) bool {
		t := recoveredAfter(s, warm, triggerAt, restoreAt)
		return t >= 0 && last(s).T >= restoreAt+t+5
	}
}

// measureRecovery reads both runs' pre-trigger level, peak and recovery.
func (r *recoveryResult) measureRecovery(warm float64) {
	ours, theirs := r.Scorerefresh.Timeline, r.Reference.Timeline
	r.PreLevel = maxOldestIn(ours, warm, r.TriggerAt)
	r.Recovery = recoveredAfter(ours, warm, r.TriggerAt, r.RestoreAt)
	r.PeakAge = maxOldest(ours, r.TriggerAt)
	r.PeakDepth = peakDepth(ours, 0)
	r.ReferencePreLevel = maxOldestIn(theirs, warm, r.TriggerAt)
	r.ReferenceRecovery = recoveredAfter(theirs, warm, r.TriggerAt, r.RestoreAt)
	r.ReferenceFinalDepth = last(theirs).Depth
	r.ReferenceObserved = last(theirs).T - r.RestoreAt
}

// overloadLevel is one offered load of scenario 5.
type overloadLevel struct {
	Factor  float64    `json:"factor"`
	Offered float64    `json:"offered"`
	Goodput float64    `json:"goodput"`
	Run     *runResult `json:"run"`
}

func (b *Bench) overload(ctx context.Context, scorerefreshRate float64) ([]overloadLevel, error) {
	b.logf("\n== 5. overload: offered load 0.5×, 1×, 1.5×, 2× scorerefresh's %.1f entries/s, %s each", scorerefreshRate, b.cfg.OverloadPerLevel)
	var levels []overloadLevel
	warm := math.Min(10, b.cfg.OverloadPerLevel.Seconds()/4)
	for _, f := range []float64{0.5, 1, 1.5, 2} {
		l := overloadLevel{Factor: f, Offered: f * scorerefreshRate}
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
	b.targets = append(b.targets, overloadTarget(levels))
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
		rtt = latencyBoundRTT(b.cal, b.cfg.RTT, b.cfg.Concurrency)
	}
	warm, window := b.cfg.ScaleWarmUp, b.cfg.ScaleWindow
	r := newScaleResult(b.cal.bounds(rtt, b.cfg.Concurrency), rtt, warm+window)
	b.logf("\n== 6. scale-out: 1 vs 3 scorerefresh processes (in process, separate clients) at RTT %s; %d diverse entries; rate over %s after %s",
		rtt, r.Entries, window, warm)
	b.logf("  bounds: one process %.1f/s (latency), three %.1f/s (latency), server %.1f/s", r.BoundsOne.Latency, r.LatencyThree, r.BoundsOne.Server)
	spec := runSpec{consumer: consumerScorerefresh, rtt: rtt, backlog: diverseBacklog(r.Entries, time.Now(), b.cfg.Seed+1),
		max: warm + window + 30*time.Second, done: lastsAndDid(warm + window)}
	one, three := spec, spec
	one.scenario, three.scenario, three.instances = "scale1", "scale3", 3
	var err error
	if r.One, err = b.measure(ctx, one); err != nil {
		return nil, err
	}
	if r.Three, err = b.measure(ctx, three); err != nil {
		return nil, err
	}
	r.RateOne = r.One.windowRate(warm.Seconds(), (warm + window).Seconds())
	r.RateThree = r.Three.windowRate(warm.Seconds(), (warm + window).Seconds())
	r.Efficiency = r.RateThree / (3 * r.RateOne)
	b.logf("  one process %.1f/s, three %.1f/s: efficiency %.2f", r.RateOne, r.RateThree, r.Efficiency)
	b.targets = append(b.targets, scaleTarget(r, rtt))
	return r, nil
}

// latencyBoundRTT is the lowest multiple of 10 ms (at least rtt) at which
// three processes stay latency-bound: their combined latency bound at most
// 15% of what the server serves to refreshes, since on FerretDB every
// claim round and ack flush of each process also reads the whole queue,
// which the server bound leaves out.
func latencyBoundRTT(cal calibration, rtt time.Duration, concurrency int) time.Duration {
	need := 3 * float64(concurrency) / (cal.RoundTrips * 0.15 * cal.bounds(rtt, concurrency).Server)
	rtt = max(rtt, time.Duration((need-cal.ServerMs/1000)*float64(time.Second)))
	return (rtt + 10*time.Millisecond - 1).Truncate(10 * time.Millisecond)
}

// newScaleResult sizes scenario 6's backlog to outlast the measured
// seconds at 1.3 times the lower of three processes' bounds.
func newScaleResult(one refreshBounds, rtt, measured time.Duration) *scaleResult {
	r := &scaleResult{RTTms: ms(rtt), BoundsOne: one, LatencyThree: 3 * one.Latency}
	r.Entries = max(200, int(1.3*math.Min(r.LatencyThree, one.Server)*measured.Seconds()))
	return r
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
