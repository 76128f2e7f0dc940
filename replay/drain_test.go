package replay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/metrics"
)

// fakeConsumer acknowledges up to perRound entries every few milliseconds,
// one refresh per round, and counts them in the real metrics: the drain
// logic under test watches the queue and the counters, not the pipeline
// (the cmd tests drain with the real one).
type fakeConsumer struct {
	queue    *mongo.Collection
	m        *metrics.Consumer
	perRound int
	err      error // returned at once when set
}

func (f *fakeConsumer) Run(ctx context.Context) error {
	if f.err != nil {
		return f.err
	}
	for ctx.Err() == nil {
		if f.perRound > 0 {
			cur, err := f.queue.Find(ctx, bson.D{}, options.Find().SetLimit(int64(f.perRound)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
			if err == nil {
				var ids []bson.D
				if cur.All(ctx, &ids) == nil && len(ids) > 0 {
					var in bson.A
					for _, d := range ids {
						in = append(in, d[0].Value)
					}
					if res, err := f.queue.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}); err == nil {
						f.m.EntriesAcked.Add(float64(res.DeletedCount))
						f.m.Refreshes.WithLabelValues(metrics.OutcomeOK).Inc()
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func seedQueue(t *testing.T, q *mongo.Collection, n int, age time.Duration) {
	t.Helper()
	var docs []any
	for i := range n {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "username", Value: fmt.Sprintf("u%d", i%7)}, {Key: "createdAt", Value: time.Now().Add(-age)}})
	}
	insertDocs(t, q, docs...)
}

func TestDrainRunsTheConsumerUntilTheQueueIsEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.db.Collection("score_events")
	seedQueue(t, q, 40, time.Minute)
	m := metrics.NewConsumer(prometheus.NewRegistry())
	res, err := Drain(t.Context(), DrainConfig{Queue: q, Consumer: &fakeConsumer{queue: q, m: m, perRound: 4}, Metrics: m, Interval: 20 * time.Millisecond, Expected: 40})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopDrained || res.Final.Acked != 40 || res.Final.Depth != 0 || res.Final.Refreshes != 10 {
		t.Fatalf("reason %q, final %+v", res.Reason, res.Final)
	}
	first, partly := res.Timeline[0], false
	for _, s := range res.Timeline {
		partly = partly || (s.Depth > 0 && s.Depth < 40)
	}
	if first.Depth <= 0 || first.OldestAge < 59 || !partly {
		t.Errorf("timeline starts %+v, part-drained sample: %v; want a minute-old queue going down", first, partly)
	}
	r := NewReport(&Plan{Entries: 40, DistinctUsers: 7}, res)
	if !r.Drained || r.CoalescingFactor != 4 || r.MaxDepth != int64(first.Depth) || r.EntriesPerSecond <= 0 || r.MaxOldestAgeSeconds < 59 {
		t.Errorf("report %+v", r)
	}
}

func TestDrainStopsAtUntilWithTheQueueNotDrained(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.db.Collection("score_events")
	seedQueue(t, q, 10, 0)
	m := metrics.NewConsumer(prometheus.NewRegistry())
	res, err := Drain(t.Context(), DrainConfig{Queue: q, Consumer: &fakeConsumer{queue: q, m: m}, Metrics: m, Interval: 20 * time.Millisecond, Until: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopUntil || res.Final.Depth != 10 || NewReport(&Plan{}, res).Drained {
		t.Errorf("reason %q final %+v", res.Reason, res.Final)
	}
}

func TestDrainReportsAConsumerThatStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.db.Collection("score_events")
	seedQueue(t, q, 3, 0)
	m := metrics.NewConsumer(prometheus.NewRegistry())
	boom := errors.New("cannot reach MongoDB")
	res, err := Drain(t.Context(), DrainConfig{Queue: q, Consumer: &fakeConsumer{err: boom}, Metrics: m, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopConsumer || !errors.Is(res.Err, boom) || NewReport(&Plan{}, res).Error == "" {
		t.Errorf("reason %q err %v", res.Reason, res.Err)
	}
}

func TestDrainWaitsForAPacedLoadToFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.db.Collection("score_events")
	m := metrics.NewConsumer(prometheus.NewRegistry())
	loadDone := make(chan error, 1)
	var arrived atomic.Int64
	// Each sample reads Arrived once, before it queries the queue, and the
	// drain takes samples one after another: the second read means the
	// first sample is complete.
	sampled := make(chan struct{}, 16)
	arrivedSoFar := func() int64 {
		select {
		case sampled <- struct{}{}:
		default:
		}
		return arrived.Load()
	}
	go func() {
		// Nothing for two samples (an empty queue must not end the drain
		// while entries are still to arrive), then the entries.
		for range 2 {
			select {
			case <-sampled:
			case <-t.Context().Done():
				return
			}
		}
		seedQueue(t, q, 12, 0)
		arrived.Store(12)
		loadDone <- nil
	}()
	res, err := Drain(t.Context(), DrainConfig{Queue: q, Consumer: &fakeConsumer{queue: q, m: m, perRound: 5}, Metrics: m,
		Interval: 20 * time.Millisecond, LoadDone: loadDone, Arrived: arrivedSoFar})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopDrained || res.Final.Acked != 12 || res.Final.Arrived != 12 {
		t.Errorf("reason %q final %+v", res.Reason, res.Final)
	}
	if first := res.Timeline[0]; !first.Measured || first.Depth != 0 || first.Arrived != 0 {
		t.Errorf("first sample %+v: want an empty queue, measured, before any arrival", first)
	}
}

func TestSamplerDerivesDepthBetweenCostlyQueriesAndChecksAZero(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.db.Collection("score_events")
	seedQueue(t, q, 10, time.Minute)
	m := metrics.NewConsumer(prometheus.NewRegistry())
	var arrived atomic.Int64
	now := time.Now()
	s := newSampler(q, m, arrived.Load, now)
	first, err := s.runOnce(t.Context(), now, false)
	if err != nil || !first.Measured || first.Depth != 10 || first.OldestAge < 59 {
		t.Fatalf("first sample %+v (%v): want measured, 10 deep, a minute old", first, err)
	}
	s.nextScan = now.Add(time.Hour) // as if the query had been slow
	arrived.Add(2)
	m.EntriesAcked.Add(3)
	m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed).Inc()
	second, _ := s.runOnce(t.Context(), now.Add(time.Second), false)
	if second.Measured || second.Depth != 8 || second.OldestAge != -1 || second.AckedPerSec != 3 {
		t.Errorf("second sample %+v: want derived depth 10+2-3-1 = 8", second)
	}
	// The counters say empty, the queue says otherwise (say, another
	// producer): a derived zero is always checked.
	m.EntriesAcked.Add(8)
	third, _ := s.runOnce(t.Context(), now.Add(2*time.Second), false)
	if !third.Measured || third.Depth != 10 {
		t.Errorf("third sample %+v: want a measured 10", third)
	}
}
