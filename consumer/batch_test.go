package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// batchRecorder is a BatchRefresher that records its batches and how many
// run at once.
type batchRecorder struct {
	recordingRefresher
	mu               sync.Mutex
	sizes            []int
	running, maxSeen atomic.Int64
	gate             chan struct{} // if set, each batch waits for it
}

func (r *batchRecorder) RefreshBatch(ctx context.Context, users []string, startedAt time.Time) map[string]error {
	n := r.running.Add(1)
	defer r.running.Add(-1)
	for {
		m := r.maxSeen.Load()
		if n <= m || r.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	r.sizes = append(r.sizes, len(users))
	r.mu.Unlock()
	errs := make(map[string]error, len(users))
	for _, u := range users {
		errs[u] = r.Refresh(ctx, u, startedAt)
	}
	return errs
}

// TestUsersAreRefreshedInBatchesOfAtMostBatchSize claims 40 users with
// two refresh slots and batches of up to 8: every user is refreshed once
// and acknowledged, batches carry several users, none more than 8, and at
// most two run at once (parallelism is bounded in batches).
func TestUsersAreRefreshedInBatchesOfAtMostBatchSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var users []string
	for i := range 40 {
		users = append(users, fmt.Sprintf("u%02d", i), fmt.Sprintf("u%02d", i))
	}
	b.enqueue(t, users...)
	gate := make(chan struct{})
	rec := &batchRecorder{recordingRefresher: *newRecorder(nil), gate: gate}
	c, m := b.newConsumer(t, rec, consumerOpts{limit: 2, cfg: Config{MaxUsersInFlight: 40, BatchSize: 8}})
	stop := start(t, c)
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // before stop's cleanup: a failed wait must not hang the test
	// Both slots busy with a batch each while the other users join batches.
	waitFor(t, "two batches running", func() bool { return rec.running.Load() == 2 })
	release()
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if n := rec.callsOf(fmt.Sprintf("u%02d", i)); n != 1 {
			t.Errorf("u%02d refreshed %d times, want 1", i, n)
		}
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != 80 {
		t.Errorf("acked %v, want 80", got)
	}
	multi := 0
	for _, n := range rec.sizes {
		if n > 8 {
			t.Errorf("a batch of %d users, cap 8", n)
		}
		if n > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Errorf("batch sizes %v: no batch carried more than one user", rec.sizes)
	}
	if got := rec.maxSeen.Load(); got > 2 {
		t.Errorf("%d batches ran at once, limit 2", got)
	}
}

// culpritBatches is a BatchRefresher whose every batch holding "culprit"
// fails as a whole with one error, as a shared component query, the score
// read or the batch's deadline does; alone, only the culprit fails.
type culpritBatches struct {
	recordingRefresher
	mu    sync.Mutex
	sizes []int
}

func (r *culpritBatches) RefreshBatch(ctx context.Context, users []string, startedAt time.Time) map[string]error {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(users))
	r.mu.Unlock()
	errs := make(map[string]error, len(users))
	broken := slices.Contains(users, "culprit")
	for _, u := range users {
		if broken {
			errs[u] = errors.New("component 3 of the batch: the aggregation failed")
			continue
		}
		errs[u] = r.Refresh(ctx, u, startedAt)
	}
	return errs
}

