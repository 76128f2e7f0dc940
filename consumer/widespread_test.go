package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scorerefresh/scorerefresh/metrics"
)

func TestFailureWindowTellsWidespreadFromIsolated(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	cases := []struct {
		name       string
		ok, failed int
		at         time.Duration // when widespread is asked, after the outcomes
		want       bool
	}{
		{"too few to judge", 0, 7, 0, false},
		{"most failed", 2, 6, 0, true},
		{"half failed is not most", 4, 4, 0, false},
		{"one user failing among many", 30, 1, 0, false},
		{"still remembered in the previous span", 0, 8, 15 * time.Second, true},
		{"forgotten after two spans", 0, 8, 21 * time.Second, false},
	}
	for _, tc := range cases {
		w := &failureWindow{span: 10 * time.Second, minSample: 8}
		for range tc.ok {
			w.record(t0, false)
		}
		for range tc.failed {
			w.record(t0, true)
		}
		if got := w.widespread(t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: widespread = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSlowdownOfEveryRefreshDeadLettersNobody: for a while every refresh
// outlives its deadline (the server slowed to a crawl), then the server
// recovers. Charged as each user's own failure, two timeouts each would
// dead-letter the whole backlog; as a widespread failure, nobody is charged
// and the backlog drains after the recovery.
func TestSlowdownOfEveryRefreshDeadLettersNobody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var users []string
	for i := range 12 {
		users = append(users, fmt.Sprintf("u%02d", i))
	}
	b.enqueue(t, users...)
	var calls atomic.Int64
	rec := newRecorder(func(ctx context.Context, user string, n int) error {
		if calls.Add(1) <= 60 { // about five timeouts per user
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	c, m := b.newConsumer(t, rec, consumerOpts{limit: 12, cfg: Config{MaxAttempts: 2, RefreshTimeout: 5 * time.Millisecond}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts)); got != 0 {
		t.Errorf("dead-lettered by the slowdown: %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != 12 {
		t.Errorf("acked %v, want 12", got)
	}
}

// TestOwnDeadlineTellsTheRefreshsTimeFromTheServers: a timeout in the last
// tenth of the refresh's time is the refresh's own (the driver gives up
// before the context expires), one with most of the time left is the
// server's.
func TestOwnDeadlineTellsTheRefreshsTimeFromTheServers(t *testing.T) {
	t.Parallel()
	timeout := fmt.Errorf("reading a component: %w", context.DeadlineExceeded)
	nearEnd, cancel := context.WithDeadline(context.Background(), time.Now().Add(50*time.Millisecond))
	defer cancel()
	if !ownDeadline(nearEnd, timeout, time.Second) {
		t.Error("a timeout 50 ms before a 1 s refresh's deadline is not the refresh's own")
	}
	early, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel2()
	if ownDeadline(early, timeout, time.Hour) {
		t.Error("a timeout with the whole hour left is counted as the refresh's own")
	}
	if ownDeadline(nearEnd, errors.New("duplicate key"), time.Second) {
		t.Error("a non-timeout error near the deadline is counted as the refresh's own")
	}
}
