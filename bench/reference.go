package bench

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// ReferenceBatch is how many of the oldest entries the replaced consumer took per poll.
const ReferenceBatch = 200

// reference is the consumer scorerefresh replaces, for comparison only:
// every poll it takes the oldest 200 pending entries, coalesces them by
// username, refreshes each distinct user one after another with the same
// scoring.Refresher (rules, queries, OCC write), then acknowledges the batch.
// It sleeps PollInterval only when the queue is empty. The original claimed
// its entries with an updateMany first; the only consumer here, it just reads
// them: every difference from the original flatters the reference.
type reference struct {
	queue     *mongo.Collection
	refresher *scoring.Refresher
	poll      time.Duration
	log       *slog.Logger
	client    *mongo.Client // its own, configured as scorerefresh's (app.ClientOptions)
	cancel    context.CancelFunc
	exited    chan struct{}

	covered   atomic.Int64 // entries whose user's refresh has completed (acked at the end of the batch)
	refreshes atomic.Int64 // successful refreshes
}

// startReference runs the reference on cfg's database with rules, its
// commands counted by rec.
func (b *Bench) startReference(ctx context.Context, cfg config.Config, rules *scoring.Rules, rec *recorder) (*reference, error) {
	if rules == nil {
		return nil, errors.New("the reference computes rules only, not an HTTP scorer")
	}
	cfg.RefreshConcurrency = 1
	m := metrics.NewMongo(metrics.NewRegistry())
	client, err := mongo.Connect(app.ClientOptions(cfg, m).SetMonitor(m.CommandMonitor(rec.monitor())))
	if err != nil {
		return nil, err
	}
	db := client.Database(cfg.Database)
	runCtx, cancel := context.WithCancel(ctx)
	r := &reference{queue: db.Collection(cfg.QueueCollection), poll: cfg.PollInterval, log: b.svcLog, client: client, cancel: cancel,
		refresher: scoring.NewRefresher(scoring.NewRecomputer(db, rules), scoring.NewStore(db.Collection("user_scores"), scoring.StoreConfig{})),
		exited:    make(chan struct{})}
	go func() { defer close(r.exited); r.drain(runCtx) }()
	return r, nil
}

func (r *reference) done() float64                        { return float64(r.covered.Load()) }
func (r *reference) figures() (float64, float64, float64) { return float64(r.refreshes.Load()), 0, 0 }

func (r *reference) stop() error {
	r.cancel()
	<-r.exited
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.client.Disconnect(ctx)
}

// drain polls and refreshes until ctx ends.
func (r *reference) drain(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.pollOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("reference poll failed", "err", err)
		}
		if n == 0 || err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(r.poll):
			}
		}
	}
}

// pollOnce processes one batch and returns how many entries it held.
func (r *reference) pollOnce(ctx context.Context) (int, error) {
	cur, err := r.queue.Find(ctx, bson.D{},
		options.Find().
			SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
			SetLimit(ReferenceBatch).SetBatchSize(ReferenceBatch).
			SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}}))
	if err != nil {
		return 0, err
	}
	var batch []struct {
		ID       bson.RawValue `bson:"_id"`
		Username string        `bson:"username"`
	}
	if err := cur.All(ctx, &batch); err != nil {
		return 0, err
	}
	// Coalesce by username, users in order of their oldest entry.
	var order []string
	ids := map[string][]any{}
	for _, e := range batch {
		if _, seen := ids[e.Username]; !seen {
			order = append(order, e.Username)
		}
		ids[e.Username] = append(ids[e.Username], e.ID)
	}
	var ack bson.A
	for _, u := range order {
		if ctx.Err() != nil {
			return len(batch), nil
		}
		if err := r.refresher.Refresh(ctx, u, time.Now()); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("reference refresh failed", "err", err)
			}
			continue
		}
		r.refreshes.Add(1)
		r.covered.Add(int64(len(ids[u])))
		ack = append(ack, ids[u]...)
	}
	if len(ack) > 0 {
		if _, err := r.queue.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ack}}}}); err != nil {
			return len(batch), err
		}
	}
	return len(batch), nil
}
