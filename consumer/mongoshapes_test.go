package consumer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// forceMongoDB gives c MongoDB's traits, as if the server had answered as
// one: single-document lease statements, the username regex and the
// malformed scan, dead letters read in one reply.
func forceMongoDB(c *Consumer) {
	tr := servertraits.Fixed(servertraits.Info{Version: "7.0.0"})
	c.traits, c.leases.traits, c.claimer.traits, c.dead.letters.traits = tr, tr, tr, tr
	filter := true
	c.claimer.filter = &filter
}

// writeShape is what one kind of write statement must look like on MongoDB.
type writeShape struct {
	name      string
	cmd, coll string                 // the command and collection it is sent as
	match     func(st bson.Raw) bool // which statements (or documents) of it are this kind
	multi     bool                   // multi-document (one statement for many users) rather than updateOne/limit 1
	most      int                    // most statements (or documents) one command carries
	check     func(t *testing.T, st bson.Raw)
}

// TestMongoModeWriteShapes pins the lease, ack and dead-letter writes the
// claim path sends with MongoDB's traits (the scenario of
// TestHotQueryShapes): each statement constrains the _id index's only
// field (a plain _id, or an $in of the held users bounded by the room),
// single-document statements stay single-document (retryable on MongoDB),
// a hint names its index, and every command's statements are bounded by
// the room, the window or a constant, never by the queue.
func TestMongoModeWriteShapes(t *testing.T) {
	if raceEnabled {
		t.Skip("a query-shape test with a large seed: run without -race")
	}
	t.Parallel()
	s := newHotScenario(t)
	forceMongoDB(s.c)
	r := s.run(t, nil)
	all := concat(r.round, r.takeover, r.hold, r.settle, r.targeted)
	plainID := func(t *testing.T, st bson.Raw) {
		t.Helper()
		if _, ok := st.Lookup("q", "_id").StringValueOK(); !ok {
			t.Errorf("statement %s: q._id is not one user", st)
		}
	}
	heldIn := func(t *testing.T, st bson.Raw) {
		t.Helper()
		if n := len(list(st.Lookup("q", "_id", "$in"))); n == 0 || n > explainRoom {
			t.Errorf("statement %s: q._id.$in of %d users, want 1 to the room (%d)", st, n, explainRoom)
		}
		if _, err := st.LookupErr("q", "token"); err != nil {
			t.Errorf("statement %s is not fenced by the token", st)
		}
	}
	hasSet := func(field string) func(bson.Raw) bool {
		return func(st bson.Raw) bool { _, err := st.LookupErr("u", "$set", field); return err == nil }
	}
	shapes := []writeShape{
		{name: "lease insert", cmd: "insert", coll: "score_claims", most: explainRoom, check: func(t *testing.T, doc bson.Raw) {
			if _, ok := doc.Lookup("_id").StringValueOK(); !ok {
				t.Errorf("lease %s: _id is not the username", doc)
			}
		}},
		{name: "lease takeover", cmd: "update", coll: "score_claims", match: hasSet("claimedAt"), most: explainRoom, check: func(t *testing.T, st bson.Raw) {
			plainID(t, st)
			if _, err := st.LookupErr("q", "leaseUntil"); err != nil {
				t.Errorf("takeover %s does not require the lease expired", st)
			}
		}},
		{name: "lease renewal", cmd: "update", coll: "score_claims", match: func(st bson.Raw) bool {
			_, err := st.LookupErr("q", "_id", "$in")
			return err == nil && hasSet("leaseUntil")(st)
		}, multi: true, most: 1, check: heldIn},
		{name: "running mark", cmd: "update", coll: "score_claims", match: func(st bson.Raw) bool {
			return st.Lookup("u", "$set", "running").Type == bson.TypeString // not a takeover's or backoff's null
		}, most: explainRoom, check: plainID},
		{name: "backoff", cmd: "update", coll: "score_claims", match: func(st bson.Raw) bool {
			return st.Lookup("u", "$set", "token").Type == bson.TypeNull
		}, most: explainRoom, check: plainID},
		{name: "lease release", cmd: "delete", coll: "score_claims", multi: true, most: 1, check: heldIn},
		// One statement per entry up to maxIDStatements, $in lists past it.
		{name: "ack", cmd: "delete", coll: "score_events", most: maxIDStatements, check: func(t *testing.T, st bson.Raw) {
			if _, err := st.LookupErr("q", "_id"); err != nil {
				t.Errorf("ack %s does not name its entry's _id", st)
			}
			if h, err := st.LookupErr("hint"); err == nil && h.Type != bson.TypeString {
				t.Errorf("ack %s hints by key pattern, not by name", st)
			}
		}},
		{name: "dead letter", cmd: "insert", coll: "score_events_dead", most: malformedScanLimit, check: func(t *testing.T, doc bson.Raw) {
			if _, err := doc.LookupErr("_id"); err != nil {
				t.Errorf("dead letter %s has no _id", doc)
			}
			if reason, _ := doc.Lookup("deadLetter", "reason").StringValueOK(); reason == "" {
				t.Errorf("dead letter %s has no reason", doc)
			}
		}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			key := map[string]string{"insert": "documents", "update": "updates", "delete": "deletes"}[sh.cmd]
			seen := 0
			for _, c := range all {
				if c.Name != sh.cmd || c.Collection != sh.coll {
					continue
				}
				n := 0
				for _, v := range list(c.Body.Lookup(key)) {
					st := v.Document()
					if sh.match != nil && !sh.match(st) {
						continue
					}
					n++
					sh.check(t, st)
					if sh.cmd == "insert" {
						continue
					}
					multi := st.Lookup("multi").Type == bson.TypeBoolean && st.Lookup("multi").Boolean()
					if sh.cmd == "delete" {
						limit, _ := st.Lookup("limit").AsInt64OK()
						multi = limit == 0
					}
					if multi != sh.multi {
						t.Errorf("statement %s: multi-document %v, want %v (MongoDB's traits)", st, multi, sh.multi)
					}
				}
				if n > sh.most {
					t.Errorf("one %s command carries %d %s statements, want at most %d", sh.cmd, n, sh.name, sh.most)
				}
				seen += n
			}
			if seen == 0 {
				t.Errorf("no %s sent: the scenario does not cover it", sh.name)
			}
		})
	}
	// The dead letters' originals are read by _id, in one reply that closes
	// its cursor (MongoDB bounds the reply itself: servertraits.BoundsReplies).
	read := one(t, r.settle, "dead-letter read", func(c queryplan.Command) bool {
		return c.Name == "find" && c.Collection == "score_events" && hasField(filterOf(c.Body), "_id", "$in")
	})
	ids := len(list(filterOf(read.Body).Lookup("_id", "$in")))
	if ids != len(r.res.malformed) {
		t.Errorf("dead-letter read asks for %d entries, want the %d malformed", ids, len(r.res.malformed))
	}
	if n, _ := read.Body.Lookup("batchSize").AsInt64OK(); n <= int64(ids) {
		t.Errorf("dead-letter read batchSize %d: not more than its %d entries, so its cursor stays open", n, ids)
	}
}

