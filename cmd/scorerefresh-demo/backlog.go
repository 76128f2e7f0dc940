package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/internal/config"
)

const firehoseUser = "firehose"

// backlog is a demo queue and the source data its events announce, shaped
// for the built-in rules (activity: sum of user_activity.points over 720h).
type backlog struct {
	entries  []any
	activity []any
	want     map[string]float64 // expected score per user
}

func newBacklog(o demoOptions, rnd *rand.Rand, now time.Time) *backlog {
	b := &backlog{want: map[string]float64{}}
	// Events arrived over the last ten minutes, oldest first.
	start := now.Add(-10 * time.Minute)
	step := 10 * time.Minute / time.Duration(o.entries)
	for i := range o.entries {
		user := fmt.Sprintf("user-%04d", rnd.IntN(o.users))
		if rnd.Float64() < o.firehose {
			user = firehoseUser
		}
		at := start.Add(time.Duration(i) * step)
		// Producers write the source data first, then enqueue the event.
		// Most events re-announce documents already written (a like
		// counted twice, a bulk import touching one user over and over):
		// that keeps the source collection small, because the embedded
		// server scans it whole for every component query.
		if b.want[user] == 0 || rnd.IntN(20) == 0 {
			points := float64(1 + rnd.IntN(10))
			b.activity = append(b.activity, bson.D{{Key: "username", Value: user}, {Key: "points", Value: points}, {Key: "at", Value: at}})
			b.want[user] += points
		}
		b.entries = append(b.entries, bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(at)}, {Key: "username", Value: user}, {Key: "createdAt", Value: at}, {Key: "source", Value: "demo"}})
	}
	return b
}

func (b *backlog) distinctUsers() int { return len(b.want) }

func (b *backlog) seed(ctx context.Context, db *mongo.Database, cfg config.Config) error {
	for _, c := range []struct {
		coll *mongo.Collection
		docs []any
	}{
		{db.Collection("user_activity"), b.activity},
		{db.Collection(cfg.QueueCollection), b.entries},
	} {
		for i := 0; i < len(c.docs); i += 1000 {
			if _, err := c.coll.InsertMany(ctx, c.docs[i:min(i+1000, len(c.docs))]); err != nil {
				return fmt.Errorf("seeding %s: %w", c.coll.Name(), err)
			}
		}
	}
	return nil
}
