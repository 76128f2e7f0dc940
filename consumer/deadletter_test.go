package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

const mib = 1 << 20

// setupUntimed is setup on a client without the suite's 30-second operation
// timeout: the embedded server takes seconds per megabyte (a 16 MiB insert
// or delete takes it 5 to 10 s on a busy machine), so a test moving tens of
// megabytes would see timeouts that say nothing about the consumer.
func setupUntimed(t *testing.T) *testBundle {
	t.Helper()
	cmds := &mongotest.Commands{}
	db := untimedDB(t, cmds.Monitor(nil))
	b := &testBundle{db: db, cmds: cmds, colls: Collections{
		Queue:      db.Collection("score_events"),
		Claims:     db.Collection("score_claims"),
		DeadLetter: db.Collection("score_events_dead"),
	}}
	if _, err := EnsureIndexes(t.Context(), b.colls, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	return b
}

func untimedDB(t *testing.T, monitor *event.CommandMonitor) *mongo.Database {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI(t)).SetMonitor(monitor))
	if err != nil {
		t.Fatal(err)
	}
	db := client.Database(mongotest.DatabaseName(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	return db
}

// waitLong is waitFor with room for the embedded server's slowness with
// documents of several megabytes; it still catches a wedge.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// insertEach inserts docs one command each (several are megabytes).
func insertEach(t *testing.T, coll *mongo.Collection, docs ...bson.D) {
	t.Helper()
	for _, d := range docs {
		if _, err := coll.InsertOne(t.Context(), d); err != nil {
			t.Fatalf("inserting %v: %v", d[0].Value, err)
		}
	}
}

// bsonSize is the size of doc as stored.
func bsonSize(t *testing.T, doc bson.D) int {
	t.Helper()
	raw, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return len(raw)
}

func deadLetterOf(t *testing.T, b *testBundle, id any) (bson.Raw, DeadLetterInfo) {
	t.Helper()
	var raw bson.Raw
	if err := b.colls.DeadLetter.FindOne(t.Context(), bson.D{{Key: "_id", Value: id}}).Decode(&raw); err != nil {
		t.Fatalf("dead letter %.40v: %v", id, err)
	}
	var dl struct {
		V DeadLetterInfo `bson:"deadLetter"`
	}
	if err := bson.Unmarshal(raw, &dl); err != nil {
		t.Fatal(err)
	}
	return raw, dl.V
}

// TestHostileHeadDrains: a queue whose head holds hostile entries (a document
// just under 16 MiB and one of 15.9 MiB with no username, usernames of 3 to
// 8 MiB, usernames that are arrays, numbers, null, a document, empty) in
// front of 240 ordinary entries. Everything drains: each hostile entry is
// dead-lettered with the right reason, each ordinary user refreshed and
// acknowledged.
//
// Not parallel: it moves ~50 MB through the embedded server, which takes it
// minutes; sharing the server with other such tests would only slow all.
func TestHostileHeadDrains(t *testing.T) {
	if testing.Short() || raceEnabled { // multi-MiB documents: minutes under the detector, and no goroutines of their own to check
		t.Skip("moves ~50 MB through the embedded server")
	}
	b := setupUntimed(t)
	head := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	hostile := []struct {
		id     string
		fields bson.D
		reason string
	}{
		{"no-username-16m", bson.D{{Key: "payload", Value: strings.Repeat("p", 16*mib-512)}}, metrics.ReasonTooLarge},
		{"no-username-15.9m", bson.D{{Key: "payload", Value: strings.Repeat("q", 159*mib/10)}}, metrics.ReasonMalformed},
		{"username-3m", bson.D{{Key: "username", Value: strings.Repeat("a", 3*mib)}}, metrics.ReasonMalformed},
		{"username-5m", bson.D{{Key: "username", Value: strings.Repeat("b", 5*mib)}}, metrics.ReasonMalformed},
		{"username-8m", bson.D{{Key: "username", Value: strings.Repeat("c", 8*mib)}}, metrics.ReasonMalformed},
		{"username-array", bson.D{{Key: "username", Value: bson.A{"alice", "bob"}}}, metrics.ReasonMalformed},
		{"username-number", bson.D{{Key: "username", Value: 42}}, metrics.ReasonMalformed},
		{"username-null", bson.D{{Key: "username", Value: nil}}, metrics.ReasonMalformed},
		{"username-double", bson.D{{Key: "username", Value: 3.5}}, metrics.ReasonMalformed},
		{"username-document", bson.D{{Key: "username", Value: bson.D{{Key: "name", Value: "carol"}}}}, metrics.ReasonMalformed},
		{"username-empty", bson.D{{Key: "username", Value: ""}}, metrics.ReasonMalformed},
	}
	sizes := map[string]int{}
	for i, h := range hostile {
		doc := append(bson.D{{Key: "_id", Value: h.id}, {Key: "createdAt", Value: head.Add(time.Duration(i) * time.Millisecond)}}, h.fields...)
		sizes[h.id] = bsonSize(t, doc)
		insertEach(t, b.colls.Queue, doc)
	}
	var users []string
	for i := range 240 {
		users = append(users, fmt.Sprintf("user-%02d", i%80))
	}
	b.enqueue(t, users...)

	rec := newRecorder(nil)
	c, m := b.newConsumer(t, rec, consumerOpts{})
	stop := start(t, c)
	// Metrics, not counts: counting the queue makes the embedded server
	// read every document of it, megabytes each.
	began := time.Now()
	waitLong(t, "every entry to be acknowledged or dead-lettered", func() bool {
		moved := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)) +
			testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonTooLarge))
		return testutil.ToFloat64(m.EntriesAcked) == 240 && moved == float64(len(hostile))
	})
	t.Logf("drained in %v", time.Since(began))
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
	if n := b.count(t, b.colls.Claims, nil); n != 0 {
		t.Errorf("%d leases left", n)
	}
	for _, h := range hostile {
		raw, v := deadLetterOf(t, b, h.id)
		if v.Reason != h.reason {
			t.Errorf("%s: deadLetter.reason = %q, want %q", h.id, v.Reason, h.reason)
		}
		if h.reason == metrics.ReasonTooLarge {
			if v.OriginalSize != int64(sizes[h.id]) || v.OriginalReason != metrics.ReasonMalformed || len(raw) > 64<<10 {
				t.Errorf("%s: reduced form %d bytes, originalSize %d (want %d), originalReason %q", h.id, len(raw), v.OriginalSize, sizes[h.id], v.OriginalReason)
			}
		} else if len(raw) < sizes[h.id] {
			t.Errorf("%s: dead letter is %d bytes, smaller than the %d-byte original: not stored whole", h.id, len(raw), sizes[h.id])
		}
	}
	for i := range 80 {
		if u := fmt.Sprintf("user-%02d", i); rec.callsOf(u) != 1 {
			t.Errorf("refreshes of %s = %d, want 1", u, rec.callsOf(u))
		}
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != 240 {
		t.Errorf("acked = %v, want 240", got)
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)); got != float64(len(hostile)-1) {
		t.Errorf("dead-lettered malformed = %v, want %d", got, len(hostile)-1)
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonTooLarge)); got != 1 {
		t.Errorf("dead-lettered too_large = %v, want 1", got)
	}
}

