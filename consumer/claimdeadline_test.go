package consumer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestClaimRoundsThatRunOutOfTimeGetLonger plays a server that needs 0.6 s
// for every read of the queue (as FerretDB does over a head of 16 MiB
// entries, which it decodes for any query not by _id): a round, two or three
// such reads, needs more than its 1 s deadline. With a fixed deadline every
// round timed out for good and nothing was ever claimed; a deadline doubled
// after each timeout gets a round through by the second or third try.
func TestClaimRoundsThatRunOutOfTimeGetLonger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "ann", "bob", "cy")
	var slowReads atomic.Int64
	slow := &mongotest.Commands{OnStarted: func(ctx context.Context, e mongotest.Command) {
		if e.Name != "find" || e.Collection != "score_events" {
			return
		}
		slowReads.Add(1)
		select { // the server's work on the read, cut short only by its deadline
		case <-time.After(600 * time.Millisecond):
		case <-ctx.Done():
		}
	}}
	slowBundle := b.watchedBy(t, slow.Monitor(nil))
	rec := newRecorder(nil)
	c, m := slowBundle.newConsumer(t, rec, consumerOpts{cfg: Config{OpTimeout: time.Second, PollInterval: 50 * time.Millisecond}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"ann", "bob", "cy"} {
		if n := rec.callsOf(u); n != 1 {
			t.Errorf("%s refreshed %d times, want 1", u, n)
		}
	}
	if got := testutil.ToFloat64(m.ClaimErrors); got == 0 {
		t.Errorf("no claim round ran out of time (%d slow reads): the test proves nothing", slowReads.Load())
	}
}

// TestShutdownCutsAStretchedClaimRoundBack lets every read of the queue
// hang until its deadline, so claim rounds stretch (1 s, 2 s, 4 s), and
// begins shutdown while the 4 s round waits. The round's read ends by
// cancellation when the shutdown begins, not at its 4 s deadline: a round
// stretched to minutes must not outlast the pod's grace period.
func TestShutdownCutsAStretchedClaimRoundBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "ann")
	type read struct {
		budget time.Duration
		ended  chan error
	}
	reads := make(chan read, 16)
	hang := &mongotest.Commands{OnStarted: func(ctx context.Context, e mongotest.Command) {
		if e.Name != "find" || e.Collection != "score_events" {
			return
		}
		dl, _ := ctx.Deadline()
		r := read{budget: time.Until(dl), ended: make(chan error, 1)}
		reads <- r
		<-ctx.Done()
		r.ended <- ctx.Err()
	}}
	slowBundle := b.watchedBy(t, hang.Monitor(nil))
	c, _ := slowBundle.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{OpTimeout: time.Second, PollInterval: 50 * time.Millisecond}})
	cancel, wait := startCancel(t, c)
	for {
		r := <-reads
		if r.budget <= 2*time.Second {
			if err := <-r.ended; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a read of a %s round ended with %v, want its deadline", r.budget.Round(time.Second), err)
			}
			continue
		}
		cancel() // shutdown begins while the stretched round waits
		if err := <-r.ended; !errors.Is(err, context.Canceled) {
			t.Errorf("the stretched round's read ended with %v, want cancelled by the shutdown before its %s deadline", err, r.budget.Round(time.Second))
		}
		break
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// watchedBy is b's database reached through a client of its own whose
// commands mon sees first (and may hold, as a slow server would).
func (b *testBundle) watchedBy(t *testing.T, mon *event.CommandMonitor) *testBundle {
	t.Helper()
	db := mongotest.Client(t, mongotest.Options{Monitor: mon}).Database(b.db.Name())
	return &testBundle{db: db, cmds: b.cmds, colls: Collections{
		Queue: db.Collection(b.colls.Queue.Name()), Claims: db.Collection(b.colls.Claims.Name()), DeadLetter: db.Collection(b.colls.DeadLetter.Name()),
	}}
}
