package metrics

import (
	"math"
	"testing"
	"time"
)

func TestHeadroom(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	for name, tc := range map[string]struct {
		samples []HeadroomSample
		want    Headroom
	}{
		"keeping up": {
			// 10 s: depth 100 → 80, 120 removed ⇒ 100 arrived ⇒ 10/s.
			// 30 refreshes of 0.5 s each, 4 entries per refresh, limit 8 ⇒ 8/0.5×4 = 64/s.
			samples: []HeadroomSample{
				{At: t0, Depth: 100, Limit: 8},
				{At: t0.Add(10 * time.Second), Depth: 80, Removed: 120, Refreshes: 30, Batches: 30, BatchSecs: 15, OKRefreshes: 30, Acked: 120, Limit: 8},
			},
			want: Headroom{ArrivalRate: 10, DrainCapacity: 64, TimeToDrain: 80.0 / 54},
		},
		"falling behind": {
			samples: []HeadroomSample{
				{At: t0, Depth: 100, Limit: 1},
				{At: t0.Add(10 * time.Second), Depth: 300, Removed: 10, Refreshes: 10, Batches: 10, BatchSecs: 10, OKRefreshes: 10, Acked: 10, Limit: 1},
			},
			want: Headroom{ArrivalRate: 21, DrainCapacity: 1, TimeToDrain: math.Inf(1)},
		},
		"empty queue drains in no time": {
			samples: []HeadroomSample{
				{At: t0, Limit: 4},
				{At: t0.Add(10 * time.Second), Removed: 50, Refreshes: 10, Batches: 10, BatchSecs: 1, OKRefreshes: 10, Acked: 50, Limit: 4},
			},
			want: Headroom{ArrivalRate: 5, DrainCapacity: 200, TimeToDrain: 0},
		},
		"capacity remembered while idle": {
			samples: []HeadroomSample{
				{At: t0, Limit: 2},
				{At: t0.Add(time.Minute), Removed: 10, Refreshes: 10, Batches: 10, BatchSecs: 5, OKRefreshes: 10, Acked: 10, Limit: 2},
				{At: t0.Add(5 * time.Minute), Removed: 10, Refreshes: 10, Batches: 10, BatchSecs: 5, OKRefreshes: 10, Acked: 10, Limit: 2},
			},
			want: Headroom{ArrivalRate: 0, DrainCapacity: 4, TimeToDrain: 0},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var e HeadroomEstimator
			var got Headroom
			for _, s := range tc.samples {
				got = e.Observe(s)
			}
			if !close(got.ArrivalRate, tc.want.ArrivalRate) || !close(got.DrainCapacity, tc.want.DrainCapacity) || !close(got.TimeToDrain, tc.want.TimeToDrain) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestHeadroomWithBatches: a slot holds a batch, so capacity is slots ×
// users per batch ÷ a batch's time × entries per user. Each case records
// 10 s of an 8-slot consumer whose batches take 0.5 s and acknowledge 2
// entries per user: every slot busy, 16 batches a second.
func TestHeadroomWithBatches(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	for _, users := range []float64{1, 4, 16} {
		batches := 160.0 // 8 slots × 10 s ÷ 0.5 s
		refreshes := batches * users
		e := HeadroomEstimator{}
		e.Observe(HeadroomSample{At: t0, Depth: 10_000, Limit: 8})
		got := e.Observe(HeadroomSample{
			At: t0.Add(10 * time.Second), Depth: 10_000 - 2*refreshes, Removed: 2 * refreshes, Limit: 8,
			Refreshes: refreshes, OKRefreshes: refreshes, Acked: 2 * refreshes,
			Batches: batches, BatchSecs: batches * 0.5, // each of a batch's users observes the batch's time too
		})
		// What was acknowledged in the 10 s at saturation is the capacity.
		if want := 2 * refreshes / 10; !close(got.DrainCapacity, want) {
			t.Errorf("batches of %v: capacity %v, want %v (the rate acknowledged with every slot busy)", users, got.DrainCapacity, want)
		}
	}
}

func TestHeadroomWindowSlides(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	e := HeadroomEstimator{Window: time.Minute}
	// A burst long ago must not count once it leaves the window.
	e.Observe(HeadroomSample{At: t0, Depth: 0})
	e.Observe(HeadroomSample{At: t0.Add(10 * time.Second), Depth: 1000})
	for i := 2; i <= 20; i++ {
		h := e.Observe(HeadroomSample{At: t0.Add(time.Duration(i) * 10 * time.Second), Depth: 1000})
		if i >= 9 && h.ArrivalRate != 0 {
			t.Fatalf("sample %d: arrival rate %v, want 0 once the burst left the window", i, h.ArrivalRate)
		}
	}
}

func close(a, b float64) bool {
	if math.IsInf(a, 1) || math.IsInf(b, 1) {
		return math.IsInf(a, 1) && math.IsInf(b, 1)
	}
	return math.Abs(a-b) < 1e-9
}