// TestBatchFailingAsAWholeChargesOnlyItsCulprit batches a user whose
// presence fails every batch with seven healthy users, MAX_ATTEMPTS 2. A
// batch-wide failure says nothing about who caused it: nobody is charged,
// each member refreshes alone next time, and only the culprit, failing
// alone, is charged and dead-lettered. (Charged as a batch, all eight were
// dead-lettered, or, counted as eight failures at once, the failure looked
// widespread and nobody was ever charged.)
func TestBatchFailingAsAWholeChargesOnlyItsCulprit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	users := []string{"culprit", "a", "b", "c", "d", "e", "f", "g"}
	b.enqueue(t, users...)
	rec := &culpritBatches{recordingRefresher: *newRecorder(func(_ context.Context, user string, _ int) error {
		if user == "culprit" {
			return errors.New("its source documents break the aggregation")
		}
		return nil
	})}
	c, m := b.newConsumer(t, rec, consumerOpts{limit: 1, cfg: Config{MaxUsersInFlight: 8, BatchSize: 8, MaxAttempts: 2}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != 7 {
		t.Errorf("acked %v entries, want the 7 healthy users'", got)
	}
	if got := b.count(t, b.colls.DeadLetter, nil); got != 1 {
		t.Errorf("%d dead letters, want 1 (the culprit's)", got)
	}
	var dl struct {
		Username   string `bson:"username"`
		DeadLetter struct {
			Attempts int `bson:"attempts"`
		} `bson:"deadLetter"`
	}
	if err := b.colls.DeadLetter.FindOne(t.Context(), bson.D{}).Decode(&dl); err != nil {
		t.Fatalf("reading the dead letter: %v", err)
	}
	if dl.Username != "culprit" || dl.DeadLetter.Attempts != 2 {
		t.Errorf("dead letter of %q after %d attempts, want culprit after 2", dl.Username, dl.DeadLetter.Attempts)
	}
	for _, u := range users[1:] {
		if n := rec.callsOf(u); n != 1 {
			t.Errorf("%s refreshed %d times, want once (alone, after the failed batch)", u, n)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sizes) == 0 || rec.sizes[0] < 2 {
		t.Errorf("batch sizes %v: the culprit never shared a batch, the test proves nothing", rec.sizes)
	}
}

// TestBatchesSpreadOverFreeSlots: the goroutine that gets a slot takes the
// waiting users divided by the free slots, rounded up, at most the batch
// size; a batch grows to the batch size only when every other slot is busy.
func TestBatchesSpreadOverFreeSlots(t *testing.T) {
	t.Parallel()
	var g batcher
	for i := range 64 {
		g.add(work{lease: lease{User: fmt.Sprintf("u%02d", i)}})
	}
	for i := range 16 {
		if got := len(g.take(16, 16)); got != 4 {
			t.Fatalf("slot %d of 16 took %d users, want 4 (64 waiting over 16 free slots)", i, got)
		}
	}
	for i := range 40 {
		g.add(work{lease: lease{User: fmt.Sprintf("v%02d", i)}})
	}
	g.done() // one slot free, 15 busy
	if got := len(g.take(16, 16)); got != 16 {
		t.Errorf("the only free slot took %d of 40 waiting users, want the batch size, 16", got)
	}
	g.done()
	g.done() // two free
	if got := len(g.take(16, 16)); got != 12 {
		t.Errorf("took %d of 24 waiting over 2 free slots, want 12", got)
	}
	if got := len(g.take(16, 16)); got != 12 {
		t.Errorf("took %d of the last 12 waiting, want 12", got)
	}
	if got := g.take(16, 16); got != nil {
		t.Errorf("took %d users from an empty line", len(got))
	}
	if got := SpreadBatch(16, 64, 16); got != 4 {
		t.Errorf("SpreadBatch at the defaults = %d, want 4", got)
	}
	if got := SpreadBatch(16, 256, 16); got != 16 {
		t.Errorf("SpreadBatch(16, 256, 16) = %d, want 16", got)
	}
}

// TestDefaultsKeepEverySlotBusy claims 64 users with the defaults' shape
// (16 slots, 64 users in flight, batches of up to 16): every slot runs a
// batch at once, 4 users each. Filling batches first ran 4 batches of 16 and
// left 12 slots idle, which halved a latency-bound drain.
func TestDefaultsKeepEverySlotBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var users []string
	for i := range 64 {
		users = append(users, fmt.Sprintf("u%02d", i))
	}
	b.enqueue(t, users...)
	gate := make(chan struct{})
	rec := &batchRecorder{recordingRefresher: *newRecorder(nil), gate: gate}
	c, _ := b.newConsumer(t, rec, consumerOpts{limit: DefaultRefreshConcurrency, cfg: Config{MaxUsersInFlight: DefaultMaxUsersInFlight, BatchSize: DefaultBatchSize}})
	stop := start(t, c)
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	waitFor(t, "a batch in every one of the 16 slots", func() bool { return rec.running.Load() == int64(DefaultRefreshConcurrency) })
	release()
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, n := range rec.sizes {
		if n != 4 {
			t.Errorf("batch sizes %v: want 16 batches of 4", rec.sizes)
			break
		}
	}
}

// TestAutoBatchSizeFollowsTheServer: BatchAuto batches up to
// DefaultBatchSize on a server that answers $in from an index, one user
// per slot where an $in decodes the whole collection but a user's query
// does not, and batches again where both decode it (the embedded server).
func TestAutoBatchSizeFollowsTheServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, _ := b.newConsumer(t, &batchRecorder{recordingRefresher: *newRecorder(nil)}, consumerOpts{cfg: Config{BatchSize: BatchAuto}})
	c.traits = servertraits.Fixed(servertraits.Info{Version: "7.0.0"})
	if got := c.batchSize(); got != DefaultBatchSize {
		t.Errorf("on MongoDB: batches of %d, want %d", got, DefaultBatchSize)
	}
	c.traits = servertraits.Fixed(servertraits.Info{Version: "7.0.0", FerretDB: "v1.24.2", Backend: "PostgreSQL"})
	if got := c.batchSize(); got != 1 {
		t.Errorf("on FerretDB over PostgreSQL: batches of %d, want 1", got)
	}
	c.traits = servertraits.Fixed(servertraits.Info{Version: "7.0.0", FerretDB: "v1.24.2", Backend: "SQLite"})
	if got := c.batchSize(); got != DefaultBatchSize {
		t.Errorf("on FerretDB over SQLite (a user's query scans too): batches of %d, want %d", got, DefaultBatchSize)
	}
	c.cfg.BatchSize = 8
	if got := c.batchSize(); got != 8 {
		t.Errorf("forced to 8 on FerretDB: batches of %d", got)
	}
}

// TestAUserAloneIsABatchOfOne: with batches of one user (BatchSize 1), a
// BatchRefresher gets each user as a batch of one through RefreshBatch, the
// one refresh path, never its per-user Refresh.
func TestAUserAloneIsABatchOfOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	users := []string{"a", "b", "c", "d", "e"}
	b.enqueue(t, users...)
	rec := &batchRecorder{recordingRefresher: *newRecorder(nil)}
	c, m := b.newConsumer(t, rec, consumerOpts{limit: 2, cfg: Config{BatchSize: 1}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	sizes := slices.Clone(rec.sizes)
	rec.mu.Unlock()
	if len(sizes) != len(users) || slices.ContainsFunc(sizes, func(n int) bool { return n != 1 }) {
		t.Errorf("RefreshBatch got batches of %v, want %d batches of one", sizes, len(users))
	}
	for _, u := range users {
		if n := rec.callsOf(u); n != 1 {
			t.Errorf("%s refreshed %d times, want 1", u, n)
		}
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != float64(len(users)) {
		t.Errorf("acked %v, want %d", got, len(users))
	}
}