// TestTooLargeDeadLetterIsStoredReduced: an entry that cannot be stored
// whole with its deadLetter subdocument is kept as _id, createdAt, the first
// KiB of each string field and its size, with reason too_large, and deleted
// from the queue; the other users are acknowledged all the same. Not
// parallel, like TestHostileHeadDrains.
func TestTooLargeDeadLetterIsStoredReduced(t *testing.T) {
	if testing.Short() || raceEnabled { // multi-MiB documents: minutes under the detector, and no goroutines of their own to check
		t.Skip("moves a 16 MiB document through the embedded server")
	}
	b := setupUntimed(t)
	created := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	note := strings.Repeat("é", 600) // 1,200 bytes of two-byte characters
	bad := bson.D{
		{Key: "_id", Value: "huge"}, {Key: "username", Value: 7}, {Key: "createdAt", Value: created},
		{Key: "note", Value: note}, {Key: "n", Value: 5}, {Key: "payload", Value: strings.Repeat("x", 16*mib-300)},
	}
	insertEach(t, b.colls.Queue, bad)
	b.enqueue(t, "alice", "bob", "alice")
	c, m := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	stop := start(t, c)
	waitLong(t, "the entries to be acknowledged and dead-lettered", func() bool {
		return testutil.ToFloat64(m.EntriesAcked) == 3 && testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonTooLarge)) == 1
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}

	raw, v := deadLetterOf(t, b, "huge")
	want := DeadLetterInfo{Reason: metrics.ReasonTooLarge, OriginalReason: metrics.ReasonMalformed, OriginalSize: int64(bsonSize(t, bad))}
	if v.Reason != want.Reason || v.OriginalReason != want.OriginalReason || v.OriginalSize != want.OriginalSize || v.Error == "" {
		t.Errorf("deadLetter = %+v, want %+v and an error", v, want)
	}
	var kept struct {
		CreatedAt time.Time `bson:"createdAt"`
		Note      string    `bson:"note"`
		Payload   string    `bson:"payload"`
	}
	if err := bson.Unmarshal(raw, &kept); err != nil {
		t.Fatal(err)
	}
	if !kept.CreatedAt.Equal(created) || kept.Note != note[:1024] || !utf8.ValidString(kept.Note) || kept.Payload != strings.Repeat("x", 1024) {
		t.Errorf("kept createdAt %v (want %v), note %d bytes, payload %d bytes: want the first KiB of each", kept.CreatedAt, created, len(kept.Note), len(kept.Payload))
	}
	for _, field := range []string{"username", "n"} {
		if _, err := raw.LookupErr(field); err == nil {
			t.Errorf("reduced dead letter keeps the non-string field %q", field)
		}
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)); got != 0 {
		t.Errorf("dead-lettered malformed = %v, want 0 (it counts as too_large)", got)
	}
}

