package consumer

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestClaimRoundCostIsIndependentOfFleetAndBackoffs measures one claim
// round of a replica alone on its queue, and of the same replica beside 15
// others holding 4 users each with 10,000 users backing off: the commands
// must be the same and the bytes within 10%. (A round that read every live
// lease and sent them back as a $nin list grew by ~40 bytes per lease and
// backoff: ~400 KB here, ~2 MB at 50,000 backoffs, and failed outright past
// 16 MiB.)
func TestClaimRoundCostIsIndependentOfFleetAndBackoffs(t *testing.T) {
	t.Parallel()
	type cost struct {
		cmds           map[string]int
		sent, received int
	}
	measure := func(t *testing.T, others, backoffs int) cost {
		b := setup(t)
		var fresh []string
		for i := range 100 {
			fresh = append(fresh, fmt.Sprintf("fresh-%03d", i))
		}
		b.enqueue(t, fresh...) // the head: the window reads exactly these
		var held []string
		for i := range others * 4 {
			held = append(held, fmt.Sprintf("held-%03d", i))
		}
		if len(held) > 0 {
			docs := make([]any, len(held))
			for i, u := range held { // behind the window
				docs[i] = bson.D{{Key: "username", Value: u}, {Key: "createdAt", Value: time.Now()}}
			}
			if _, err := b.colls.Queue.InsertMany(t.Context(), docs); err != nil {
				t.Fatal(err)
			}
			for i := range others {
				o, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{Owner: fmt.Sprintf("other-%d", i)}})
				if _, err := o.leases.acquire(t.Context(), held[i*4:i*4+4], bson.NewObjectID().Hex(), time.Now(), time.Minute); err != nil {
					t.Fatal(err)
				}
			}
		}
		if backoffs > 0 {
			docs := make([]any, backoffs)
			for i := range docs {
				docs[i] = leaseDoc{User: fmt.Sprintf("backing-off-%05d", i), LeaseUntil: time.Now().Add(time.Hour), Attempts: 1, LastError: "source down"}
			}
			if _, err := b.colls.Claims.InsertMany(t.Context(), docs); err != nil {
				t.Fatal(err)
			}
		}
		c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: 100, Owner: "measured"}})
		b.cmds.Reset()
		res, err := c.claimer.round(t.Context(), 20, AbsorbLimit, nil)
		if err != nil || len(res.works) != 20 {
			t.Fatalf("claim: %v, %d users won, want 20", err, len(res.works))
		}
		var got cost
		cmds := b.cmds.Take()
		got.cmds = mongotest.ByName(cmds)
		for _, c := range cmds {
			got.sent, got.received = got.sent+len(c.Body), got.received+len(c.Reply)
		}
		return got
	}
	backoffs := 10_000
	if raceEnabled {
		backoffs = 2_000
	}
	alone, crowded := measure(t, 0, 0), measure(t, 15, backoffs)
	t.Logf("alone: %v, %d B sent, %d B received; beside 15 replicas and %d backoffs: %v, %d B sent, %d B received",
		alone.cmds, alone.sent, alone.received, backoffs, crowded.cmds, crowded.sent, crowded.received)
	if !maps.Equal(alone.cmds, crowded.cmds) {
		t.Errorf("commands alone %v, in a crowd %v: want the same", alone.cmds, crowded.cmds)
	}
	for _, pair := range [][3]any{{"sent", alone.sent, crowded.sent}, {"received", alone.received, crowded.received}} {
		a, c := pair[1].(int), pair[2].(int)
		if float64(c) > 1.1*float64(a) {
			t.Errorf("bytes %s: %d alone, %d in a crowd: more than 10%% apart", pair[0], a, c)
		}
	}
}

