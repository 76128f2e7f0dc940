// Command goscorer is the whole scorerefresh service around a scorer of the team's own, in Go: a user's
// score is two points per user_activity document (the collection the demo seeds) plus the sum of their points.
package main

import (
	"context"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/scoring"
	"github.com/scorerefresh/scorerefresh/service"
)

type activityScorer struct{ activity *mongo.Collection }

// Score counts each user's activity documents made before asOf and sums their points, in one find.
func (s activityScorer) Score(ctx context.Context, users []string, asOf time.Time) (map[string]scoring.Result, map[string]error, error) {
	cur, err := s.activity.Find(ctx,
		bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: users}}}, {Key: "at", Value: bson.D{{Key: "$lte", Value: asOf}}}},
		options.Find().SetProjection(bson.D{{Key: "username", Value: 1}, {Key: "points", Value: 1}}))
	if err != nil {
		return nil, nil, err
	}
	var docs []struct {
		User   string  `bson:"username"`
		Points float64 `bson:"points"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, nil, err
	}
	events, points := map[string]float64{}, map[string]float64{}
	for _, d := range docs {
		events[d.User]++
		points[d.User] += d.Points
	}
	results := make(map[string]scoring.Result, len(users))
	for _, u := range users { // a user with no activity scores 0
		results[u] = scoring.Result{Score: 2*events[u] + points[u], Components: map[string]float64{"events": events[u], "points": points[u]}}
	}
	return results, nil, nil
}

func main() {
	os.Exit(service.Main(os.Args[1:], service.Options{
		Name:   "goscorer",
		Scorer: func(db *mongo.Database) scoring.Scorer { return activityScorer{db.Collection("user_activity")} },
	}))
}
