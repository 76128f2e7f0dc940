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
