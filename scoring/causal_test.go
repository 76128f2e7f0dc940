package scoring

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestALaterRefreshWinsWhateverTheReplicasClocks: each replica estimates
// the server's clock, and two estimates may disagree by more than the time
// between two refreshes of one user (under load, or a replica whose
// estimate went stale). Replica A's estimate runs 2 s ahead: it refreshes
// u, then u's new document is written and its entry claimed by replica B,
// whose estimate is right. B's refresh began after A's write, so B's
// result reflects more and must be stored, though its startedAt is earlier
// than A's by the estimates. Skipping it as older (what the timestamps
// alone say) acknowledges the entry with its document missing from the
// score: an event lost. Found by the fleet test under load ("score 2, want
// 7").
func TestALaterRefreshWinsWhateverTheReplicasClocks(t *testing.T) {
	t.Parallel()
	rules, err := ParseRules("rules.yaml", []byte(`components:
  - {name: points, collection: user_activity, userField: username, op: sum, field: points, weight: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, batched := range []bool{false, true} {
		name := map[bool]string{false: "one user", true: "a batch"}[batched]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := mongotest.Database(t, mongotest.Options{})
			activity := db.Collection("user_activity")
			r := NewRefresher(NewRecomputer(db, rules), NewStore(db.Collection("user_scores"), StoreConfig{}))
			refresh := func(at time.Time) {
				t.Helper()
				users := []string{"u", "v"}
				if !batched {
					if err := r.Refresh(t.Context(), "u", at); err != nil {
						t.Fatal(err)
					}
					return
				}
				for u, err := range r.RefreshBatch(t.Context(), users, at) {
					if err != nil {
						t.Fatalf("%s: %v", u, err)
					}
				}
			}
			now := time.Now()
			add := func(points int) {
				t.Helper()
				if _, err := activity.InsertOne(t.Context(), bson.D{{Key: "username", Value: "u"}, {Key: "points", Value: points}, {Key: "at", Value: now}}); err != nil {
					t.Fatal(err)
				}
			}
			stored := func() ScoreDoc {
				t.Helper()
				var doc ScoreDoc
				if err := db.Collection("user_scores").FindOne(context.Background(), bson.D{{Key: "_id", Value: "u"}}).Decode(&doc); err != nil {
					t.Fatal(err)
				}
				return doc
			}
			add(2)
			refresh(now.Add(2 * time.Second)) // replica A, its estimate 2 s ahead
			first := stored()
			add(5)
			refresh(now.Add(500 * time.Millisecond)) // replica B, later in fact
			doc := stored()
			if doc.Score != 7 {
				t.Errorf("score %v, want 7: the refresh that began after the stored write was skipped as older (stored %+v)", doc.Score, doc)
			}
			if !doc.RefreshedAt.After(first.RefreshedAt) {
				t.Errorf("refreshedAt %v: a write must never carry a refreshedAt older than the one it replaced (%v)", doc.RefreshedAt, first.RefreshedAt)
			}
		})
	}
}
