package consumer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
)

// fixedClock is a Clock a test sets by hand.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func TestMalformedEntriesAreDeadLetteredWithEveryField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	docs := map[string]bson.D{
		"missing username":   {{Key: "_id", Value: "m1"}, {Key: "createdAt", Value: now}, {Key: "payload", Value: bson.D{{Key: "k", Value: int64(7)}}}},
		"numeric username":   {{Key: "_id", Value: "m2"}, {Key: "username", Value: 42}, {Key: "createdAt", Value: now}},
		"empty username":     {{Key: "_id", Value: "m3"}, {Key: "username", Value: ""}, {Key: "createdAt", Value: now}},
		"257-byte username":  {{Key: "_id", Value: "m4"}, {Key: "username", Value: strings.Repeat("x", 257)}, {Key: "createdAt", Value: now}},
		"no date, string id": {{Key: "_id", Value: "m5"}, {Key: "username", Value: "dave"}},
		"createdAt a string": {{Key: "_id", Value: "m6"}, {Key: "username", Value: "erin"}, {Key: "createdAt", Value: "yesterday"}},
	}
	for _, d := range docs {
		if _, err := b.colls.Queue.InsertOne(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	// Valid entries around them, including one with no createdAt but an
	// ObjectId _id (its timestamp stands in) and a 256-byte username.
	long := strings.Repeat("y", 256)
	b.enqueue(t, "alice", long)
	if _, err := b.colls.Queue.InsertOne(t.Context(), bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "username", Value: "frank"}}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nil)
	c, m := b.newConsumer(t, rec, consumerOpts{})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, u := range []string{"alice", long, "frank"} {
		if rec.callsOf(u) != 1 {
			t.Errorf("refreshes of %.10s… = %d, want 1", u, rec.callsOf(u))
		}
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)); got != float64(len(docs)) {
		t.Errorf("dead-lettered malformed = %v, want %d", got, len(docs))
	}
	for name, orig := range docs {
		var got bson.Raw
		if err := b.colls.DeadLetter.FindOne(t.Context(), bson.D{{Key: "_id", Value: orig[0].Value}}).Decode(&got); err != nil {
			t.Errorf("%s: dead letter not found: %v", name, err)
			continue
		}
		for _, e := range orig {
			_, want, _ := bson.MarshalValue(e.Value)
			if v, err := got.LookupErr(e.Key); err != nil || !bytesEqual(v.Value, want) {
				t.Errorf("%s: field %q not preserved in the dead letter: %v", name, e.Key, v)
			}
		}
		var dl struct {
			DeadLetter struct {
				Reason string    `bson:"reason"`
				At     time.Time `bson:"at"`
				Error  string    `bson:"error"`
			} `bson:"deadLetter"`
		}
		if err := bson.Unmarshal(got, &dl); err != nil {
			t.Fatalf("%s: decoding dead letter: %v", name, err)
		}
		if dl.DeadLetter.Reason != "malformed" || dl.DeadLetter.Error == "" || dl.DeadLetter.At.IsZero() {
			t.Errorf("%s: deadLetter = %+v, want reason malformed, an error and a date", name, dl.DeadLetter)
		}
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func TestFailingUserIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "broken", "broken", "panicky", "fine")
	rec := newRecorder(func(ctx context.Context, user string, n int) error {
		switch user {
		case "broken":
			return errors.New("source collection unreadable")
		case "panicky":
			panic("scorer bug")
		}
		return nil
	})
	c, m := b.newConsumer(t, rec, consumerOpts{cfg: Config{MaxAttempts: 3}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for user, want := range map[string]int{"broken": 3, "panicky": 3, "fine": 1} {
		if got := rec.callsOf(user); got != want {
			t.Errorf("refreshes of %s = %d, want %d", user, got, want)
		}
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts)); got != 3 {
		t.Errorf("dead-lettered max_attempts = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.Refreshes.WithLabelValues(metrics.OutcomeError)); got != 6 {
		t.Errorf("failed refreshes = %v, want 6", got)
	}
	var dl struct {
		Username   string `bson:"username"`
		DeadLetter struct {
			Reason   string `bson:"reason"`
			Attempts int    `bson:"attempts"`
			Error    string `bson:"error"`
		} `bson:"deadLetter"`
	}
	if err := b.colls.DeadLetter.FindOne(t.Context(), bson.D{{Key: "username", Value: "panicky"}}).Decode(&dl); err != nil {
		t.Fatalf("panicky's dead letter: %v", err)
	}
	if dl.DeadLetter.Reason != "max_attempts" || dl.DeadLetter.Attempts != 3 || !strings.Contains(dl.DeadLetter.Error, "scorer bug") {
		t.Errorf("dead letter = %+v, want max_attempts after 3 attempts naming the panic", dl.DeadLetter)
	}
}

func TestExpiredLeaseIsTakenOverAfterCrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "alice", "bob", "alice")
	lease := 60 * time.Second
	crashed, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{LeaseDuration: lease}})
	// The crashed consumer claims and then vanishes: no refresh, no release.
	res, err := crashed.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 2 {
		t.Fatalf("claim by the doomed consumer: %v, %d users", err, len(res.works))
	}

	// Before the lease ends nobody else may take the users.
	early, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{LeaseDuration: lease}})
	res, err = early.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 0 {
		t.Fatalf("claim during a live lease won %d users (err %v), want 0", len(res.works), err)
	}

	rec := newRecorder(nil)
	later := fixedClock{time.Now().Add(lease + time.Second)}
	rescuer, m := b.newConsumer(t, rec, consumerOpts{serverTime: later, cfg: Config{LeaseDuration: lease}})
	stop := start(t, rescuer)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rec.callsOf("alice") != 1 || rec.callsOf("bob") != 1 {
		t.Errorf("rescued refreshes = %v, want one each", rec.calls)
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != 3 {
		t.Errorf("acked = %v, want 3", got)
	}
}

