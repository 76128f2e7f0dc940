package scoring

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// benchRules has the shape of the production scorer: 12 components over
// three collections, 14 round trips per user when refreshed one by one.
const benchRules = `components:
  - {name: activity_points, collection: user_activity, userField: username, op: sum, field: points, weight: 1, window: 720h}
  - {name: activity_recent, collection: user_activity, userField: username, op: sum, field: points, weight: 2, window: 24h}
  - {name: activity_events, collection: user_activity, userField: username, op: count, weight: 0.5}
  - {name: activity_best, collection: user_activity, userField: username, op: max, field: points, weight: 1}
  - {name: activity_kinds, collection: user_activity, userField: username, op: distinct, field: kind, weight: 3}
  - {name: posts, collection: posts, userField: author, op: count, weight: 5}
  - {name: post_likes, collection: posts, userField: author, op: sum, field: likes, weight: 0.1}
  - {name: post_best, collection: posts, userField: author, op: max, field: likes, weight: 0.2}
  - {name: post_topics, collection: posts, userField: author, op: distinct, field: topic, weight: 2, window: 2160h}
  - {name: reviews, collection: reviews, userField: reviewer, op: count, weight: 3}
  - {name: review_stars, collection: reviews, userField: reviewer, op: sum, field: stars, weight: 1, window: 720h}
  - {name: review_products, collection: reviews, userField: reviewer, op: distinct, field: product, weight: 1}
`

// BenchmarkRefresh64Users refreshes 64 users one by one and as one batch,
// reporting round trips and time per refreshed user.
//
//	go test ./scoring -run '^$' -bench Refresh64Users -benchtime 3x
func BenchmarkRefresh64Users(b *testing.B) {
	rules, err := ParseRules("bench.yaml", []byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	db := mongotest.Database(b, mongotest.Options{})
	users := batchUsers(MaxBatchUsers)
	var activity, posts, reviews []bson.D
	for i, u := range users {
		for j := range 3 {
			at := refreshStart.Add(-time.Duration(i*j) * time.Hour)
			activity = append(activity, bson.D{{Key: "username", Value: u}, {Key: "points", Value: int32(i + j)}, {Key: "kind", Value: fmt.Sprint(j % 2)}, {Key: "at", Value: at}})
			posts = append(posts, bson.D{{Key: "author", Value: u}, {Key: "likes", Value: int32(i * j)}, {Key: "topic", Value: fmt.Sprint(i % 3)}, {Key: "at", Value: at}})
			reviews = append(reviews, bson.D{{Key: "reviewer", Value: u}, {Key: "stars", Value: int32(j)}, {Key: "product", Value: fmt.Sprint(j)}, {Key: "at", Value: at}})
		}
	}
	for coll, docs := range map[string][]bson.D{"user_activity": activity, "posts": posts, "reviews": reviews} {
		if _, err := db.Collection(coll).InsertMany(context.Background(), docs); err != nil {
			b.Fatal(err)
		}
	}
	var trips, refreshed int
	r := NewRefresher(NewRecomputer(db, rules), NewStore(db.Collection("user_scores"), StoreConfig{}),
		WithRefreshObserver(func(s RefreshStats) { trips += s.RoundTrips; refreshed += s.Users }))
	r.RefreshBatch(context.Background(), users, refreshStart) // learn what the server lacks

	at := refreshStart // moves on across runs, so no write is skipped as older
	run := func(b *testing.B, refresh func(ctx context.Context, at time.Time) error) {
		trips, refreshed = 0, 0
		for b.Loop() {
			at = at.Add(time.Second)
			if err := refresh(context.Background(), at); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(trips)/float64(refreshed), "roundtrips/user")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(refreshed), "ns/user")
	}
	b.Run("one by one", func(b *testing.B) {
		run(b, func(ctx context.Context, at time.Time) error {
			for _, u := range users {
				if err := r.Refresh(ctx, u, at); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("batch", func(b *testing.B) {
		run(b, func(ctx context.Context, at time.Time) error {
			for _, err := range r.RefreshBatch(ctx, users, at) {
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
}
