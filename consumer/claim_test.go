package consumer

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/consumer/adaptive"
)

// The adaptive limiters of the fleet keep their baselines in the claims
// collection, beside the leases: a claim round must not take those
// documents for live leases of other users.
func TestClaimingIgnoresFleetBaselineDocuments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for i, replica := range []string{"a", "c", "d"} {
		fleet := adaptive.NewFleetBaselines(b.colls.Claims, replica, time.Minute, nil)
		if _, err := fleet.Exchange(ctx, time.Duration(i+3)*100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	b.enqueue(t, "u1")
	cons, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := cons.claimer.runOnce(ctx, 10, nil)
	if err != nil {
		t.Fatalf("claim beside baseline documents: %v", err)
	}
	if len(res.works) != 1 {
		t.Fatalf("claim beside baseline documents: %d users, want u1", len(res.works))
	}
	if n := b.count(t, b.colls.Claims, bson.D{{Key: "baselineSeconds", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 3 {
		t.Errorf("%d baseline documents, want one per replica (3)", n)
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
	}
	if _, err := b.colls.Claims.InsertMany(ctx, strays); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"bare", "textual", "nulled", "oddfields"} {
		b.enqueue(t, u)
	}
	cons, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	res, err := cons.claimer.runOnce(ctx, 10, nil)
	if err != nil {
		t.Fatalf("claim round beside stray claims documents: %v", err)
	}
	won := map[string]bool{}
	for _, w := range res.works {
		won[w.lease.User] = true
		if w.lease.User == "oddfields" && (w.lease.Attempts != 0 || w.lease.Solo) {
			t.Errorf("oddfields taken with %d attempts, solo %v; want its count started again and no solo", w.lease.Attempts, w.lease.Solo)
		}
	}
	// Its attempts are a number again, so a failure's backoff can count.
	var odd struct {
		Attempts any `bson:"attempts"`
	}
	if err := b.colls.Claims.FindOne(ctx, bson.D{{Key: "_id", Value: "oddfields"}}).Decode(&odd); err != nil {
		t.Fatal(err)
	}
	if n, ok := odd.Attempts.(int32); !ok || n != 0 {
		t.Errorf("oddfields' attempts %#v after the takeover, want int32 0", odd.Attempts)
	}
	if len(won) != 4 {
		t.Errorf("claimed %v, want bare, textual, nulled and oddfields", won)
	}
	// A live lease still blocks: not after now is not "any leaseUntil".
	b.enqueue(t, "held")
	if _, err := b.colls.Claims.InsertOne(ctx, bson.D{{Key: "_id", Value: "held"}, {Key: "token", Value: "other"}, {Key: "leaseUntil", Value: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	res, err = cons.claimer.runOnce(ctx, 10, map[string]struct{}{"bare": {}, "textual": {}, "nulled": {}, "oddfields": {}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.works {
		if w.lease.User == "held" {
			t.Error("a live lease of another consumer was taken over")
		}
	}
}
