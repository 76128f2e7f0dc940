package planner

import (
	"math"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/metrics"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.6g, want %.6g (±%g)", what, got, want, tol)
	}
}

func TestLatencyAddsCapacityAndKnee(t *testing.T) {
	s := Server{RTT: 0.020, Cost: 0.001}
	near(t, "idle", s.Latency(1, 1), 0.021, 1e-12)
	near(t, "RTT ×10", s.Latency(1, 10), 0.201, 1e-12)
	// A server of 100 commands/s with 5 in flight: each takes 5/100 s.
	s.Capacity = 100
	near(t, "at capacity", s.Latency(5, 1), 0.05, 1e-12)
	near(t, "below capacity", s.Latency(2, 1), 0.021, 1e-12)
	// 15 ms more per command past 6 in flight: 16 in flight add 150 ms.
	k := Server{RTT: 0.020, Cost: 0.001, Knee: 6, Slope: 0.015}
	near(t, "past the knee", k.Latency(16, 1), 0.171, 1e-12)
	near(t, "at the knee", k.Latency(6, 1), 0.021, 1e-12)
}

func TestFleetBounds(t *testing.T) {
	c := Config{Components: 12, Concurrency: 16, MaxUsersInFlight: 64, ClaimWindow: 500, Replicas: 1, Batch: 1, PollInterval: 1}
	s := Server{RTT: 0.020}
	b := FleetBounds(c, s, 1)
	// 16 slots / (14 round trips × 20 ms).
	near(t, "latency bound", b.Latency, 16/(14*0.020), 1e-9)
	// 64 held users, each held for 14 + 2 + 4 round trips and the 50 ms ack wait.
	near(t, "in-flight bound", b.InFlight, 64/(20*0.020+0.05), 1e-9)
	if b.Binding != "latency" || b.Lower != b.Latency || !math.IsInf(float64(b.Server), 1) {
		t.Errorf("bounds %+v: want latency-bound, no server bound", b)
	}
	near(t, "three replicas", FleetBounds(c, s, 3).Latency, 3*16/(14*0.020), 1e-9)
	// A batch of 4 users costs the round trips of one.
	c.Batch = 4
	near(t, "batched", FleetBounds(c, s, 1).Latency, 4*16/(14*0.020), 1e-9)

	// MAX_USERS_IN_FLIGHT = REFRESH_CONCURRENCY: users wait for acks and
	// claims with their slot empty.
	c.Batch, c.MaxUsersInFlight = 1, 16
	if b := FleetBounds(c, s, 1); b.Binding != "users in flight" || math.Abs(b.Lower-16/0.45) > 1e-9 {
		t.Errorf("bounds %+v: want bound by users in flight at %.3f", b, 16/0.45)
	}

	// Past the knee every busy slot slows every command: 16.75 in flight
	// (the slots and the claim and ack loops) add 10.75 × 15 ms.
	c.MaxUsersInFlight = 64
	kb := FleetBounds(c, Server{RTT: 0.020, Knee: 6, Slope: 0.015}, 1)
	near(t, "loaded", kb.Loaded, 16/(14*(0.020+0.015*10.75)), 1e-9)
	if kb.Binding != "server under load" {
		t.Errorf("binding %q, want server under load", kb.Binding)
	}
	cb := FleetBounds(c, Server{RTT: 0.020, Capacity: 400}, 2)
	near(t, "server bound", float64(cb.Server), 400.0/14, 1e-9)
	if cb.Binding != "server capacity" || cb.Lower > float64(cb.Server) {
		t.Errorf("bounds %+v: want bound by the server's capacity, below %.2f", cb, cb.Server)
	}
}

// TestBoundsAndTheLiveHeadroomAreOneFormula: the live headroom, fed the
// histograms of a replica running as the bound assumes (every slot busy,
// batches of the spread size, one entry per user), estimates the bound.
func TestBoundsAndTheLiveHeadroomAreOneFormula(t *testing.T) {
	s := Server{RTT: 0.020, Cost: 0.001}
	t0 := time.Unix(1_700_000_000, 0)
	for _, batch := range []int{1, 4, 16} {
		c := Config{Components: 12, Concurrency: 16, MaxUsersInFlight: 64, ClaimWindow: 500, Replicas: 1, Batch: batch, PollInterval: 1}
		b := FleetBounds(c, s, 1)
		batchSecs := float64(c.RoundTrips()) * s.Latency(1, 1)
		batches := float64(c.Concurrency) * 10 / batchSecs // 10 s with every slot busy
		users := batches * float64(c.SpreadBatch())
		e := metrics.HeadroomEstimator{}
		e.Observe(metrics.HeadroomSample{At: t0, Depth: 1e6, Limit: float64(c.Concurrency)})
		h := e.Observe(metrics.HeadroomSample{At: t0.Add(10 * time.Second), Depth: 1e6, Limit: float64(c.Concurrency),
			Batches: batches, BatchSecs: batches * batchSecs, Refreshes: users, OKRefreshes: users, Acked: users})
		near(t, "headroom's capacity against the latency bound", h.DrainCapacity, b.Latency, 1e-6)
	}
	// The spread: 64 held users over 16 slots are batches of 4, whatever
	// REFRESH_BATCH_SIZE above that.
	c := Config{Concurrency: 16, MaxUsersInFlight: 64, Batch: 16}
	if got := c.SpreadBatch(); got != 4 {
		t.Errorf("spread batch %d, want 4", got)
	}
}

