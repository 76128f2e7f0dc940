package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// testBundle is one test's database, collections and command counter.
type testBundle struct {
	db    *mongo.Database
	colls Collections
	cmds  *mongotest.Commands
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	cmds := &mongotest.Commands{}
	db := mongotest.Database(t, mongotest.Options{Monitor: cmds.Monitor(nil)})
	b := &testBundle{
		db:   db,
		cmds: cmds,
		colls: Collections{
			Queue:      db.Collection("score_events"),
			Claims:     db.Collection("score_claims"),
			DeadLetter: db.Collection("score_events_dead"),
		},
	}
	if _, err := EnsureIndexes(t.Context(), b.colls, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	return b
}

type consumerOpts struct {
	cfg        Config
	clock      clock.Clock // nil: the wall clock
	serverTime clock.Nower // nil: clock
	limit      int
}

func (b *testBundle) newConsumer(t *testing.T, r Refresher, o consumerOpts) (*Consumer, *metrics.Consumer) {
	t.Helper()
	m := metrics.NewConsumer(prometheus.NewRegistry())
	cfg := o.cfg
	cfg.PollInterval = cmpOr(cfg.PollInterval, 20*time.Millisecond)
	limit := o.limit
	if limit == 0 {
		limit = 4
	}
	c := New(cfg, b.colls, Deps{
		Refresher:  r,
		Limiter:    NewFixedLimiter(limit),
		Metrics:    m,
		Logger:     testLogger(t),
		Clock:      o.clock,
		ServerTime: o.serverTime,
	})
	c.speedUpSettling()
	return c, m
}

// speedUpSettling makes tests wait less for their flushes and retries than
// production does: 5 ms for company, and retries after 1–5 ms.
func (c *Consumer) speedUpSettling() {
	c.acks.interval, c.dead.interval = 5*time.Millisecond, 5*time.Millisecond
	c.acks.retryDelay = Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}
	c.dead.retryDelay = c.acks.retryDelay
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// start runs c until the returned stop is called; stop waits for Run to return.
func start(t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	cancel, wait := startCancel(t, c)
	return func() error { cancel(); return wait() }
}

// startCancel runs c; cancel begins shutdown and wait waits for Run to return.
func startCancel(t *testing.T, c *Consumer) (cancel func(), wait func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	wait = func() error {
		once.Do(func() { err = <-done })
		return err
	}
	t.Cleanup(func() { cancel(); _ = wait() })
	return cancel, wait
}

// enqueue inserts one entry per username, oldest first, with createdAt 1ms apart.
func (b *testBundle) enqueue(t *testing.T, usernames ...string) []bson.ObjectID {
	t.Helper()
	base := time.Now().Add(-time.Minute)
	docs := make([]any, len(usernames))
	ids := make([]bson.ObjectID, len(usernames))
	for i, u := range usernames {
		ids[i] = bson.NewObjectID()
		docs[i] = bson.D{{Key: "_id", Value: ids[i]}, {Key: "username", Value: u}, {Key: "createdAt", Value: base.Add(time.Duration(i) * time.Millisecond)}}
	}
	if _, err := b.colls.Queue.InsertMany(t.Context(), docs); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return ids
}

func (b *testBundle) count(t *testing.T, coll *mongo.Collection, filter any) int {
	t.Helper()
	if filter == nil {
		filter = bson.D{}
	}
	n, err := coll.CountDocuments(t.Context(), filter)
	if err != nil {
		t.Fatalf("counting %s: %v", coll.Name(), err)
	}
	return int(n)
}

// waitFor polls cond until it holds; it fails the test after a generous
// deadline (a hang, not a slow machine, is what it catches).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *testBundle) waitDrained(t *testing.T) {
	t.Helper()
	waitFor(t, "the queue to drain", func() bool { return b.count(t, b.colls.Queue, nil) == 0 })
	waitFor(t, "the leases to be released", func() bool { return b.count(t, b.colls.Claims, nil) == 0 })
}

// recordingRefresher records each refresh and can be told to fail, panic or block.
type recordingRefresher struct {
	mu      sync.Mutex
	calls   map[string]int
	started map[string][]time.Time
	hook    func(ctx context.Context, user string, n int) error // n = 1 for the user's first refresh
}

func newRecorder(hook func(ctx context.Context, user string, n int) error) *recordingRefresher {
	return &recordingRefresher{calls: map[string]int{}, started: map[string][]time.Time{}, hook: hook}
}

func (r *recordingRefresher) Refresh(ctx context.Context, user string, startedAt time.Time) error {
	r.mu.Lock()
	r.calls[user]++
	n := r.calls[user]
	r.started[user] = append(r.started[user], startedAt)
	r.mu.Unlock()
	if r.hook != nil {
		return r.hook(ctx, user, n)
	}
	return nil
}

func (r *recordingRefresher) callsOf(user string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[user]
}

func TestCoalescesEntriesOfOneUserIntoOneRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var users []string
	for range 50 {
		users = append(users, "alice")
	}
	users = append(users, "bob", "carol", "bob")
	b.enqueue(t, users...)
	rec := newRecorder(nil)
	c, m := b.newConsumer(t, rec, consumerOpts{})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for user, want := range map[string]int{"alice": 1, "bob": 1, "carol": 1} {
		if got := rec.callsOf(user); got != want {
			t.Errorf("refreshes of %s = %d, want %d", user, got, want)
		}
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != 53 {
		t.Errorf("entries acked = %v, want 53", got)
	}
	if got := testutil.ToFloat64(m.EntriesClaimed); got != 53 {
		t.Errorf("entries claimed = %v, want 53", got)
	}
	if got := testutil.ToFloat64(m.Refreshes.WithLabelValues(metrics.OutcomeOK)); got != 3 {
		t.Errorf("ok refreshes = %v, want 3", got)
	}
}

func TestEntryArrivingDuringRefreshIsNotAckedByIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "alice", "alice")
	inRefresh := make(chan struct{})
	proceed := make(chan struct{})
	rec := newRecorder(func(ctx context.Context, user string, n int) error {
		if n == 1 {
			close(inRefresh)
			<-proceed
		}
		return nil
	})
	c, _ := b.newConsumer(t, rec, consumerOpts{})
	stop := start(t, c)
	<-inRefresh
	enqueuedAt := time.Now()
	b.enqueue(t, "alice")
	close(proceed)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rec.callsOf("alice"); got != 2 {
		t.Fatalf("refreshes of alice = %d, want 2 (the late entry needs a refresh that began after it)", got)
	}
	if rec.started["alice"][1].Before(enqueuedAt) {
		t.Errorf("second refresh began %v, before the late entry was enqueued", rec.started["alice"][1])
	}
}

func TestManyDistinctUsersRefreshedInParallel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var users []string
	for i := range 30 {
		users = append(users, fmt.Sprintf("user-%02d", i))
	}
	b.enqueue(t, users...)
	// Every refresh waits until 4 are running at once: a consumer that ran
	// them one after another would never get past the first.
	var running atomic.Int32
	allIn := make(chan struct{})
	var once sync.Once
	rec := newRecorder(func(ctx context.Context, user string, n int) error {
		if running.Add(1) == 4 {
			once.Do(func() { close(allIn) })
		}
		select {
		case <-allIn:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	c, m := b.newConsumer(t, rec, consumerOpts{limit: 4, cfg: Config{MaxUsersInFlight: 8}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := testutil.ToFloat64(m.Refreshes.WithLabelValues(metrics.OutcomeOK)); got != 30 {
		t.Errorf("ok refreshes = %v, want 30", got)
	}
}
