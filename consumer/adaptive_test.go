package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
)

func TestAdaptiveLimiterFollowsItsPolicyAndReportsIt(t *testing.T) {
	t.Parallel()
	m := metrics.NewConsumer(prometheus.NewRegistry())
	a := NewAdaptiveLimiter(16, time.Hour, limiter.PolicyConfig{}, m, nil)
	if a.Limit() != 4 || testutil.ToFloat64(m.ConcurrencyLimit) != 4 {
		t.Fatalf("starting limit %d (gauge %v), want 16/4 = 4", a.Limit(), testutil.ToFloat64(m.ConcurrencyLimit))
	}
	// Saturate the 4 slots, with latency at the baseline: it grows.
	for range 4 {
		if err := a.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		a.ObserveRefresh(40*time.Millisecond, false)
	}
	a.decide()
	if a.Limit() != 5 || testutil.ToFloat64(m.LimitChanges.WithLabelValues(limiter.ReasonHeadroom)) != 1 {
		t.Fatalf("limit %d after a saturated healthy interval, want 5 with one headroom change", a.Limit())
	}
	if got := testutil.ToFloat64(m.LatencyBaseline); got != 0.04 {
		t.Errorf("baseline gauge %v, want 0.04", got)
	}
	// MongoDB times out: emergency cut, the running work untouched.
	a.ObserveRefresh(5*time.Second, true)
	a.ObserveRefresh(5*time.Second, true)
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
