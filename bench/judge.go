package bench

import (
	"fmt"
	"math"
	"time"
)

// The judging of scenarios 1 to 6: which target each figure meets, in pure
// functions of the results (judge_test.go holds their tables).

// target is one of the targets with the figure that decides it.
type target struct {
	Scenario string  `json:"scenario"`
	Target   string  `json:"target"`
	Figure   string  `json:"figure"`
	Value    float64 `json:"value"`
	Met      bool    `json:"met"`
	Applies  bool    `json:"applies"` // false: the condition of the target does not hold in this run
}

// verdict is a target's word in the console and the report.
func verdict(t target) string {
	switch {
	case !t.Applies:
		return "n/a"
	case t.Met:
		return "met"
	}
	return "NOT"
}

// diverseTargets: scorerefresh at 90% of its lower bound, and 12 times the
// reference where latency binds.
func diverseTargets(r *drainResult, concurrency int) []target {
	return []target{
		{Scenario: "1 diverse", Target: fmt.Sprintf("≥ 90%% of the lower bound at REFRESH_CONCURRENCY %d", concurrency),
			Figure: fmt.Sprintf("%.1f entries/s = %.0f%% of the %s bound %.1f/s", r.Scorerefresh.Rate, 100*r.FractionLower, r.Bounds.Which, r.Bounds.Lower),
			Value:  r.FractionLower, Met: r.FractionLower >= 0.9, Applies: true},
		{Scenario: "1 diverse", Target: "ratio ≥ 12 where the latency bound is the lower one",
			Figure: fmt.Sprintf("%.1f× (%.1f vs %.2f entries/s); binding bound: %s", r.Ratio, r.Scorerefresh.Rate, r.Reference.Rate, r.Bounds.Which),
			Value:  r.Ratio, Met: r.Ratio >= 12, Applies: r.Bounds.Which == "latency"},
	}
}

func firehoseTarget(r *drainResult) target {
	return target{Scenario: "2 firehose", Target: "≥ 10× the reference",
		Figure: fmt.Sprintf("%.1f× (%.1f vs %.1f entries/s)", r.Ratio, r.Scorerefresh.Rate, r.Reference.Rate),
		Value:  r.Ratio, Met: r.Ratio >= 10, Applies: true}
}

// wedgeRate is scenario 3's arrival rate: factor times the reference's
// capacity, capped at 80% of scorerefresh's (with a note saying so).
func wedgeRate(factor, referenceRate, scorerefreshRate float64) (rate float64, note string) {
	rate = factor * referenceRate
	if rate >= 0.8*scorerefreshRate {
		note = fmt.Sprintf("%.0f× the reference (%.1f/s) is not under scorerefresh's capacity (%.1f/s): capped at 80%% of it", factor, rate, scorerefreshRate)
		rate = 0.8 * scorerefreshRate
	}
	return rate, note
}

// wedgeTargets: the reference's queue grows at half the surplus at least;
// scorerefresh's oldest entry stays under 30 s.
func wedgeTargets(r *wedgeResult, referenceRate float64, wedgeFor time.Duration) []target {
	return []target{
		{Scenario: "3 wedge", Target: "the reference's queue grows without bound",
			Figure: fmt.Sprintf("depth %d after %s, still growing %.1f entries/s over the second half; oldest age %.0f s", r.ReferenceFinalDepth, wedgeFor, r.ReferenceDepthSlope, r.ReferenceMaxOldestAge),
			Value:  r.ReferenceDepthSlope, Met: r.ReferenceDepthSlope > 0.5*(r.Rate-referenceRate), Applies: true},
		{Scenario: "3 wedge", Target: "scorerefresh's oldest age stays under 30 s",
			Figure: fmt.Sprintf("at most %.1f s (depth %d at the end)", r.ScorerefreshMaxOldestAge, r.ScorerefreshFinalDepth),
			Value:  r.ScorerefreshMaxOldestAge, Met: r.ScorerefreshMaxOldestAge < 30, Applies: true},
	}
}

// recoveryFigures say how scorerefresh and the reference came back after
// the trigger (the console and the targets print them).
func recoveryFigures(r *recoveryResult, watched time.Duration) (scorerefresh, reference string) {
	scorerefresh = fmt.Sprintf("recovered %.0f s after restore (oldest age back to ≤ %.1f s; peak %.0f s, depth %d)", r.Recovery, r.PreLevel, r.PeakAge, r.PeakDepth)
	if r.Recovery < 0 {
		scorerefresh = fmt.Sprintf("not recovered within %s of restore (pre-trigger oldest age %.1f s)", watched, r.PreLevel)
	}
	reference = fmt.Sprintf("not recovered within %.0f s of restore: depth %d and rising, oldest age %.0f s", r.ReferenceObserved, r.ReferenceFinalDepth, last(r.Reference.Timeline).OldestAge)
	if r.ReferenceRecovery >= 0 {
		reference = fmt.Sprintf("recovered %.0f s after restore", r.ReferenceRecovery)
	}
	return scorerefresh, reference
}

// recoveryTargets: scorerefresh back within 60 s of restore, the
// reference not at all.
func recoveryTargets(r *recoveryResult, figure, refFigure string) []target {
	return []target{
		{Scenario: "4 recovery", Target: "scorerefresh back under its pre-trigger oldest age ≤ 60 s after restore",
			Figure: figure, Value: r.Recovery, Met: r.Recovery >= 0 && r.Recovery <= 60, Applies: true},
		{Scenario: "4 recovery", Target: "the reference does not recover", Figure: refFigure,
			Value: r.ReferenceRecovery, Met: r.ReferenceRecovery < 0, Applies: true},
	}
}

// overloadTarget: at 1.5× and 2× the load, the goodput keeps 80% of its
// level at 1×. levels are the 0.5×, 1×, 1.5× and 2× runs.
func overloadTarget(levels []overloadLevel) target {
	at1 := levels[1].Goodput
	worst := math.Min(levels[2].Goodput, levels[3].Goodput)
	return target{Scenario: "5 overload", Target: "goodput plateaus, never collapses (1.5× and 2× keep ≥ 80% of the goodput at 1×)",
		Figure: fmt.Sprintf("goodput %.1f / %.1f / %.1f / %.1f entries/s at 0.5× / 1× / 1.5× / 2×", levels[0].Goodput, levels[1].Goodput, levels[2].Goodput, levels[3].Goodput),
		Value:  worst / at1, Met: worst >= 0.8*at1, Applies: true}
}

func scaleTarget(r *scaleResult, rtt time.Duration) target {
	return target{Scenario: "6 scale-out", Target: "3-process rate / (3 × 1-process rate) ≥ 0.9",
		Figure: fmt.Sprintf("%.2f (%.1f vs 3 × %.1f entries/s at RTT %s; latency bounds %.1f and %.1f/s, server %.1f/s)",
			r.Efficiency, r.RateThree, r.RateOne, rtt, r.BoundsOne.Latency, r.LatencyThree, r.BoundsOne.Server),
		Value: r.Efficiency, Met: r.Efficiency >= 0.9, Applies: true}
}