// TestUnwritableDeadLetterHoldsBackNothing: in one flush, two dead letters
// that cannot be stored (a unique index of the operator's refuses one, the
// other's _id alone is too large to store even reduced) next to a malformed
// entry that can, an exhausted user whose copy is refused and two
// acknowledged users. The flush settles in one attempt: the good entry is
// moved, the users are acknowledged, the failing entries stay in the queue
// and the exhausted user backs off; the refused malformed entries are not
// retried before their backoff.
func TestUnwritableDeadLetterHoldsBackNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	if _, err := b.colls.DeadLetter.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "ticket", Value: 1}}, Options: options.Index().SetUnique(true)}); err != nil {
		t.Fatal(err)
	}
	insertEach(t, b.colls.DeadLetter, bson.D{{Key: "_id", Value: "earlier"}, {Key: "ticket", Value: "T-1"}})
	old := time.Now().Add(-time.Hour)
	hugeID := strings.Repeat("i", 100<<10) // more than the copy limit below, even reduced
	insertEach(t, b.colls.Queue,
		bson.D{{Key: "_id", Value: "m-good"}, {Key: "username", Value: 1}, {Key: "createdAt", Value: old}, {Key: "ticket", Value: "T-2"}},
		bson.D{{Key: "_id", Value: "m-refused"}, {Key: "username", Value: 2}, {Key: "createdAt", Value: old}, {Key: "ticket", Value: "T-1"}},
		bson.D{{Key: "_id", Value: hugeID}, {Key: "username", Value: 3}, {Key: "createdAt", Value: old}, {Key: "ticket", Value: "T-3"}},
		bson.D{{Key: "_id", Value: "p-1"}, {Key: "username", Value: "poison"}, {Key: "createdAt", Value: old}, {Key: "ticket", Value: "T-1"}},
	)
	b.enqueue(t, "alice", "bob")

	// A clock that stands still: the failed entries' backoff cannot run out
	// before the end of the test, however slow the server.
	c, m := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{MaxAttempts: 1}, serverTime: fixedClock{time.Now()}})
	c.dead.letters.maxCopy = 64 << 10 // as 16 MiB would, with small documents
	res, err := c.claimer.round(ctx, 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 3 || len(res.malformed) != 3 {
		t.Fatalf("claim: %v, %d users, %d malformed; want alice, bob, poison and 3 malformed", err, len(res.works), len(res.malformed))
	}
	var mu sync.Mutex
	var attempts []error
	var settled []string
	c.acks.afterFlush = func(err error) { mu.Lock(); attempts = append(attempts, err); mu.Unlock() }
	onSettled := c.acks.onSettled
	record := func(ls []lease) {
		mu.Lock()
		for _, l := range ls {
			settled = append(settled, l.User)
		}
		mu.Unlock()
		onSettled(ls)
	}
	c.acks.onSettled, c.dead.onSettled = record, record
	for _, w := range res.works {
		c.held[w.lease.User] = w.lease
		o := outcome{work: w}
		if w.lease.User == "poison" {
			o.err = errors.New("scorer bug")
		}
		c.acks.add(o)
	}
	c.dead.addMalformed(res.malformed)
	if err := c.flushAll(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}

	if len(attempts) != 1 || attempts[0] != nil {
		t.Errorf("acknowledgement flush attempts %v, want one that succeeded", attempts)
	}
	if len(settled) != 3 {
		t.Errorf("settled users %v, want alice, bob and poison", settled)
	}
	if n := b.count(t, b.colls.Queue, bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: bson.A{"alice", "bob"}}}}}); n != 0 {
		t.Errorf("%d entries of alice and bob left: acknowledgements were held back", n)
	}
	if n := b.count(t, b.colls.DeadLetter, bson.D{{Key: "_id", Value: "m-good"}}); n != 1 {
		t.Errorf("the writable dead letter was held back by the others")
	}
	for _, id := range []any{"m-refused", hugeID, "p-1"} {
		if n := b.count(t, b.colls.Queue, bson.D{{Key: "_id", Value: id}}); n != 1 {
			t.Errorf("entry %.20s… is gone from the queue although it has no dead letter", id)
		}
	}
	var poison leaseDoc
	if err := b.colls.Claims.FindOne(ctx, bson.D{{Key: "_id", Value: "poison"}}).Decode(&poison); err != nil {
		t.Fatalf("poison's lease: %v", err)
	}
	if poison.Token != nil || poison.LastError != "dead-lettering failed; postponed" {
		t.Errorf("poison's lease %+v, want backing off (no token) for its dead letter", poison)
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)); got != 1 {
		t.Errorf("dead-lettered malformed = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.AckFlushErrors); got != 1 {
		t.Errorf("ack flush errors = %v, want 1: the failed dead letters, tried once, not retried with their flush", got)
	}
	// The failed malformed entries wait out their backoff: seen again by a
	// claim round right now, they are not flushed again.
	var again []malformed
	for _, bad := range res.malformed {
		if IDKey(bad.ID) != IDKey("m-good") {
			again = append(again, bad)
		}
	}
	c.dead.addMalformed(again)
	if n := c.dead.pending(); n != 0 {
		t.Errorf("%d pending after re-reporting the failed entries, want 0: they back off", n)
	}
}

