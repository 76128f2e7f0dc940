//go:build !oldrelease

package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The judging needs no server: each table gives results and the decision
// they must lead to.

func TestVerdict(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		t    target
		want string
	}{
		{target{Applies: true, Met: true}, "met"},
		{target{Applies: true}, "NOT"},
		{target{Met: true}, "n/a"},
		{target{}, "n/a"},
	} {
		if got := verdict(c.t); got != c.want {
			t.Errorf("verdict(%+v) = %q, want %q", c.t, got, c.want)
		}
	}
}

func TestDiverseTargets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		fraction, ratio    float64
		binding            string
		metBound, metRatio bool
		ratioApplies       bool
	}{
		{"latency-bound, both met", 0.95, 14, "latency", true, true, true},
		{"just under 90%", 0.89, 14, "latency", false, true, true},
		{"ratio short", 0.95, 11.9, "latency", true, false, true},
		{"server-bound: the ratio does not apply", 0.9, 3, "server", true, false, false},
	} {
		r := &drainResult{pair: pair{Reference: &runResult{Rate: 1}, Scorerefresh: &runResult{Rate: c.ratio}},
			Ratio: c.ratio, FractionLower: c.fraction, Bounds: refreshBounds{Lower: 10, Which: c.binding}}
		ts := diverseTargets(r, 16)
		if len(ts) != 2 || ts[0].Met != c.metBound || ts[1].Met != c.metRatio || ts[1].Applies != c.ratioApplies || !ts[0].Applies {
			t.Errorf("%s: %+v", c.name, ts)
		}
		if !strings.Contains(ts[0].Target, "REFRESH_CONCURRENCY 16") {
			t.Errorf("%s: target %q lacks the concurrency", c.name, ts[0].Target)
		}
	}
}

func TestFirehoseTarget(t *testing.T) {
	t.Parallel()
	for ratio, met := range map[float64]bool{10: true, 25: true, 9.99: false, math.NaN(): false} {
		r := &drainResult{pair: pair{Reference: &runResult{}, Scorerefresh: &runResult{}}, Ratio: ratio}
		if got := firehoseTarget(r); got.Met != met || !got.Applies {
			t.Errorf("ratio %v: %+v, want met %v", ratio, got, met)
		}
	}
}

func TestWedgeRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		factor, ref, sr, want float64
		capped                bool
	}{
		{5, 2, 100, 10, false},
		{5, 2, 12.5, 10, true}, // 10 is 80% of 12.5: capped, to the same figure
		{5, 10, 40, 32, true},
	} {
		rate, note := wedgeRate(c.factor, c.ref, c.sr)
		if math.Abs(rate-c.want) > 1e-9 || (note != "") != c.capped {
			t.Errorf("wedgeRate(%v, %v, %v) = %v, %q; want %v, capped %v", c.factor, c.ref, c.sr, rate, note, c.want, c.capped)
		}
	}
}

func TestWedgeTargets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name              string
		slope, oldest     float64
		growsMet, fastMet bool
	}{
		// Arrivals 10/s, the reference drains 2/s: its queue must grow by
		// more than half the surplus (4/s).
		{"both met", 7.9, 3, true, true},
		{"reference keeps up", 4, 3, false, true},
		{"scorerefresh too old", 8, 30, true, false},
	} {
		r := &wedgeResult{Rate: 10, ReferenceDepthSlope: c.slope, ScorerefreshMaxOldestAge: c.oldest}
		ts := wedgeTargets(r, 2, 5*time.Minute)
		if ts[0].Met != c.growsMet || ts[1].Met != c.fastMet {
			t.Errorf("%s: met %v and %v, want %v and %v", c.name, ts[0].Met, ts[1].Met, c.growsMet, c.fastMet)
		}
	}
}

func TestRecoveryJudging(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                 string
		ours, theirs         float64 // seconds after restore; -1 never
		oursMet, theirsMet   bool
		oursWord, theirsWord string
	}{
		{"expected", 12, -1, true, true, "recovered 12 s", "not recovered within 75 s"},
		{"too slow", 61, -1, false, true, "recovered 61 s", "not recovered"},
		{"never", -1, -1, false, true, "not recovered within 2m0s", "not recovered"},
		{"the reference recovers too", 5, 30, true, false, "recovered 5 s", "recovered 30 s"},
	} {
		r := &recoveryResult{pair: pair{Reference: &runResult{Timeline: []sample{{T: 165, OldestAge: 80}}}},
			Recovery: c.ours, ReferenceRecovery: c.theirs, ReferenceObserved: 75}
		fig, refFig := recoveryFigures(r, 2*time.Minute)
		ts := recoveryTargets(r, fig, refFig)
		if ts[0].Met != c.oursMet || ts[1].Met != c.theirsMet {
			t.Errorf("%s: met %v and %v, want %v and %v", c.name, ts[0].Met, ts[1].Met, c.oursMet, c.theirsMet)
		}
		if !strings.Contains(fig, c.oursWord) || !strings.Contains(refFig, c.theirsWord) {
			t.Errorf("%s: figures %q and %q", c.name, fig, refFig)
		}
	}
}

