package scoring

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

func TestRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mongotest.Database(t, mongotest.Options{})
	activity := db.Collection("user_activity")
	store := NewStore(db.Collection("user_scores"), StoreConfig{})
	r := NewRefresher(NewRecomputer(db, DefaultRules()), store)
	point := func(user string, points int32, age time.Duration) bson.D {
		return bson.D{{Key: "username", Value: user}, {Key: "points", Value: points}, {Key: "at", Value: refreshStart.Add(-age)}}
	}
	insertDocs(t, activity, point("alice", 3, time.Hour), point("alice", 50, 800*time.Hour), point("bob", 7, time.Hour))

	check := func(user string, want ScoreDoc) {
		t.Helper()
		got, found, err := store.Get(ctx, user)
		if err != nil || !found {
			t.Fatalf("Get(%q) = found %v, %v", user, found, err)
		}
		got.RefreshedAt = got.RefreshedAt.UTC()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("score of %q = %+v, want %+v", user, got, want)
		}
	}

	// A slower refresh that began earlier, alongside the first: it read
	// the stored documents before the first wrote.
	slow, err := store.ReadPrior(ctx, []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx, "alice", refreshStart); err != nil {
		t.Fatal(err)
	}
	check("alice", ScoreDoc{Username: "alice", Score: 3, Components: map[string]float64{"activity": 3}, Version: 1, RefreshedAt: refreshStart})

	// Its write loses: superseded, for its refresh to recompute.
	if outcome, err := store.WriteAfter(ctx, slow, "alice", result(99), refreshStart.Add(-time.Second)); !errors.Is(err, ErrSuperseded) || outcome != 0 {
		t.Fatalf("older refresh's write = %v, %v; want ErrSuperseded", outcome, err)
	}
	check("alice", ScoreDoc{Username: "alice", Score: 3, Components: map[string]float64{"activity": 3}, Version: 1, RefreshedAt: refreshStart})

	insertDocs(t, activity, point("alice", 10, 0))
	later := refreshStart.Add(time.Minute)
	if err := r.Refresh(ctx, "alice", later); err != nil {
		t.Fatal(err)
	}
	check("alice", ScoreDoc{Username: "alice", Score: 13, Components: map[string]float64{"activity": 13}, Version: 2, RefreshedAt: later})

	// A user with no source documents still gets a document, scored 0.
	if err := r.Refresh(ctx, "nobody", refreshStart); err != nil {
		t.Fatal(err)
	}
	check("nobody", ScoreDoc{Username: "nobody", Components: map[string]float64{"activity": 0}, Version: 1, RefreshedAt: refreshStart})
}
