package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	gen "github.com/scorerefresh/scorerefresh/internal/backlog"
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

// newBacklog draws o's backlog: events that arrived over the last ten
// minutes, oldest first; user 0 is the firehose user, the others are drawn
// uniformly.
func newBacklog(o demoOptions) *backlog {
	rnd := rand.New(rand.NewPCG(o.seed, 0))
	users, name := o.users, func(i int) string { return fmt.Sprintf("user-%04d", i) }
	if o.firehose > 0 {
		users, name = o.users+1, func(i int) string {
			if i == 0 {
				return firehoseUser
			}
			return fmt.Sprintf("user-%04d", i-1)
		}
	}
	entries := gen.Generate(gen.Spec{Shape: gen.Firehose, Entries: o.entries, Users: users, Hot: o.firehose, End: time.Now()}, rnd)
	b := &backlog{entries: gen.QueueDocs(entries, name, "demo")}
	b.activity, b.want = gen.Activity(entries, name, rnd, 0)
	return b
}

// seed inserts the backlog as producers write it: the source data first,
// then the events.
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
