package consumer

import (
	"context"
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
	slow := &event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "find" || e.Command.Lookup("find").StringValue() != "score_events" {
			return
		}
		slowReads.Add(1)
		select { // the server's work on the read, cut short only by its deadline
		case <-time.After(600 * time.Millisecond):
		case <-ctx.Done():
		}
	}}
	db := mongotest.Client(t, mongotest.Options{Monitor: slow}).Database(b.db.Name())
	slowBundle := &testBundle{db: db, cmds: b.cmds, colls: Collections{
		Queue: db.Collection(b.colls.Queue.Name()), Claims: db.Collection(b.colls.Claims.Name()), DeadLetter: db.Collection(b.colls.DeadLetter.Name()),
	}}
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