// TestDeadLetterRoundTrips counts the commands of dead-lettering 1 and 30
// ordinary entries: three (read, insert, delete) on a server that bounds its
// replies (MongoDB), whatever the count; on FerretDB one read per entry,
// each by _id. The server is asked which it is once.
// boundingTraits are a MongoDB's traits (bounded replies) or FerretDB's.
func boundingTraits(bounded bool) *servertraits.Traits {
	if bounded {
		return servertraits.Fixed(servertraits.Info{Version: "7.0.0"})
	}
	return servertraits.Fixed(servertraits.Info{Version: "7.0.0", FerretDB: "v1.24.2"})
}

func TestDeadLetterRoundTrips(t *testing.T) {
	t.Parallel()
	for _, bounded := range []bool{true, false} {
		for _, n := range []int{1, 30} {
			t.Run(fmt.Sprintf("bounded_%v_%d", bounded, n), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				batch := seedMalformed(t, b, n)
				d := &deadLetterer{queue: b.colls.Queue, dead: b.colls.DeadLetter, traits: boundingTraits(bounded)}
				b.cmds.Reset()
				counts, failed, err := d.move(t.Context(), batch, time.Now())
				if err != nil || len(failed) != 0 || counts[metrics.ReasonMalformed] != n {
					t.Fatalf("move: %v, %d failed, counts %v", err, len(failed), counts)
				}
				want := map[string]int{"find": 1, "insert": 1, "delete": 1}
				if !bounded {
					want["find"] = n
				}
				if got := mongotest.ByName(b.cmds.Take()); !maps.Equal(got, want) {
					t.Errorf("commands %v, want %v", got, want)
				}
				if left := b.count(t, b.colls.Queue, nil); left != 0 {
					t.Errorf("%d entries left in the queue", left)
				}
			})
		}
	}
	t.Run("asks once", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := &deadLetterer{queue: b.colls.Queue, dead: b.colls.DeadLetter, traits: servertraits.New()}
		for round := range 2 {
			batch := seedMalformed(t, b, 2)
			b.cmds.Reset()
			if _, _, err := d.move(t.Context(), batch, time.Now()); err != nil {
				t.Fatal(err)
			}
			if got, want := mongotest.ByName(b.cmds.Take())["buildInfo"], 1-round; got != want {
				t.Errorf("round %d: %d buildInfo commands, want %d", round, got, want)
			}
		}
	})
}

