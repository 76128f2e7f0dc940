package scoring

import (
	"context"
	"errors"
	"strings"
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
	rules := pointsRules(t)
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

// TestARefreshRacedByAnotherReplicaRecomputes: after a lease takeover two
// replicas may refresh one user at once. Replica A (its estimate of the
// server's clock 2 s ahead) reads the stored document and recomputes; then,
// before A writes, u's new document is written and replica B (estimate
// right) refreshes u in full. A's write conflicts with B's. B's refresh
// reflects more, but by the stamps A's looks newer: judged by refreshedAt
// (the retry of a plain Write), A replaces B's score with its own older
// one, and B's entry, acknowledged, is lost ("score 2, want 7"). A document
// written while a refresh ran says nothing reliable about which of the two
// began first, so the refresh that meets one recomputes: its second recompute
// begins after B's write and reflects everything either saw.
func TestARefreshRacedByAnotherReplicaRecomputes(t *testing.T) {
	t.Parallel()
	rules := pointsRules(t)
	for _, batched := range []bool{false, true} {
		name := map[bool]string{false: "one user", true: "a batch"}[batched]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setupStore(t, StoreConfig{BackoffBase: time.Microsecond})
			db := a.coll.Database()
			replicaA := NewRefresher(NewRecomputer(db, rules), a.store)
			rivalDB := a.rival.Database()
			replicaB := NewRefresher(NewRecomputer(rivalDB, rules), NewStore(a.rival, StoreConfig{}))
			users := []string{"u"}
			if batched {
				users = []string{"u", "v"}
			}
			now := time.Now()
			add := func(points int) {
				t.Helper()
				if _, err := rivalDB.Collection("user_activity").InsertOne(context.Background(), bson.D{{Key: "username", Value: "u"}, {Key: "points", Value: points}, {Key: "at", Value: now}}); err != nil {
					t.Error(err)
				}
			}
			refresh := func(r *Refresher, at time.Time) {
				for u, err := range r.RefreshBatch(context.Background(), users, at) {
					if err != nil {
						t.Errorf("%s: %v", u, err)
					}
				}
			}
			add(2)
			var bStored ScoreDoc
			a.raceOnce(func() {
				add(5)
				refresh(replicaB, now.Add(500*time.Millisecond))
				bStored = a.mustGet(t, "u")
			})
			refresh(replicaA, now.Add(2*time.Second))
			doc := a.mustGet(t, "u")
			if bStored.Score != 7 {
				t.Fatalf("replica B stored %+v, want score 7", bStored)
			}
			if doc.Score != 7 {
				t.Errorf("score %v, want 7: a refresh raced by another replica's stored its older result over the newer one (%+v)", doc.Score, doc)
			}
			if !doc.RefreshedAt.After(bStored.RefreshedAt) && doc.Version != bStored.Version {
				t.Errorf("stored %+v over %+v: a write must never carry a refreshedAt older than the one it replaced", doc, bStored)
			}
		})
	}
}

// TestARefreshSupersededEveryTimeGivesUp: a refresh whose every write meets
// another refresh's newer document recomputes MaxConflictRetries times, then
// fails with ErrConflict (charged and retried like any failed refresh),
// never storing what a superseded recompute computed.
func TestARefreshSupersededEveryTimeGivesUp(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{MaxConflictRetries: 3, BackoffBase: time.Microsecond})
	b.seedScores(t, refreshStart, "w")
	bump := func() { b.bumpVersion(t, "w") }
	b.beforeUpdate.Store(&bump)
	r := NewRefresher(NewRecomputer(b.coll.Database(), DefaultRules()), b.store)
	err := r.Refresh(context.Background(), "w", refreshStart)
	b.beforeUpdate.Store(nil)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("Refresh = %v, want an error naming the user and wrapping ErrConflict", err)
	}
	if got := b.conflicts.Load(); got != 3 {
		t.Errorf("OnConflict called %d times, want 3", got)
	}
	if doc := b.mustGet(t, "w"); doc.Version != 4 || doc.Score != 1 {
		t.Errorf("stored %+v, want the seed's score moved by the rival's three writes only (version 4)", doc)
	}
}

// pointsRules scores a user as the sum of their activity's points.
func pointsRules(t *testing.T) *Rules {
	t.Helper()
	rules, err := ParseRules("rules.yaml", []byte(`components:
  - {name: points, collection: user_activity, userField: username, op: sum, field: points, weight: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	return rules
}
