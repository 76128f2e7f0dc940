package consumer

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// TestTwoConsumersShareAQueueWhileProducersWrite runs two consumers on one
// queue while a producer keeps writing source data and then enqueuing, as
// applications do. At the end every entry is acknowledged, nothing is
// dead-lettered, and every stored score equals a recompute from the final
// source data: no refresh that began before a write was allowed to
// acknowledge the event announcing it.
func TestTwoConsumersShareAQueueWhileProducersWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rules := &scoring.Rules{Source: "test", Components: []scoring.Component{
		{Name: "activity", Collection: "user_activity", UserField: "username", Op: scoring.OpSum, Field: "points", Weight: 1, TimeField: "at"},
		{Name: "posts", Collection: "posts", UserField: "author", Op: scoring.OpCount, Weight: 5, TimeField: "at"},
	}}
	scores := b.db.Collection("user_scores")
	newScorer := func(m *metrics.Consumer) BatchRefresher {
		store := scoring.NewStore(scores, scoring.StoreConfig{OnConflict: m.OCCConflicts.Inc})
		return scoring.NewRefresher(scoring.NewRecomputer(b.db, rules), store)
	}
	var ms []*metrics.Consumer
	for i := range 2 {
		c, m := b.newConsumer(t, nil, consumerOpts{limit: 4, cfg: Config{MaxUsersInFlight: 8, Owner: fmt.Sprintf("consumer-%d", i)}})
		c.refresher = newScorer(m)
		ms = append(ms, m)
		start(t, c)
	}

	// The producer: 12 users, 150 events, each preceded by its source write.
	rnd := rand.New(rand.NewPCG(7, 7))
	activity, posts := b.db.Collection("user_activity"), b.db.Collection("posts")
	const events = 150
	for range events {
		user := fmt.Sprintf("user.%d $x", rnd.IntN(12))
		if rnd.IntN(3) == 0 {
			_, err := posts.InsertOne(t.Context(), bson.D{{Key: "author", Value: user}, {Key: "at", Value: time.Now()}})
			if err != nil {
				t.Fatal(err)
			}
		} else {
			_, err := activity.InsertOne(t.Context(), bson.D{{Key: "username", Value: user}, {Key: "points", Value: rnd.IntN(10)}, {Key: "at", Value: time.Now()}})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.colls.Queue.InsertOne(t.Context(), bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: time.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	b.waitDrained(t)

	acked := 0.0
	for _, m := range ms {
		acked += testutil.ToFloat64(m.EntriesAcked)
	}
	// Each consumer counts only the entries its own deletes removed, so the
	// sum is exact even when both tried to delete the same entry.
	if acked != events {
		t.Errorf("entries acked across consumers = %v, want %d", acked, events)
	}
	if n := b.count(t, b.colls.DeadLetter, nil); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	rec := scoring.NewRecomputer(b.db, rules)
	cur, err := scores.Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []scoring.ScoreDoc
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	if len(docs) != 12 {
		t.Errorf("%d score documents, want 12", len(docs))
	}
	for _, d := range docs {
		want, err := rec.Recompute(t.Context(), d.Username, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if d.Score != want.Score {
			t.Errorf("%q: stored score %v, recompute from final data %v", d.Username, d.Score, want.Score)
		}
	}
}