// TestTakeoverChargesOnlyTheRunningUser: a replica held two users and died
// while refreshing one of them. The takeover charges an attempt to the one
// that was running (it may be what killed the replica) and not to the one
// that was only waiting for a slot, so one poison user's crash loop does not
// dead-letter its neighbours.
func TestTakeoverChargesOnlyTheRunningUser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "alice", "bob")
	crashed, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := crashed.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 2 {
		t.Fatalf("claim by the doomed consumer: %v, %d users", err, len(res.works))
	}
	for _, w := range res.works {
		if w.lease.User == "alice" {
			if err := crashed.leases.mark(t.Context(), w.lease); err != nil {
				t.Fatal(err)
			}
		}
	}
	// carol's running mark was left by an earlier holder (a release that
	// does not know the field took the lease over and kept it): its token
	// is not the current holder's, so it does not count.
	b.enqueue(t, "carol")
	if _, err := b.colls.Claims.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "carol"}, {Key: "token", Value: "t2"},
		{Key: "running", Value: "t1"}, {Key: "attempts", Value: 0}, {Key: "leaseUntil", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	later := fixedClock{time.Now().Add(2 * time.Minute)}
	rescuer, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{serverTime: later})
	res, err = rescuer.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 3 {
		t.Fatalf("takeover: %v, %d users", err, len(res.works))
	}
	for _, w := range res.works {
		want := map[string]int{"alice": 1, "bob": 0, "carol": 0}[w.lease.User]
		if w.lease.Attempts != want {
			t.Errorf("%s: attempts after the takeover = %d, want %d", w.lease.User, w.lease.Attempts, want)
		}
	}
}

func TestShutdownFinishesRunningAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "u1", "u2", "u3", "u4")
	inRefresh := make(chan string, 4)
	proceed := make(chan struct{})
	rec := newRecorder(func(ctx context.Context, user string, n int) error {
		inRefresh <- user
		<-proceed
		return nil
	})
	// One refresh slot: one user runs, three wait holding leases.
	c, m := b.newConsumer(t, rec, consumerOpts{limit: 1, cfg: Config{MaxUsersInFlight: 4}})
	cancel, wait := startCancel(t, c)
	running := <-inRefresh
	waitFor(t, "all four users claimed", func() bool { return testutil.ToFloat64(m.UsersInFlight) == 4 })
	cancel()
	close(proceed) // the running refresh finishes during the shutdown window
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := b.count(t, b.colls.Claims, nil); n != 0 {
		t.Errorf("%d leases left after shutdown, want 0", n)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 3 {
		t.Errorf("queue holds %d entries, want the 3 never refreshed", n)
	}
	if n := b.count(t, b.colls.Queue, bson.D{{Key: "username", Value: running}}); n != 0 {
		t.Errorf("the refresh running at shutdown was not acknowledged")
	}
	if got := testutil.ToFloat64(m.Refreshes.WithLabelValues(metrics.OutcomeOK)); got != 1 {
		t.Errorf("ok refreshes = %v, want 1", got)
	}
}

func TestTransientFailuresNeverDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "alice")
	outage := mongo.CommandError{Message: "connection reset", Labels: []string{"NetworkError"}}
	rec := newRecorder(func(ctx context.Context, user string, n int) error {
		if n <= 6 { // more failures than MaxAttempts, all of them MongoDB's fault
			return outage
		}
		return nil
	})
	c, m := b.newConsumer(t, rec, consumerOpts{cfg: Config{MaxAttempts: 3}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rec.callsOf("alice"); got != 7 {
		t.Errorf("refreshes = %d, want 7 (6 transient failures, then success)", got)
	}
	if n := b.count(t, b.colls.DeadLetter, nil); n != 0 {
		t.Errorf("%d dead letters after an outage, want 0", n)
	}
	if got := testutil.ToFloat64(m.EntriesAcked); got != 1 {
		t.Errorf("acked = %v, want 1", got)
	}
}

// TestFailingDeadLettersDoNotBlockAcks: a dead-letter write that cannot
// succeed (here: a collection name the server refuses) must not hold up the
// acknowledgement of everyone else, and must lose nothing.
func TestFailingDeadLettersDoNotBlockAcks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.colls.DeadLetter = b.db.Collection("dead$letters") // '$' is not allowed in a collection name
	if _, err := b.colls.Queue.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "bad"}, {Key: "username", Value: 7}, {Key: "createdAt", Value: time.Now().Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, "alice", "bob", "alice")
	c, m := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	stop := start(t, c)
	waitFor(t, "alice's and bob's entries to be acknowledged", func() bool {
		return b.count(t, b.colls.Queue, bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: bson.A{"alice", "bob"}}}}}) == 0
	})
	if err := stop(); err != nil {
		t.Logf("Run: %v (the final flush may still be failing on the dead letter)", err)
	}
	if n := b.count(t, b.colls.Queue, bson.D{{Key: "_id", Value: "bad"}}); n != 1 {
		t.Errorf("the malformed entry is gone (%d left) although it was never dead-lettered", n)
	}
	if testutil.ToFloat64(m.AckFlushErrors) == 0 {
		t.Error("no ack flush error counted")
	}
	if n := b.count(t, b.colls.Claims, nil); n != 0 {
		t.Errorf("%d leases left", n)
	}
}

func TestUserWhoseHoldersKeepDyingIsDeadLetteredWithoutARefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "poison", "poison", "fine")
	// Three consumers took this user and vanished: the third takeover
	// recorded attempts = 3, and its lease has expired too.
	if _, err := b.colls.Claims.InsertOne(t.Context(), bson.D{
		{Key: "_id", Value: "poison"}, {Key: "token", Value: "gone"}, {Key: "attempts", Value: 2},
		{Key: "leaseUntil", Value: time.Now().Add(-time.Minute)}, {Key: "running", Value: "gone"},
	}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nil)
	c, m := b.newConsumer(t, rec, consumerOpts{cfg: Config{MaxAttempts: 3}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := rec.callsOf("poison"); n != 0 {
		t.Errorf("poison refreshed %d times, want 0 (the takeover made it the 3rd lost lease)", n)
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts)); got != 2 {
		t.Errorf("dead-lettered max_attempts = %v, want 2", got)
	}
	if rec.callsOf("fine") != 1 {
		t.Errorf("fine refreshed %d times, want 1", rec.callsOf("fine"))
	}
}

func TestRefreshOutlivingItsDeadlineCountsAnAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "slow")
	rec := newRecorder(func(ctx context.Context, user string, n int) error {
		<-ctx.Done() // slower than any deadline
		return ctx.Err()
	})
	c, m := b.newConsumer(t, rec, consumerOpts{cfg: Config{MaxAttempts: 2, RefreshTimeout: 20 * time.Millisecond}})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := rec.callsOf("slow"); n != 2 {
		t.Errorf("refreshes = %d, want 2 (MAX_ATTEMPTS): a refresh's own timeout is not a MongoDB outage", n)
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts)); got != 1 {
		t.Errorf("dead-lettered = %v, want 1", got)
	}
}

func TestDeadLetterWithAReusedIDKeepsBothDocuments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	// An earlier, different entry with the same _id is already a dead letter;
	// another one was half-moved by a run that crashed before deleting it.
	if _, err := b.colls.DeadLetter.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "reused"}, {Key: "username", Value: 1}, {Key: "payload", Value: "old"}, {Key: "deadLetter", Value: bson.D{{Key: "reason", Value: "malformed"}}}},
		bson.D{{Key: "_id", Value: "halfway"}, {Key: "username", Value: 2}, {Key: "deadLetter", Value: bson.D{{Key: "reason", Value: "malformed"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.colls.Queue.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "reused"}, {Key: "username", Value: 1}, {Key: "payload", Value: "NEW"}},
		bson.D{{Key: "_id", Value: "halfway"}, {Key: "username", Value: 2}},
	}); err != nil {
		t.Fatal(err)
	}
	c, m := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, b.colls.DeadLetter, bson.D{{Key: "payload", Value: "NEW"}, {Key: "deadLetter.originalId", Value: "reused"}}); n != 1 {
		t.Errorf("the new entry with a reused _id: %d dead letters with deadLetter.originalId, want 1", n)
	}
	if n := b.count(t, b.colls.DeadLetter, bson.D{{Key: "payload", Value: "old"}}); n != 1 {
		t.Errorf("the old dead letter was lost")
	}
	if n := b.count(t, b.colls.DeadLetter, bson.D{{Key: "username", Value: 2}}); n != 1 {
		t.Errorf("the half-moved entry has %d dead letters, want exactly 1", n)
	}
	if got := testutil.ToFloat64(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)); got != 1 {
		t.Errorf("dead-lettered = %v, want 1 (the half-moved one was counted by its first run)", got)
	}
}