func TestOverloadTarget(t *testing.T) {
	t.Parallel()
	levels := func(g ...float64) []overloadLevel {
		var ls []overloadLevel
		for _, x := range g {
			ls = append(ls, overloadLevel{Goodput: x})
		}
		return ls
	}
	for _, c := range []struct {
		levels []overloadLevel
		met    bool
		value  float64
	}{
		{levels(5, 10, 10, 9), true, 0.9},
		{levels(5, 10, 8, 10), true, 0.8},
		{levels(5, 10, 10, 7.9), false, 0.79},
	} {
		got := overloadTarget(c.levels)
		if got.Met != c.met || math.Abs(got.Value-c.value) > 1e-9 {
			t.Errorf("%+v: %+v", c.levels, got)
		}
	}
}

func TestScaleSizing(t *testing.T) {
	t.Parallel()
	r := newScaleResult(refreshBounds{Latency: 20, Server: 50}, 30*time.Millisecond, 10*time.Second)
	if r.LatencyThree != 60 || r.Entries != 650 || r.RTTms != 30 { // 1.3 × min(60, 50) × 10 s
		t.Errorf("scale result %+v", r)
	}
	if small := newScaleResult(refreshBounds{Latency: 1, Server: 1}, 0, time.Second); small.Entries != 200 {
		t.Errorf("at least 200 entries, got %d", small.Entries)
	}
	for eff, met := range map[float64]bool{0.9: true, 0.95: true, 0.89: false} {
		if got := scaleTarget(&scaleResult{Efficiency: eff}, time.Millisecond); got.Met != met {
			t.Errorf("efficiency %v: met %v", eff, got.Met)
		}
	}
	cal := calibration{RoundTrips: 14, ServerMs: 1, QPS: 1400, RTTms: 20, ProxyRTTms: 20}
	if rtt := latencyBoundRTT(cal, 20*time.Millisecond, 16); rtt%(10*time.Millisecond) != 0 || rtt < 20*time.Millisecond {
		t.Errorf("latencyBoundRTT = %v, want a multiple of 10 ms, at least the RTT", rtt)
	}
}

func TestAdaptiveTargets(t *testing.T) {
	t.Parallel()
	base := func() *adaptiveResult {
		return &adaptiveResult{
			AdaptiveAtKnee: adaptiveRun{Run: &runResult{Rate: 95}}, BestRate: 100, BestFixed: 8, Fraction: 0.95,
			PreLimit: 8, SpikeLimit: 2, CutAfter: 2, RecoverAfter: 10,
			Three: adaptiveRun{Run: &runResult{Rate: 90}, MaxOpen: []float64{10, 12, 11}}, PoolSize: 12,
			ThreeFixed: adaptiveRun{Run: &runResult{Rate: 95}}, MeanLimit: []float64{5, 5, 5}, Fairness: 1, ThreeFraction: 0.95,
		}
	}
	for i, tg := range adaptiveTargets(base(), 10) {
		if !tg.Met || !tg.Applies {
			t.Fatalf("target %d (%s) not met by the base result: %+v", i, tg.Target, tg)
		}
	}
	for _, c := range []struct {
		name  string
		edit  func(*adaptiveResult)
		index int
	}{
		{"slower than the best fixed", func(x *adaptiveResult) { x.Fraction = 0.8 }, 0},
		{"cut too late", func(x *adaptiveResult) { x.CutAfter = 6 }, 1},
		{"never cut", func(x *adaptiveResult) { x.CutAfter = -1 }, 1},
		{"never back", func(x *adaptiveResult) { x.RecoverAfter = -1 }, 2},
		{"a pool overflows", func(x *adaptiveResult) { x.Three.MaxOpen[1] = 13 }, 3},
		{"an instance missing", func(x *adaptiveResult) { x.Three.MaxOpen = x.Three.MaxOpen[:2] }, 3},
		{"unfair", func(x *adaptiveResult) { x.Fairness = 0.8 }, 4},
		{"three slower than fixed", func(x *adaptiveResult) { x.ThreeFraction = 0.5 }, 5},
	} {
		x := base()
		c.edit(x)
		ts := adaptiveTargets(x, 10)
		for i, tg := range ts {
			if tg.Met == (i == c.index) {
				t.Errorf("%s: target %d (%s) met %v", c.name, i, tg.Target, tg.Met)
			}
		}
	}
	x := base()
	x.CutAfter = -1
	if ts := adaptiveTargets(x, 10); ts[2].Applies {
		t.Error("growing back applies only when the limit was cut")
	}
}