// TestHugeUsernamesAtTheHeadAreMalformedNotCarried puts entries with 2 MiB
// usernames (and non-string ones) at the head: one claim round reports them
// malformed with the reason, claims the ordinary users behind them, and
// keeps no username longer than the limit (filtered on the server where it
// can, clipped while reading where it cannot).
func TestHugeUsernamesAtTheHeadAreMalformedNotCarried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	huge := strings.Repeat("h", 2<<20)
	if raceEnabled {
		huge = huge[:64<<10]
	}
	old := time.Now().Add(-time.Hour)
	for i, u := range []any{huge + "1", huge + "2", bson.A{"a", "b"}, 42, nil} {
		if _, err := b.colls.Queue.InsertOne(t.Context(), bson.D{{Key: "_id", Value: fmt.Sprintf("hostile-%d", i)}, {Key: "username", Value: u}, {Key: "createdAt", Value: old}}); err != nil {
			t.Fatal(err)
		}
	}
	b.enqueue(t, "alice", "bob")
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.works) != 2 {
		t.Errorf("won %d users, want alice and bob", len(res.works))
	}
	if len(res.malformed) != 5 {
		t.Fatalf("malformed: %v, want the 5 hostile entries", res.malformed)
	}
	for _, m := range res.malformed {
		if len(m.Detail) > 200 || m.Detail == "" {
			t.Errorf("malformed %v: detail %.200q", m.ID, m.Detail)
		}
	}
}

// TestClaimPagesPastAHeadOfBlockedUsers queues 1,100 users backing off
// ahead of 5 fresh ones, with a window of 100: more blocked users than a
// replica remembers (maxSkipUsers). Rounds page past them instead of reading
// the same blocked head forever, and the fresh users are claimed. In the
// second case every blocked entry has the same createdAt (a producer that
// stamps a batch with one time): a page that resumed at that time read the
// same 100 entries again, forever.
func TestClaimPagesPastAHeadOfBlockedUsers(t *testing.T) {
	if raceEnabled {
		t.Skip("seeds 2,200 documents: run without -race")
	}
	t.Parallel()
	for _, oneTime := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharing one createdAt=%v", oneTime), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var blocked, backoffs []any
			at := time.Now().Add(-time.Minute)
			for i := range 1100 {
				u := fmt.Sprintf("failing-%04d", i)
				if !oneTime {
					at = at.Add(time.Millisecond)
				}
				blocked = append(blocked, bson.D{{Key: "username", Value: u}, {Key: "createdAt", Value: at}})
				backoffs = append(backoffs, leaseDoc{User: u, LeaseUntil: time.Now().Add(time.Hour), Attempts: 1})
			}
			for i := range 5 {
				blocked = append(blocked, bson.D{{Key: "username", Value: fmt.Sprintf("fresh-%d", i)}, {Key: "createdAt", Value: time.Now()}})
			}
			if _, err := b.colls.Queue.InsertMany(t.Context(), blocked); err != nil {
				t.Fatal(err)
			}
			if _, err := b.colls.Claims.InsertMany(t.Context(), backoffs); err != nil {
				t.Fatal(err)
			}
			c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: 100}})
			won, paged := 0, 0
			for round := 0; round < 30 && won < 5; round++ {
				res, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil)
				if err != nil {
					t.Fatal(err)
				}
				won += len(res.works)
				if res.paged {
					paged++
				}
				if len(c.claimer.skip) > maxSkipUsers {
					t.Fatalf("round %d remembers %d blocked users, more than %d", round, len(c.claimer.skip), maxSkipUsers)
				}
			}
			if won != 5 {
				t.Errorf("won %d fresh users in 30 rounds, want 5", won)
			}
			if paged == 0 {
				t.Errorf("no round paged past the blocked head")
			}
		})
	}
}

// TestSpreadKeepsTheOldestAndSpreadsTheRest: with more candidates than
// room, half the picks are the oldest candidates in order (none starves
// behind the hash), the rest differ between replicas, and every pick is
// among the oldest 2·room.
func TestSpreadKeepsTheOldestAndSpreadsTheRest(t *testing.T) {
	t.Parallel()
	var cands []string
	for i := range 100 {
		cands = append(cands, fmt.Sprintf("u%03d", i))
	}
	a, b := spread(cands, 10, "replica-a"), spread(cands, 10, "replica-b")
	if len(a) != 10 || len(b) != 10 {
		t.Fatalf("picked %d and %d, want 10", len(a), len(b))
	}
	for i := range 5 {
		if a[i] != cands[i] || b[i] != cands[i] {
			t.Errorf("pick %d: %s and %s, want the oldest %s", i, a[i], b[i], cands[i])
		}
	}
	for _, p := range append(slices.Clone(a), b...) {
		if !slices.Contains(cands[:20], p) {
			t.Errorf("%s is not among the oldest 20", p)
		}
	}
	if slices.Equal(a[5:], b[5:]) {
		t.Errorf("two replicas picked the same hashed half %v", a[5:])
	}
}