// TestMongoModeCommandSizesOnLongUsernames: a window of usernames of the
// longest valid length (MaxUsernameBytes) keeps every command of a claim
// round and its settlement bounded by the window times that length, on
// MongoDB's path: the lease read, the absorb, the lease writes and acks.
func TestMongoModeCommandSizesOnLongUsernames(t *testing.T) {
	t.Parallel()
	const window, room = 24, 8
	rec := &queryplan.Recorder{}
	b := setup(t).watchedBy(t, rec.Monitor())
	var names []string
	for i := range window * 2 {
		names = append(names, fmt.Sprintf("%03d%s", i, strings.Repeat("u", MaxUsernameBytes-3)))
	}
	b.enqueue(t, names...)
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: window}})
	if err := c.claimer.detect(t.Context()); err != nil {
		t.Fatal(err)
	}
	forceMongoDB(c)
	rec.Take()
	res, err := c.claimer.round(t.Context(), room, AbsorbLimit, nil)
	if err != nil || len(res.works) != room {
		t.Fatalf("claim round: %v, %d users won, want %d", err, len(res.works), room)
	}
	held := make([]lease, len(res.works))
	for i, w := range res.works {
		held[i] = w.lease
		c.held[w.lease.User] = w.lease
	}
	if err := c.leases.mark(t.Context(), held...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.leases.renew(t.Context(), held, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, w := range res.works {
		c.acks.add(outcome{work: w})
	}
	if err := c.flushAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Each username once per statement or list element, with room for
	// the statement's own fields (an ObjectId, a token, dates).
	const perUser, fixed = MaxUsernameBytes + 160, 4096
	for _, cmd := range rec.Take() {
		if limit := window*perUser + fixed; len(cmd.Body) > limit {
			t.Errorf("%s on %s: %d bytes for a window of %d usernames of %d bytes, want at most %d", cmd.Name, cmd.Collection, len(cmd.Body), window, MaxUsernameBytes, limit)
		}
	}
}
