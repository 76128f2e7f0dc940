package consumer

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
)

// The tests here drive the consumer's waits with a fake clock: each checks
// that nothing happens a nanosecond before the wait ends and that the
// awaited step follows once it does, without sleeping.

// failAfter bounds a wait that only a broken consumer would leave unmet.
const failAfter = 30 * time.Second

// await receives from c, failing the test if nothing comes within failAfter.
func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// boundedCtx is a context that ends after failAfter.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// logSignal passes records on to the wrapped handler and sends those whose
// message is msg on ch (dropping them when ch is full).
type logSignal struct {
	slog.Handler
	msg string
	ch  chan slog.Record
}

func (h logSignal) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- r.Clone():
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h logSignal) WithAttrs(as []slog.Attr) slog.Handler {
	return logSignal{h.Handler.WithAttrs(as), h.msg, h.ch}
}

func (h logSignal) WithGroup(name string) slog.Handler {
	return logSignal{h.Handler.WithGroup(name), h.msg, h.ch}
}

// heldRefresh is a refresher for one refresh, which closes started, then
// holds until release is closed or its context ends, and closes ended.
func heldRefresh() (rec *recordingRefresher, started, release, ended chan struct{}) {
	started, release, ended = make(chan struct{}), make(chan struct{}), make(chan struct{})
	rec = newRecorder(func(ctx context.Context, user string, n int) error {
		defer close(ended)
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	return rec, started, release, ended
}

func TestShutdownTimeoutCancelsAndReleasesWithoutCountingAnAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "slow")
	rec, inRefresh, _, cancelled := heldRefresh() // never released: only cancelling ends it
	clk := clocktest.NewFake(time.Now())
	const timeout = 7 * time.Second // unlike any other wait of the consumer's
	c, m := b.newConsumer(t, rec, consumerOpts{clock: clk, cfg: Config{ShutdownTimeout: timeout, PollInterval: time.Hour}})
	cancel, wait := startCancel(t, c)
	await(t, inRefresh, "the refresh to start")
	cancel()
	if err := clk.BlockUntilWaiting(boundedCtx(t), timeout); err != nil {
		t.Fatalf("shutdown never began its %v wait on the clock: %v", timeout, err)
	}
	clk.Advance(timeout - time.Nanosecond)
	select {
	case <-cancelled:
		t.Fatal("the running refresh was cancelled before the shutdown timeout")
	default:
	}
	clk.Advance(time.Nanosecond)
	await(t, cancelled, "the shutdown timeout to cancel the refresh")
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := b.count(t, b.colls.Claims, nil); n != 0 {
		t.Errorf("%d leases left, want 0: a cancelled refresh must be released, not backed off", n)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 1 {
		t.Errorf("queue holds %d entries, want 1", n)
	}
	if got := testutil.ToFloat64(m.Refreshes.WithLabelValues(metrics.OutcomeError)); got != 0 {
		t.Errorf("failed refreshes = %v, want 0", got)
	}
}

func TestLeasesAreRenewedAThirdIntoTheirLife(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "held")
	rec, inRefresh, release, _ := heldRefresh()
	clk := clocktest.NewFake(time.Now())
	start0 := clk.Now()
	const lease = 30 * time.Second
	c, _ := b.newConsumer(t, rec, consumerOpts{clock: clk, cfg: Config{LeaseDuration: lease, PollInterval: time.Hour}})
	renewed := make(chan slog.Record, 1)
	c.log = slog.New(logSignal{c.log.Handler(), "leases renewed", renewed})
	stop := start(t, c)
	defer func() {
		close(release)
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	await(t, inRefresh, "the refresh to start")
	if got, want := b.leaseUntil(t, "held"), start0.Add(lease); !got.Equal(want.Truncate(time.Millisecond)) {
		t.Fatalf("new lease until %v, want %v", got, want)
	}
	if err := clk.BlockUntilWaiting(boundedCtx(t), lease/3); err != nil {
		t.Fatalf("no renewal period of %v on the clock: %v", lease/3, err)
	}
	clk.Advance(lease/3 - time.Nanosecond)
	select {
	case <-renewed:
		t.Fatal("leases renewed before a third of their life")
	default:
	}
	clk.Advance(time.Nanosecond)
	r := await(t, renewed, "the renewal")
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "renewed" && a.Value.Int64() != 1 {
			t.Errorf("renewed %v leases, want 1", a.Value)
		}
		return true
	})
	if got, want := b.leaseUntil(t, "held"), start0.Add(lease/3+lease); !got.Equal(want.Truncate(time.Millisecond)) {
		t.Errorf("renewed lease until %v, want %v (renewal time + LeaseDuration)", got, want)
	}
}

// leaseUntil reads user's lease expiry.
func (b *testBundle) leaseUntil(t *testing.T, user string) time.Time {
	t.Helper()
	var l struct {
		Until time.Time `bson:"leaseUntil"`
	}
	if err := b.colls.Claims.FindOne(t.Context(), bson.D{{Key: "_id", Value: user}}).Decode(&l); err != nil {
		t.Fatalf("reading %s's lease: %v", user, err)
	}
	return l.Until
}

// TestAckFlushRetriesAfterItsBackoff: a flush that fails is retried once
// its backoff has passed on the clock, and not before.
func TestAckFlushRetriesAfterItsBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "alice")
	clk := clocktest.NewFake(time.Now())
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{clock: clk})
	ctx := boundedCtx(t)
	res, err := c.claimer.round(ctx, 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 1 {
		t.Fatalf("claim: %v, %d users; want alice", err, len(res.works))
	}
	// Acknowledging deletes from the queue; the server refuses this name.
	c.acks.queue = b.db.Collection("score$events")
	attempts := make(chan error, 10)
	c.acks.afterFlush = func(err error) { attempts <- err }
	c.acks.add(outcome{work: res.works[0]})
	flushCtx, stopFlush := context.WithCancel(ctx)
	flushed := make(chan error, 1)
	go func() { flushed <- c.flushAll(flushCtx) }()

	if err := await(t, attempts, "the first flush"); err == nil {
		t.Fatal("the flush into a refused collection succeeded")
	}
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the failed flush never waited on the clock: %v", err)
	}
	delay := clk.Pending()[0]
	if delay < 50*time.Millisecond || delay > 100*time.Millisecond {
		t.Errorf("first retry delay %v, want 50ms–100ms (100ms base, half jittered)", delay)
	}
	clk.Advance(delay - time.Nanosecond)
	select {
	case err := <-attempts:
		t.Fatalf("flush retried before its backoff ended (%v)", err)
	default:
	}
	clk.Advance(time.Nanosecond)
	if err := await(t, attempts, "the retry"); err == nil {
		t.Fatal("the retry into a refused collection succeeded")
	}
	stopFlush()
	if err := await(t, flushed, "flushAll to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("flushAll = %v, want it to end with its context", err)
	}
}
