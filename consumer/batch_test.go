package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	c, m := b.newConsumer(t, rec, consumerOpts{limit: 2, cfg: Config{MaxUsersInFlight: 40, BatchSize: 8, BatchLinger: time.Hour}})
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