func TestSlowdownTargets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name              string
		metric            float64
		docs              int64
		drained           float64
		noDeadLetters, ok bool
	}{
		{"clean", 0, 0, 12, true, true},
		{"a dead letter by the metric", 1, 0, 12, false, true},
		{"a dead letter in the collection", 0, 1, 12, false, true},
		{"never drained", 0, 0, -1, true, false},
	} {
		x := &slowdownResult{DeadLettered: c.metric, DeadLetterDocs: c.docs, DrainedAfter: c.drained}
		ts := x.targets()
		if ts[0].Met != c.noDeadLetters || ts[1].Met != c.ok {
			t.Errorf("%s: met %v and %v", c.name, ts[0].Met, ts[1].Met)
		}
	}
}

func TestBatchedTargets(t *testing.T) {
	t.Parallel()
	perUser := batchConfig{Rules: rulesBench, BatchSize: 1, MaxUsersInFlight: 64, Label: "per-user"}
	batch := batchConfig{Rules: rulesBench, BatchSize: 16, MaxUsersInFlight: 64, Label: "batch 16"}
	for _, c := range []struct {
		name              string
		rate, server      float64
		commands          float64
		fastMet, cheapMet bool
	}{
		{"3× the per-user rate", 30, 1000, 1.2, true, true},
		{"short of 3× with room on the server", 25, 1000, 1.2, false, true},
		{"the server binds first and is 90% used", 25, 27, 1.2, true, true},
		{"the server binds first but is not used", 20, 27, 1.2, false, true},
		{"too many commands", 30, 1000, 1.6, true, false},
	} {
		x := &batchedResult{Diverse: []batchRun{
			{Config: perUser, Run: &runResult{Rate: 10}, CommandsPerAcked: 3},
			{Config: batch, Run: &runResult{Rate: c.rate}, CommandsPerAcked: c.commands, Bounds: configBounds{Server: c.server}},
		}}
		ts := x.targets()
		if len(ts) != 2 || ts[0].Met != c.fastMet || ts[1].Met != c.cheapMet {
			t.Errorf("%s: %+v", c.name, ts)
		}
	}
	if got := perUserRatio(batchRun{Config: batch, Run: &runResult{Rate: 30}}, &batchRun{Config: perUser, Run: &runResult{Rate: 10}}); got != "**3.0×**" {
		t.Errorf("perUserRatio = %q", got)
	}
	if got := perUserRatio(batchRun{Config: batch, Run: &runResult{Rate: 30}}, nil); got != "1.0×" {
		t.Errorf("perUserRatio without a per-user run = %q", got)
	}
}

func TestResultsTableCells(t *testing.T) {
	t.Parallel()
	ref := &runResult{Consumer: consumerReference, Rate: 2}
	ours := &runResult{Consumer: consumerScorerefresh, Rate: 30}
	for _, c := range []struct {
		x, ref *runResult
		want   string
	}{
		{ours, ref, "15.0×"},
		{ours, nil, ""},
		{ours, &runResult{Consumer: consumerReference}, ""},
		{ref, ref, ""},
	} {
		if got := ratioCell(c.x, c.ref); got != c.want {
			t.Errorf("ratioCell = %q, want %q", got, c.want)
		}
	}
	r := &Report{Diverse: &drainResult{pair: pair{Reference: ref, Scorerefresh: ours}},
		Overload: []overloadLevel{{Run: ours}}, Scale: &scaleResult{One: ours, Three: ours}}
	if rows := r.rows(); len(rows) != 4 || len(rows[0]) != 2 || rows[0][0] != ref {
		t.Errorf("rows %v: want diverse's pair, one overload level, scale's two runs", rows)
	}
}

func TestTimelineFigures(t *testing.T) {
	t.Parallel()
	s := []sample{{T: 0, Depth: 3, OldestAge: 1}, {T: 5, Depth: 9, OldestAge: 4}, {T: 10, Depth: 6, OldestAge: 2}}
	if got := peakDepth(s, 0); got != 9 {
		t.Errorf("peakDepth = %d", got)
	}
	if got := peakDepth(s, 6); got != 6 {
		t.Errorf("peakDepth from 6 s = %d", got)
	}
	if got := maxOldestIn(s, 0, 5); got != 1 {
		t.Errorf("maxOldestIn [0, 5) = %v", got)
	}
	if qps, workers := best([]qpsLevel{{4, 10}, {16, 30}, {48, 20}}); qps != 30 || workers != 16 {
		t.Errorf("best = %v with %d", qps, workers)
	}
}
