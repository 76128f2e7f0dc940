package consumer

import (
	"math"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// leftoverBaselines are the documents the adaptive limiters of 0.2.0 kept in
// the claims collection, one per replica, in the shape they wrote them
// (leaseUntil an hour before their last write). A rolling upgrade leaves
// them behind.
func leftoverBaselines(now time.Time) []any {
	var docs []any
	for i, replica := range []string{"a", "c", "d"} {
		docs = append(docs, bson.D{{Key: "_id", Value: bson.D{{Key: "adaptiveBaseline", Value: replica}}},
			{Key: "baselineSeconds", Value: float64(i+3) / 10}, {Key: "at", Value: now}, {Key: "leaseUntil", Value: now.Add(-time.Hour)}})
	}
	return docs
}

// TestClaimingIgnoresLeftoverBaselineDocuments: the baseline documents of
// replicas of an older release are not leases of any user, and a claim
// round neither blocks on them nor touches them.
func TestClaimingIgnoresLeftoverBaselineDocuments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	if _, err := b.colls.Claims.InsertMany(ctx, leftoverBaselines(time.Now())); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, "u1")
	cons, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := cons.claimer.round(ctx, 10, AbsorbLimit, nil)
	if err != nil {
		t.Fatalf("claim beside baseline documents: %v", err)
	}
	if len(res.works) != 1 {
		t.Fatalf("claim beside baseline documents: %d users, want u1", len(res.works))
	}
	if n := b.count(t, b.colls.Claims, bson.D{{Key: "baselineSeconds", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 3 {
		t.Errorf("%d baseline documents, want the 3 left untouched", n)
	}
}

// TestStrayClaimsDocumentsDoNotBlockTheirUsers: a claims document nobody's
// claim round wrote (no leaseUntil, or one that is not a date) is taken over
// like an expired lease, so its user's entries are claimed; before, the user
// looked claimable, lost its insert to the stray _id, and was never won.
// One whose attempts or solo is not what the service writes (a string) is
// taken over too, its count started again; before, reading it back failed
// the whole claim round, every round that picked its user.
func TestStrayClaimsDocumentsDoNotBlockTheirUsers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	strays := []any{
		bson.D{{Key: "_id", Value: "bare"}},
		bson.D{{Key: "_id", Value: "textual"}, {Key: "leaseUntil", Value: "tomorrow"}, {Key: "token", Value: "t"}},
		bson.D{{Key: "_id", Value: "nulled"}, {Key: "leaseUntil", Value: nil}},
		bson.D{{Key: "_id", Value: "oddfields"}, {Key: "leaseUntil", Value: time.Now().Add(-time.Hour)}, {Key: "attempts", Value: "two"}, {Key: "solo", Value: "yes"}},
		// Numbers no count can be: never reaching MAX_ATTEMPTS, or past it
		// by nonsense.
		bson.D{{Key: "_id", Value: "negative"}, {Key: "leaseUntil", Value: time.Now().Add(-time.Hour)}, {Key: "attempts", Value: int32(-1_000_000)}},
		bson.D{{Key: "_id", Value: "huge"}, {Key: "leaseUntil", Value: time.Now().Add(-time.Hour)}, {Key: "attempts", Value: 1e300}},
	}
	// (NaN too, in TestCountReadsOnlyPlausibleAttempts: the embedded server
	// drops the connection on a NaN.)
	odd := []string{"oddfields", "negative", "huge"}
	if _, err := b.colls.Claims.InsertMany(ctx, strays); err != nil {
		t.Fatal(err)
	}
	for _, u := range append([]string{"bare", "textual", "nulled"}, odd...) {
		b.enqueue(t, u)
	}
	cons, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := cons.claimer.round(ctx, 10, AbsorbLimit, nil)
	if err != nil {
		t.Fatalf("claim round beside stray claims documents: %v", err)
	}
	won := map[string]bool{}
	for _, w := range res.works {
		won[w.lease.User] = true
		if slices.Contains(odd, w.lease.User) && (w.lease.Attempts != 0 || w.lease.Solo) {
			t.Errorf("%s taken with %d attempts, solo %v; want its count started again and no solo", w.lease.User, w.lease.Attempts, w.lease.Solo)
		}
	}
	// Their attempts are a count again, so a failure's backoff can count.
	for _, u := range odd {
		var doc struct {
			Attempts any `bson:"attempts"`
		}
		if err := b.colls.Claims.FindOne(ctx, bson.D{{Key: "_id", Value: u}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if n, ok := doc.Attempts.(int32); !ok || n != 0 {
			t.Errorf("%s's attempts %#v after the takeover, want int32 0", u, doc.Attempts)
		}
	}
	if len(won) != 3+len(odd) {
		t.Errorf("claimed %v, want bare, textual, nulled and %v", won, odd)
	}
	// A live lease still blocks: not after now is not "any leaseUntil".
	b.enqueue(t, "held")
	if _, err := b.colls.Claims.InsertOne(ctx, bson.D{{Key: "_id", Value: "held"}, {Key: "token", Value: "other"}, {Key: "leaseUntil", Value: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	exclude := append([]string{"bare", "textual", "nulled"}, odd...)
	res, err = cons.claimer.round(ctx, 10, AbsorbLimit, exclude)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.works {
		if w.lease.User == "held" {
			t.Error("a live lease of another consumer was taken over")
		}
	}
}

func TestCountReadsOnlyPlausibleAttempts(t *testing.T) {
	raw := func(v any) bson.RawValue {
		typ, data, err := bson.MarshalValue(v)
		if err != nil {
			t.Fatal(err)
		}
		return bson.RawValue{Type: typ, Value: data}
	}
	for _, c := range []struct {
		v    bson.RawValue
		n    int
		isOK bool
	}{
		{bson.RawValue{}, 0, true},
		{bson.RawValue{Type: bson.TypeNull}, 0, true},
		{raw(int32(3)), 3, true},
		{raw(int64(4)), 4, true},
		{raw(2.0), 2, true},
		{raw("two"), 0, false},
		{raw(int32(-1)), 0, false},
		{raw(int64(1) << 40), 0, false},
		{raw(1e300), 0, false},
		{raw(math.NaN()), 0, false},
		{raw(math.Inf(1)), 0, false},
		{raw(-0.5), 0, false},
	} {
		if n, ok := (LeaseDoc{Attempts: c.v}).Count(); n != c.n || ok != c.isOK {
			t.Errorf("count(%v) = %d, %v; want %d, %v", c.v, n, ok, c.n, c.isOK)
		}
	}
}
