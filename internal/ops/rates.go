package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// RatesMethod says how Rates are derived, in the report itself.
const RatesMethod = "two samples Sample apart: arrived = entries with createdAt at or after the first sample still pending at the second; " +
	"removed = depth1 + arrived - depth2; deadLettered = growth of the dead letters; acked = removed - deadLettered. " +
	"Entries that arrive and are acknowledged between the samples are in neither arrived nor acked, so both are lower bounds; " +
	"entries without createdAt, or dated by a producer clock behind the server's, are not counted as arrivals"

// Rates are arrivals against acknowledgements, from two samples of the
// collections (no Prometheus needed). The queue itself cannot tell an
// acknowledgement from a dead letter or a purge, so acks are what is left
// of the removals once the dead letters' growth is taken out.
type Rates struct {
	SampleSeconds         float64 `json:"sampleSeconds"`
	Arrived               int64   `json:"arrived"`
	Removed               int64   `json:"removed"`
	DeadLettered          int64   `json:"deadLettered"`
	Acked                 int64   `json:"acked"`
	ArrivalsPerSecond     float64 `json:"arrivalsPerSecond"`
	AckedPerSecond        float64 `json:"ackedPerSecond"`
	DeadLetteredPerSecond float64 `json:"deadLetteredPerSecond"`
	Exact                 bool    `json:"exact"` // every count behind them was exact, not estimated
	Method                string  `json:"method"`
}

// sampleRates counts the queue and the dead letters twice, opts.Wait apart,
// then the arrivals since the first count (by the server's clock, as
// producers date entries).
func sampleRates(ctx context.Context, colls Collections, opts StatusOptions) (*Rates, error) {
	since, _, _, err := ServerTime(ctx, colls.DB)
	if err != nil {
		return nil, err
	}
	var depths [2][2]int64 // [sample][queue, dead letters]
	var at [2]time.Time    // local monotonic clock, for the elapsed time
	r := Rates{Exact: true, Method: RatesMethod}
	for i := range 2 {
		if i == 1 {
			if err := opts.Wait(ctx); err != nil {
				return nil, fmt.Errorf("waiting between the rate samples: %w", err)
			}
		}
		at[i] = time.Now()
		for j, coll := range []*mongo.Collection{colls.Queue, colls.DeadLetter} {
			n, exact, err := depth(ctx, coll, opts.ExactLimit)
			if err != nil {
				return nil, err
			}
			depths[i][j], r.Exact = n, r.Exact && exact
		}
	}
	arrivedFilter := bson.D{{Key: "createdAt", Value: bson.D{{Key: "$gte", Value: since}}}}
	arrived, exact, err := countUpTo(ctx, colls.Queue, arrivedFilter, opts.ExactLimit)
	if err != nil {
		return nil, fmt.Errorf("counting arrivals since the first sample: %w", err)
	}
	secs := at[1].Sub(at[0]).Seconds()
	r.SampleSeconds, r.Arrived, r.Exact = secs, arrived, r.Exact && exact
	r.Removed = max(0, depths[0][0]+arrived-depths[1][0])
	r.DeadLettered = max(0, depths[1][1]-depths[0][1])
	r.Acked = max(0, r.Removed-r.DeadLettered)
	if secs > 0 {
		r.ArrivalsPerSecond = float64(r.Arrived) / secs
		r.AckedPerSecond = float64(r.Acked) / secs
		r.DeadLetteredPerSecond = float64(r.DeadLettered) / secs
	}
	return &r, nil
}

// deadLetterStatus counts the dead letters, dates the oldest and newest (the
// deadLetter.at index, one document each) and groups the newest opts.Window
// by reason.
func deadLetterStatus(ctx context.Context, dead *mongo.Collection, opts StatusOptions) (DeadLetterStatus, error) {
	s := DeadLetterStatus{Collection: dead.Name()}
	var err error
	if s.Count, s.CountExact, err = depth(ctx, dead, opts.ExactLimit); err != nil {
		return s, err
	}
	if s.OldestAt, err = deadLetterEdge(ctx, dead, 1); err != nil {
		return s, err
	}
	if s.NewestAt, err = deadLetterEdge(ctx, dead, -1); err != nil {
		return s, err
	}
	docs, err := findAll[storedDeadLetter](ctx, dead, bson.D{}, options.Find().SetSort(bson.D{{Key: "deadLetter.at", Value: -1}}).
		SetLimit(int64(opts.Window)).SetBatchSize(int32(opts.Window)).
		SetProjection(bson.D{{Key: "deadLetter.reason", Value: 1}, {Key: "deadLetter.at", Value: 1}}), fmt.Sprintf("reading the newest %d dead letters", opts.Window))
	if err != nil {
		return s, err
	}
	s.Read = len(docs)
	s.WholeSet = len(docs) < opts.Window || int64(len(docs)) >= s.Count
	s.ByReason = groupByReason(docs)
	return s, nil
}

func deadLetterEdge(ctx context.Context, dead *mongo.Collection, dir int) (*time.Time, error) {
	var d storedDeadLetter
	err := dead.FindOne(ctx, bson.D{{Key: "deadLetter.at", Value: bson.D{{Key: "$type", Value: "date"}}}},
		options.FindOne().SetSort(bson.D{{Key: "deadLetter.at", Value: dir}}).SetProjection(bson.D{{Key: "deadLetter.at", Value: 1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s dead letter: %w", map[int]string{1: "oldest", -1: "newest"}[dir], err)
	}
	return &d.DeadLetter.At, nil
}

func groupByReason(docs []storedDeadLetter) []ReasonStatus {
	by := map[string]*ReasonStatus{}
	for _, d := range docs {
		reason := cmp.Or(d.DeadLetter.Reason, "(none)")
		r := by[reason]
		if r == nil {
			r = &ReasonStatus{Reason: reason, OldestAt: d.DeadLetter.At, NewestAt: d.DeadLetter.At}
			by[reason] = r
		}
		r.Count++
		if d.DeadLetter.At.Before(r.OldestAt) {
			r.OldestAt = d.DeadLetter.At
		}
		if d.DeadLetter.At.After(r.NewestAt) {
			r.NewestAt = d.DeadLetter.At
		}
	}
	out := make([]ReasonStatus, 0, len(by))
	for _, r := range by {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b ReasonStatus) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}