// TestAckFlushWithDeadLettersRoundTrips: an ordinary flush of three
// acknowledged users and two malformed entries costs the ack's two deletes
// plus the dead letters' read, insert and delete.
func TestAckFlushWithDeadLettersRoundTrips(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "u1", "u2", "u3")
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	c.dead.letters.traits = boundingTraits(true)
	res, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 3 {
		t.Fatalf("claim: %v", err)
	}
	batch := seedMalformed(t, b, 2)
	for _, w := range res.works {
		c.held[w.lease.User] = w.lease
		c.acks.add(outcome{work: w})
	}
	for _, d := range batch {
		c.dead.addMalformed([]malformed{{ID: d.ID, Detail: d.Detail}})
	}
	b.cmds.Reset()
	if err := c.flushAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"delete": 3, "find": 1, "insert": 1}
	if got := mongotest.ByName(b.cmds.Take()); !maps.Equal(got, want) {
		t.Errorf("flush commands %v, want %v", got, want)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 0 {
		t.Errorf("%d entries left", n)
	}
}

func seedMalformed(t *testing.T, b *testBundle, n int) []deadLetter {
	t.Helper()
	docs := make([]any, n)
	batch := make([]deadLetter, n)
	for i := range n {
		id := bson.NewObjectID()
		docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "username", Value: i}, {Key: "createdAt", Value: time.Now()}}
		batch[i] = deadLetter{ID: id, Reason: metrics.ReasonMalformed, Detail: "username is a int32, not a string"}
	}
	if _, err := b.colls.Queue.InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
	return batch
}

// TestDeadLetterCommandsAndRepliesStayBounded moves 20 MiB of dead letters
// (five of 4 MiB, and small ones): no reply carries more than one of them,
// no insert more than 16 MiB, and nothing fails.
func TestDeadLetterCommandsAndRepliesStayBounded(t *testing.T) {
	if testing.Short() || raceEnabled { // multi-MiB documents: minutes under the detector, and no goroutines of their own to check
		t.Skip("moves 20 MiB through the embedded server")
	}
	t.Parallel()
	cmds := &mongotest.Commands{}
	db := untimedDB(t, cmds.Monitor(nil))
	queue, dead := db.Collection("score_events"), db.Collection("score_events_dead")
	var batch []deadLetter
	for i := range 10 {
		id := fmt.Sprintf("e%d", i)
		doc := bson.D{{Key: "_id", Value: id}, {Key: "createdAt", Value: time.Now()}}
		if i < 5 {
			doc = append(doc, bson.E{Key: "payload", Value: strings.Repeat("z", 4*mib)})
		}
		if _, err := queue.InsertOne(t.Context(), doc); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, deadLetter{ID: id, Reason: metrics.ReasonMalformed, Detail: "username is missing"})
	}
	d := &deadLetterer{queue: queue, dead: dead, traits: servertraits.New()}
	cmds.Reset()
	counts, failed, err := d.move(t.Context(), batch, time.Now())
	if err != nil || len(failed) != 0 || counts[metrics.ReasonMalformed] != 10 {
		t.Fatalf("move: %v, %d failed, counts %v", err, len(failed), counts)
	}
	inserts := cmds.Count("insert", "score_events_dead")
	largest := map[string]int{} // of each command name: command and reply sizes
	var failures []string
	for _, c := range cmds.Take() {
		largest[c.Name] = max(largest[c.Name], len(c.Body))
		largest[c.Name+" reply"] = max(largest[c.Name+" reply"], len(c.Reply))
		if c.Failed {
			failures = append(failures, c.Name)
		}
	}
	if len(failures) != 0 {
		t.Errorf("failed commands: %v", failures)
	}
	if r := largest["find reply"]; r > 4*mib+64<<10 {
		t.Errorf("largest find reply %d bytes: more than one 4 MiB entry in a reply", r)
	}
	if c := largest["insert"]; c > insertBatchBytes+64<<10 {
		t.Errorf("largest insert command %d bytes, more than %d", c, insertBatchBytes)
	}
	if inserts != 2 {
		t.Errorf("%d insert commands for 20 MiB of dead letters, want 2", inserts)
	}
}

