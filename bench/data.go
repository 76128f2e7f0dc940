package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// rulesYAML is the bench's scoring: 12 components over 3 small source
// collections, so a refresh costs 14 round trips (12 queries, the OCC read,
// the insert or update), like the production scorer this service was built
// for. Every op appears, with and without a window.
const rulesYAML = `# scorerefresh-bench: 12 components over 3 source collections (14 round trips per refresh)
components:
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

// userName is the i-th user of the bench's user pool.
func userName(i int) string { return fmt.Sprintf("user-%05d", i) }

// seedSources writes n source documents (45% activity, 30% posts, 25%
// reviews) belonging to users of a pool of the given size. The collections
// stay small on purpose: FerretDB answers every component query by reading
// the collection (SQLite) or the user's rows (PostgreSQL), so their size is
// server time, not latency.
func seedSources(ctx context.Context, db *mongo.Database, n, pool int, seed uint64) error {
	rnd := rand.New(rand.NewPCG(seed, 7))
	now := time.Now()
	ago := func(max time.Duration) time.Time { return now.Add(-time.Duration(rnd.Int64N(int64(max)))) }
	var activity, posts, reviews []any
	for i := range n {
		u := userName(rnd.IntN(pool))
		switch {
		case i%20 < 9:
			activity = append(activity, bson.D{{Key: "username", Value: u}, {Key: "points", Value: 1 + rnd.IntN(50)},
				{Key: "kind", Value: []string{"like", "comment", "share", "visit"}[rnd.IntN(4)]}, {Key: "at", Value: ago(60 * 24 * time.Hour)}})
		case i%20 < 15:
			posts = append(posts, bson.D{{Key: "author", Value: u}, {Key: "likes", Value: rnd.IntN(500)},
				{Key: "topic", Value: fmt.Sprintf("topic-%d", rnd.IntN(12))}, {Key: "at", Value: ago(120 * 24 * time.Hour)}})
		default:
			reviews = append(reviews, bson.D{{Key: "reviewer", Value: u}, {Key: "stars", Value: 1 + rnd.IntN(5)},
				{Key: "product", Value: fmt.Sprintf("sku-%d", rnd.IntN(40))}, {Key: "at", Value: ago(60 * 24 * time.Hour)}})
		}
	}
	for name, docs := range map[string][]any{"user_activity": activity, "posts": posts, "reviews": reviews} {
		if len(docs) == 0 {
			continue
		}
		if _, err := db.Collection(name).InsertMany(ctx, docs); err != nil {
			return fmt.Errorf("seeding %s: %w", name, err)
		}
	}
	return nil
}

// entry is a queue entry as producers write it.
func entry(user string, at time.Time) bson.D {
	return bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(at)}, {Key: "username", Value: user},
		{Key: "createdAt", Value: at}, {Key: "source", Value: "bench"}}
}

// backlog builds n entries with createdAt spread over the span before now,
// oldest first; pick chooses each entry's user.
func backlog(n int, now time.Time, span time.Duration, pick func(i int) string) []any {
	docs := make([]any, n)
	step := span / time.Duration(max(n, 1))
	start := now.Add(-span)
	for i := range n {
		docs[i] = entry(pick(i), start.Add(time.Duration(i)*step))
	}
	return docs
}

// diverseBacklog is n entries of n distinct users, in random order.
func diverseBacklog(n int, now time.Time, seed uint64) []any {
	perm := rand.New(rand.NewPCG(seed, 11)).Perm(n)
	return backlog(n, now, 10*time.Minute, func(i int) string { return userName(perm[i]) })
}

// firehoseBacklog is n entries: share of them of one user, the rest spread
// uniformly over others users, interleaved at random.
func firehoseBacklog(n, others int, share float64, now time.Time, seed uint64) []any {
	rnd := rand.New(rand.NewPCG(seed, 13))
	return backlog(n, now, 10*time.Minute, func(int) string {
		if rnd.Float64() < share {
			return "firehose"
		}
		return userName(rnd.IntN(others))
	})
}

// insertAll writes docs in batches of 1,000.
func insertAll(ctx context.Context, coll *mongo.Collection, docs []any) error {
	for i := 0; i < len(docs); i += 1000 {
		if _, err := coll.InsertMany(ctx, docs[i:min(i+1000, len(docs))]); err != nil {
			return fmt.Errorf("seeding %s: %w", coll.Name(), err)
		}
	}
	return nil
}
