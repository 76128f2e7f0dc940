package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
)

func newTestAdaptive(t *testing.T, max int) (*Limiter, *metrics.Consumer, *clocktest.Fake) {
	t.Helper()
	m := metrics.NewConsumer(prometheus.NewRegistry())
	clock := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := New(max, time.Hour, limiter.PolicyConfig{}, m, nil, clock)
	return a, m, clock
}

// refreshes runs n refreshes of latency d one after another on the fake clock.
func refreshes(a *Limiter, clock *clocktest.Fake, n int, d time.Duration, overload bool) {
	for range n {
		done := a.RefreshStarted()
		clock.Advance(d)
		done(overload, false)
	}
}

func TestAdaptiveLimiterFollowsItsPolicyAndReportsIt(t *testing.T) {
	t.Parallel()
	a, m, clock := newTestAdaptive(t, 16)
	if a.Limit() != 4 || testutil.ToFloat64(m.ConcurrencyLimit) != 4 {
		t.Fatalf("starting limit %d (gauge %v), want 16/4 = 4", a.Limit(), testutil.ToFloat64(m.ConcurrencyLimit))
	}
	// Saturate the 4 slots, with latency at the baseline: it grows.
	for range 4 {
		if err := a.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	refreshes(a, clock, 10, 40*time.Millisecond, false)
	a.decide()
	if a.Limit() != 5 || testutil.ToFloat64(m.LimitChanges.WithLabelValues(limiter.ReasonHeadroom)) != 1 {
		t.Fatalf("limit %d after a saturated healthy interval, want 5 with one headroom change", a.Limit())
	}
	if got := testutil.ToFloat64(m.LatencyBaseline); got != 0.04 {
		t.Errorf("baseline gauge %v, want 0.04", got)
	}
	// MongoDB times out: emergency cut, the running work untouched.
	refreshes(a, clock, 2, 5*time.Second, true)
	a.decide()
	if a.Limit() != 1 || a.InFlight() != 4 {
		t.Fatalf("after overload: limit %d, in flight %d; want 1 and the 4 still running", a.Limit(), a.InFlight())
	}
	if testutil.ToFloat64(m.LimitChanges.WithLabelValues(limiter.ReasonOverload)) != 1 || testutil.ToFloat64(m.ConcurrencyLimit) != 1 {
		t.Errorf("overload not reported in metrics")
	}
	for range 4 {
		a.Release()
	}
}

// A latency spike is judged from refreshes still running, not only once they
// finish: with refreshes suddenly taking far longer than an interval, none
// completes, yet the limit comes down within the hysteresis.
func TestAdaptiveLimiterCutsOnRefreshesStuckInFlight(t *testing.T) {
	t.Parallel()
	a, m, clock := newTestAdaptive(t, 32)                // starts at 8
	refreshes(a, clock, 10, 400*time.Millisecond, false) // baseline 400ms
	a.decide()
	start := a.Limit()
	for range start {
		if err := a.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer a.Release()
		done := a.RefreshStarted()
		defer done(false, true)
	}
	for i := 1; i <= 2; i++ {
		clock.Advance(time.Second)
		a.decide()
	}
	if a.Limit() >= start || testutil.ToFloat64(m.LimitChanges.WithLabelValues(limiter.ReasonLatency)) != 1 {
		t.Fatalf("limit %d (from %d) after 2 s of every refresh running 2.5× the baseline and none finishing; want a latency cut", a.Limit(), start)
	}
}

// cancelled refreshes (shutdown) teach the policy nothing.
func TestAdaptiveLimiterIgnoresCancelledRefreshes(t *testing.T) {
	t.Parallel()
	a, _, clock := newTestAdaptive(t, 16)
	for range 10 {
		done := a.RefreshStarted()
		clock.Advance(time.Minute)
		done(false, true)
	}
	a.decide()
	if b := a.policy.Baseline(); b != 0 {
		t.Fatalf("baseline %v from cancelled refreshes, want none", b)
	}
}
