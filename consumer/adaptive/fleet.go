package adaptive

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// FleetBaselines is the BaselineExchange of replicas sharing one claims
// collection: each keeps one document there,
//
//	{_id: {adaptiveBaseline: <replica>}, baselineSeconds, at, leaseUntil: at - 1h}
//
// and reads everyone's. The subdocument _id cannot collide with a lease (a
// lease's _id is the username, a string). leaseUntil lies an hour in the
// past, so no claim round takes the document for a live lease even on a
// replica whose clock is ahead; it also lets the exchange's read use the
// leaseUntil index, and the claims collection's TTL index removes the
// documents of departed replicas 23 hours after their last write. Where TTL
// indexes are missing (FerretDB) they stay, ignored once stale.
//
// The fleet's figure is the lowest fresh baseline: replicas that start
// together under load all measure a loaded "no-load" latency, and only the
// lowest figure any of them has seen lets the bar come down to the real one
// as the fleet backs off (a median kept it high: docs/performance.md, Design
// notes). The cost is that the luckiest replica's minimum sets a slightly
// strict bar for all; each is a minimum over intervals of at least
// MinSamples refreshes.
type FleetBaselines struct {
	coll    *mongo.Collection
	replica string
	fresh   time.Duration
	clock   clock.Nower
}

// NewFleetBaselines shares through claims. replica names this process
// uniquely (several consumers may share a host and pid in tests); baselines
// older than fresh are ignored (default 2 minutes, about the policy's own
// baseline window). now dates the baselines; nil is the wall clock.
func NewFleetBaselines(claims *mongo.Collection, replica string, fresh time.Duration, now clock.Nower) *FleetBaselines {
	if fresh <= 0 {
		fresh = 2 * time.Minute
	}
	if now == nil {
		now = clock.Real{}
	}
	return &FleetBaselines{coll: claims, replica: replica, fresh: fresh, clock: now}
}

// Exchange publishes own (unless zero: nothing measured yet) and returns the
// fleet's baseline and size, this replica counted even before it has a
// baseline to publish: two round trips per share period (one before).
func (f *FleetBaselines) Exchange(ctx context.Context, own time.Duration) (Fleet, error) {
	now := f.clock.Now()
	if own > 0 {
		_, err := f.coll.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "adaptiveBaseline", Value: f.replica}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "baselineSeconds", Value: own.Seconds()}, {Key: "at", Value: now}, {Key: "leaseUntil", Value: now.Add(-time.Hour)}}}},
			options.UpdateOne().SetUpsert(true))
		if err != nil {
			return Fleet{}, fmt.Errorf("publishing this replica's latency baseline: %w", err)
		}
	}
	// The leaseUntil range (written as at - 1h, 5 minutes' slack for clocks
	// ahead) lets MongoDB read these from the leaseUntil index instead of
	// scanning every lease.
	cur, err := f.coll.Find(ctx,
		bson.D{
			{Key: "leaseUntil", Value: bson.D{{Key: "$gt", Value: now.Add(-f.fresh - time.Hour)}, {Key: "$lte", Value: now.Add(-time.Hour + 5*time.Minute)}}},
			{Key: "baselineSeconds", Value: bson.D{{Key: "$gt", Value: 0}}},
			{Key: "at", Value: bson.D{{Key: "$gt", Value: now.Add(-f.fresh)}}},
		},
		options.Find().SetProjection(bson.D{{Key: "baselineSeconds", Value: 1}}))
	if err != nil {
		return Fleet{}, fmt.Errorf("reading the fleet's latency baselines: %w", err)
	}
	var docs []struct {
		Seconds float64 `bson:"baselineSeconds"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return Fleet{}, fmt.Errorf("reading the fleet's latency baselines: %w", err)
	}
	fleet := Fleet{Replicas: len(docs)}
	if own <= 0 {
		fleet.Replicas++
	}
	for _, d := range docs {
		if b := time.Duration(d.Seconds * float64(time.Second)); fleet.Baseline == 0 || b < fleet.Baseline {
			fleet.Baseline = b
		}
	}
	return fleet, nil
}