func TestMixDemandCountsCoalescing(t *testing.T) {
	// Two users seen once, one seen twice: half of the entries are of
	// users seen once, so half of future arrivals are new users.
	m := NewMix([]int{1, 1, 2})
	near(t, "unseen share", m.New, 0.5, 1e-12)
	near(t, "no wait: one refresh per entry", m.Demand(8, 0), 8, 1e-9)
	// At 8/s: new users 4/s; the two singles 1/s each, refreshed at
	// 1/(1+1·1) = 0.5/s; the double 2/s, at 2/(1+2·1).
	near(t, "one second's wait", m.Demand(8, 1), 4+2*0.5+2.0/3, 1e-9)
}

func TestSustainableRateAndSettledWait(t *testing.T) {
	// Every entry a new user: no coalescing, the capacity is the rate.
	near(t, "diverse", NewMix([]int{1, 1, 1, 1}).SustainableRate(50, 10), 50, 1e-6)
	// Two users and nobody else: both are refreshed every second at
	// most, far below the capacity, whatever the rate.
	two := NewMix([]int{2, 2})
	if r := two.SustainableRate(10, 1); !math.IsInf(r, 1) {
		t.Errorf("two users: sustainable %g, want +Inf", r)
	}
	// 10/s over those two at a capacity of 2 refreshes/s: 2 × 5/(1+5w) = 2
	// gives w = 0.8 s.
	near(t, "settled wait", two.SettledWait(10, 2), 0.8, 1e-6)
	if w := two.SettledWait(1, 2); w != 0 {
		t.Errorf("below capacity: settled wait %g, want 0", w)
	}
	if w := NewMix([]int{1, 1}).SettledWait(5, 2); !math.IsInf(w, 1) {
		t.Errorf("new users above capacity: settled wait %g, want +Inf", w)
	}
}

func TestAssessClassifiesTheKnee(t *testing.T) {
	c := Config{Components: 12, Concurrency: 16, MaxUsersInFlight: 64, ClaimWindow: 500, Replicas: 1, Batch: 1, PollInterval: 1, ChangeStreams: true}
	s := Server{RTT: 0.020, Knee: 6, Slope: 0.015}
	diverse := NewMix([]int{1, 1, 1})
	// Every slot busy does 16/(14 × 181.25 ms) = 6.3 refreshes/s.
	loaded := 16 / (14 * (0.020 + 0.015*10.75))
	for _, tc := range []struct {
		rate float64
		want string
	}{
		{0, ClassNoLoad},
		// 5/s keeps 5 × 14 × 20 ms = 1.4 commands busy, below the knee,
		// and 6.3/s > 5/s: any backlog drains.
		{5, ClassStable},
		// 8/s: 2.24 busy while it keeps up, but 6.3/s < 8/s once full.
		{8, ClassMetastable},
		// 30/s: 8.4 busy is past the knee, which slows the commands,
		// which keeps more busy... past all 16 slots.
		{30, ClassOverloaded},
	} {
		st := Assess(c, s, 1, diverse, tc.rate, 0)
		if st.Class != tc.want {
			t.Errorf("rate %g: %s, want %s (%+v)", tc.rate, st.Class, tc.want, st)
		}
		if tc.rate > 0 {
			near(t, "loaded", st.Loaded, loaded, 1e-9)
			near(t, "margin", st.Margin, loaded/tc.rate-1, 1e-9)
		}
	}
	if st := Assess(c, s, 1, diverse, 8, 0); st.BusyLow < 2.23 || st.BusyLow > 2.25 {
		t.Errorf("busy at 8/s = %g, want 8 × 14 × 20 ms = 2.24", st.BusyLow)
	}
}

func TestScheduleLaysOutArrivals(t *testing.T) {
	b := &Backlog{Users: 2, Entries: []Entry{{User: 0, Created: -10}, {User: 1, Created: -6}, {User: 0, Created: -2}}}
	got, users := b.Schedule(Arrival{Mode: ArrivalOriginal, Speed: 2}, Transient{At: 1, Burst: 2})
	want := []Entry{{0, 0, 0}, {2, 1, 1}, {3, 1, 1}, {1, 2, 2}, {0, 4, 4}}
	if users != 4 || len(got) != len(want) {
		t.Fatalf("got %v (%d users), want %v (4 users)", got, users, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	maxed, _ := b.Schedule(Arrival{Mode: ArrivalMax}, Transient{})
	if maxed[0].Arrive != 0 || maxed[0].Created != -10 {
		t.Errorf("max: %+v, want the backlog in place with its age", maxed[0])
	}
	rated, users := b.Schedule(Arrival{Mode: ArrivalRate, Rate: 2, Duration: 5}, Transient{})
	if len(rated) != 3+10 || rated[len(rated)-1].Arrive != 5 {
		t.Errorf("rate 2/s for 5 s: %d entries, last at %g; want 13, 5", len(rated), rated[len(rated)-1].Arrive)
	}
	// One user in three is seen once: about a third of arrivals are new.
	if users < 3 {
		t.Errorf("rate: %d users, want some the backlog has not seen", users)
	}
}
