package consumer

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestRoundTripsPerBatchDoNotGrowWithUsers counts the commands of one claim
// round, one lease renewal and one ack flush for 3 and for 60 distinct users:
// a per-user round trip anywhere would make the second count larger.
func TestRoundTripsPerBatchDoNotGrowWithUsers(t *testing.T) {
	t.Parallel()
	type counts struct {
		claim, renew, flush map[string]int
		lengthFilter        bool // the server filters usernames by length: a malformed scan runs too
	}
	measure := func(t *testing.T, users int) counts {
		b := setup(t)
		var names []string
		for i := range users {
			// Two entries per user, so absorb and ack carry more entries than users.
			names = append(names, fmt.Sprintf("u%03d", i), fmt.Sprintf("u%03d", i))
		}
		b.enqueue(t, names...)
		c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: 1000, MaxUsersInFlight: 100}})
		if err := c.claimer.detect(t.Context()); err != nil { // once per process, not per round
			t.Fatal(err)
		}
		b.cmds.Reset()

		var got counts
		got.lengthFilter = *c.claimer.filter
		res, err := c.claimer.round(t.Context(), 100, AbsorbLimit, nil)
		if err != nil || len(res.works) != users {
			t.Fatalf("claim: %v, %d users, want %d", err, len(res.works), users)
		}
		got.claim = mongotest.ByName(b.cmds.Take())
		for _, w := range res.works {
			c.held[w.lease.User] = w.lease
		}
		if err := c.renewOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		got.renew = mongotest.ByName(b.cmds.Take())
		for _, w := range res.works {
			c.acks.add(outcome{work: w})
		}
		if err := c.flushAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		got.flush = mongotest.ByName(b.cmds.Take())
		if n := b.count(t, b.colls.Queue, nil); n != 0 {
			t.Fatalf("%d entries left after the flush", n)
		}
		return got
	}
	small, large := measure(t, 3), measure(t, 60)
	for name, pair := range map[string][2]map[string]int{
		"claim": {small.claim, large.claim},
		"renew": {small.renew, large.renew},
		"flush": {small.flush, large.flush},
	} {
		if !maps.Equal(pair[0], pair[1]) {
			t.Errorf("%s: commands for 3 users %v, for 60 users %v: want the same", name, pair[0], pair[1])
		}
	}
	// And the exact budget, so a new round trip is a deliberate change.
	want := map[string]map[string]int{
		// window, the window users' leases, absorb, one insert of all
		// leases; the first round asks the server what it supports, and on
		// servers that filter usernames a malformed-entry scan runs at most
		// once per poll interval.
		"claim": {"find": 3 + b2i(large.lengthFilter), "insert": 1},
		"renew": {"update": 1},
		"flush": {"delete": 2}, // acked entries, released leases
	}
	for name, got := range map[string]map[string]int{"claim": large.claim, "renew": large.renew, "flush": large.flush} {
		if !maps.Equal(got, want[name]) {
			t.Errorf("%s: commands %v, want %v", name, got, want[name])
		}
	}
}

// TestAckInListsBoundedInBytes: an _id may be any value, so past
// maxIDStatements the $in lists are cut by size too. 1,200 ids of 20 KB
// (24 MB) in one list would pass the 16 MiB a statement may hold, and the
// server would refuse the flush on every retry.
func TestAckInListsBoundedInBytes(t *testing.T) {
	t.Parallel()
	ids := make(bson.A, 1200)
	for i := range ids {
		ids[i] = fmt.Sprintf("%06d", i) + strings.Repeat("x", 20<<10)
	}
	models := deleteStatements(ids)
	total := 0
	for _, m := range models {
		filter := m.(*mongo.DeleteManyModel).Filter
		raw, err := bson.Marshal(filter)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > 16<<20-(64<<10) {
			t.Errorf("a delete statement's filter is %d bytes: past the 16 MiB a statement may hold", len(raw))
		}
		var f struct {
			ID struct {
				In []string `bson:"$in"`
			} `bson:"_id"`
		}
		if err := bson.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		total += len(f.ID.In)
	}
	if total != len(ids) || len(models) < 2 {
		t.Errorf("%d statements deleting %d ids, want every one of %d ids in lists of at most ~%d bytes", len(models), total, len(ids), maxInBytes)
	}
}

// TestLargeAckIsOneCommandOfInLists acknowledges a firehose user's 1,500
// entries: past maxIDStatements the delete goes as $in lists, still one
// command, and every entry is gone.
func TestLargeAckIsOneCommandOfInLists(t *testing.T) {
	t.Parallel()
	if n := len(deleteStatements(make(bson.A, 3))); n != 3 {
		t.Fatalf("3 ids: %d statements, want one per _id", n)
	}
	if n := len(deleteStatements(make(bson.A, maxInIDs+maxIDStatements))); n != 2 {
		t.Fatalf("%d ids: %d statements, want 2 $in lists", maxInIDs+maxIDStatements, n)
	}
	b := setup(t)
	names := make([]string, 1500)
	for i := range names {
		names[i] = "firehose"
	}
	b.enqueue(t, names...)
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 1 || len(res.works[0].entries) != 1500 {
		t.Fatalf("claim: %v; want the one user with all 1500 entries absorbed", err)
	}
	c.held[res.works[0].lease.User] = res.works[0].lease
	b.cmds.Reset()
	c.acks.add(outcome{work: res.works[0]})
	if err := c.flushAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := mongotest.ByName(b.cmds.Take()); got["delete"] != 2 {
		t.Errorf("flush sent %v, want 2 deletes (the entries, the lease)", got)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 0 {
		t.Fatalf("%d entries left after acknowledging 1500", n)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