// TestReducedDeadLetterRerun: a too_large entry whose move is run again (the
// queue delete was lost) is recognised as already stored, not copied twice;
// a different, too_large entry reusing its _id gets a copy of its own; a
// user's entry out of attempts keeps its reason as originalReason. The copy
// limit is lowered so that 100 KiB documents stand for 16 MiB ones.
func TestReducedDeadLetterRerun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := func(fill string) bson.D {
		return bson.D{{Key: "_id", Value: "big"}, {Key: "createdAt", Value: time.Now().Truncate(time.Millisecond)}, {Key: "payload", Value: strings.Repeat(fill, 100<<10)}}
	}
	first := big("a")
	d := &deadLetterer{queue: b.colls.Queue, dead: b.colls.DeadLetter, maxCopy: 64 << 10, traits: servertraits.New()}
	move := func(batch ...deadLetter) map[string]int {
		t.Helper()
		counts, failed, err := d.move(t.Context(), batch, time.Now())
		if err != nil || len(failed) != 0 {
			t.Fatalf("move: %v, %d failed", err, len(failed))
		}
		return counts
	}
	malformedBig := deadLetter{ID: "big", Reason: metrics.ReasonMalformed, Detail: "username is missing"}
	insertEach(t, b.colls.Queue, first)
	if got := move(malformedBig); got[metrics.ReasonTooLarge] != 1 {
		t.Fatalf("first move counted %v, want one too_large", got)
	}
	insertEach(t, b.colls.Queue, first) // as if the delete had never happened
	if got := move(malformedBig); len(got) != 0 {
		t.Errorf("re-run counted %v, want nothing new", got)
	}
	if n := b.count(t, b.colls.DeadLetter, nil); n != 1 {
		t.Errorf("%d dead letters after the re-run, want 1", n)
	}
	insertEach(t, b.colls.Queue, big("b"))
	if got := move(malformedBig); got[metrics.ReasonTooLarge] != 1 {
		t.Errorf("a different entry under the same _id counted %v, want one too_large", got)
	}
	if n := b.count(t, b.colls.DeadLetter, bson.D{{Key: "deadLetter.originalId", Value: "big"}, {Key: "payload", Value: strings.Repeat("b", 1024)}}); n != 1 {
		t.Errorf("the second entry has %d copies under a fresh _id, want 1", n)
	}

	insertEach(t, b.colls.Queue, bson.D{{Key: "_id", Value: "heavy-1"}, {Key: "username", Value: "heavy"}, {Key: "payload", Value: strings.Repeat("h", 100<<10)}})
	move(deadLetter{ID: "heavy-1", Reason: metrics.ReasonMaxAttempts, Detail: "scorer failed", Attempts: 5, User: "heavy"})
	raw, v := deadLetterOf(t, b, "heavy-1")
	if v.Reason != metrics.ReasonTooLarge || v.OriginalReason != metrics.ReasonMaxAttempts || v.Attempts != 5 {
		t.Errorf("heavy's deadLetter = %+v, want too_large after max_attempts, 5 attempts", v)
	}
	if u, err := raw.LookupErr("username"); err != nil || u.StringValue() != "heavy" {
		t.Errorf("reduced dead letter lost the username: %v", u)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
}

func TestPrefixCutsOnCharacters(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is two bytes: not cut in half
		{"€€", 4, "€"},
		{"\xff\xff\xff\xff\xff", 2, "\xff\xff"}, // not UTF-8: cut at n
	} {
		if got := prefix(c.s, c.n); got != c.want {
			t.Errorf("prefix(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestTruncateKeepsCharactersWhole(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("é", 600) // 2 bytes each
	got := truncate(s, 1023)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > 1023+len("…") {
		t.Errorf("truncate to 1023 bytes = %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
	if truncate("short", 1024) != "short" {
		t.Error("a short string was changed")
	}
}
