package consumer

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
)

func newTestAdaptive(t *testing.T, max int) (*AdaptiveLimiter, *metrics.Consumer, *clocktest.Fake) {
	t.Helper()
	m := metrics.NewConsumer(prometheus.NewRegistry())
	clock := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := NewAdaptiveLimiter(max, time.Hour, limiter.PolicyConfig{}, m, nil, clock)
	return a, m, clock
}

// refreshes runs n refreshes of latency d one after another on the fake clock.
func refreshes(a *AdaptiveLimiter, clock *clocktest.Fake, n int, d time.Duration, overload bool) {
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

// fixedExchange is a fleet whose baseline is given.
type fixedExchange struct {
	fleet     time.Duration
	published []time.Duration
}

func (f *fixedExchange) Exchange(_ context.Context, own time.Duration) (Fleet, error) {
	f.published = append(f.published, own)
	return Fleet{Baseline: f.fleet, Replicas: 1}, nil
}

// A replica that started while the server was loaded measured a high
// baseline; judged alone it would keep growing. Judged against the fleet's
// lower baseline it sees the same slow intervals its peers see.
func TestAdaptiveLimiterJudgesAgainstTheFleetBaseline(t *testing.T) {
	t.Parallel()
	alone, _, clockA := newTestAdaptive(t, 16)
	shared, _, clockS := newTestAdaptive(t, 16)
	fleet := &fixedExchange{fleet: 200 * time.Millisecond}
	shared.ShareBaseline(fleet, 0)
	for _, x := range []struct {
		a     *AdaptiveLimiter
		clock *clocktest.Fake
	}{{alone, clockA}, {shared, clockS}} {
		for range 4 {
			if err := x.a.Acquire(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer x.a.Release()
		}
		refreshes(x.a, x.clock, 10, 600*time.Millisecond, false) // its own "no-load" view
		x.a.decide()
		x.a.exchange(t.Context())
		for range 4 {
			refreshes(x.a, x.clock, 10, 600*time.Millisecond, false)
			x.a.decide()
		}
	}
	if alone.Limit() <= 4 {
		t.Fatalf("alone: limit %d, want growth (600ms is its own baseline)", alone.Limit())
	}
	if shared.Limit() >= 4 {
		t.Fatalf("shared: limit %d, want a cut (600ms is 3× the fleet's 200ms)", shared.Limit())
	}
	if want := []time.Duration{600 * time.Millisecond}; !slices.Equal(fleet.published, want) {
		t.Fatalf("published %v, want its own baseline %v", fleet.published, want)
	}
}

// TestFleetBaselinesExchangeThroughTheClaimsCollection runs two replicas'
// exchanges against the real server: each sees the lowest fresh baseline,
// stale ones are ignored, one exchange is two round trips, and the
// documents are invisible to claiming.
func TestFleetBaselinesExchangeThroughTheClaimsCollection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := clocktest.NewFake(time.Now())
	a := NewFleetBaselines(b.colls.Claims, "a", time.Minute, clock)
	c := NewFleetBaselines(b.colls.Claims, "c", time.Minute, clock)
	ctx := t.Context()

	if got, err := a.Exchange(ctx, 0); err != nil || got != (Fleet{0, 1}) {
		t.Fatalf("empty fleet: %+v, %v; want no baseline, 1 replica (itself)", got, err)
	}
	if got, err := a.Exchange(ctx, 300*time.Millisecond); err != nil || got != (Fleet{300 * time.Millisecond, 1}) {
		t.Fatalf("a alone: %+v, %v; want its own 300ms, 1 replica", got, err)
	}
	b.cmds.take()
	got, err := c.Exchange(ctx, 500*time.Millisecond)
	if err != nil || got != (Fleet{300 * time.Millisecond, 2}) {
		t.Fatalf("c: %+v, %v; want the lowest, a's 300ms, 2 replicas", got, err)
	}
	if cmds := b.cmds.take(); !maps.Equal(cmds, map[string]int{"update": 1, "find": 1}) {
		t.Errorf("one exchange sent %v, want one update and one find", cmds)
	}
	// A third replica, not yet measured: counted, and told the bar.
	d := NewFleetBaselines(b.colls.Claims, "d", time.Minute, clock)
	if got, err := d.Exchange(ctx, 0); err != nil || got != (Fleet{300 * time.Millisecond, 3}) {
		t.Fatalf("d: %+v, %v; want a's 300ms, 3 replicas (itself included)", got, err)
	}
	if _, err := d.Exchange(ctx, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// a and d go away; their figures go stale while c keeps publishing.
	clock.Advance(2 * time.Minute)
	if got, err := c.Exchange(ctx, 500*time.Millisecond); err != nil || got != (Fleet{500 * time.Millisecond, 1}) {
		t.Fatalf("after a and d left: %+v, %v; want c's own 500ms, 1 replica", got, err)
	}
	// Claiming does not take the documents for live leases.
	b.enqueue(t, "u1")
	cons, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := cons.claimer.runOnce(ctx, 10, nil)
	if err != nil {
		t.Fatalf("claim beside baseline documents: %v", err)
	}
	if len(res.works) != 1 {
		t.Fatalf("claim beside baseline documents: %d users, want u1", len(res.works))
	}
	if n := b.count(t, b.colls.Claims, bson.D{{Key: "baselineSeconds", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 3 {
		t.Errorf("%d baseline documents, want one per replica (3)", n)
	}
}
