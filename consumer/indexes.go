package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StaleLeaseTTL is how long after its leaseUntil a lease document is removed
// by MongoDB's TTL monitor where the server has TTL indexes. Only documents
// nobody will look at again get that old: a backoff whose user's entries were
// all acknowledged by another replica.
const StaleLeaseTTL = 24 * time.Hour

// Capabilities is what the server turned out to support, logged once at start.
type Capabilities struct {
	ChangeStreams  bool
	TTLIndexes     bool
	PartialIndexes bool
}

// indexSpec is one index the pipeline relies on, with the query it serves.
// fallback, if set, is what to build when the server rejects model (an
// optional feature such as TTL); optional indexes are skipped instead.
type indexSpec struct {
	coll     *mongo.Collection
	model    mongo.IndexModel
	fallback *mongo.IndexModel
	optional bool
	serves   string
}

// EnsureIndexes creates the indexes the pipeline's queries need and reports
// which optional index features the server has. It is idempotent and never
// fatal: an index the server cannot build is skipped with one log line,
// because every query stays correct without it, only slower.
//
// The error is non-nil only when the server could not be reached: the caller
// should call again later (index builds are idempotent), since a start during
// an outage must not leave the queue unindexed for good.
func EnsureIndexes(ctx context.Context, colls Collections, log *slog.Logger) (Capabilities, error) {
	caps := Capabilities{TTLIndexes: true, PartialIndexes: true}
	var unreachable error
	leaseUntil := bson.D{{Key: "leaseUntil", Value: 1}}
	specs := []indexSpec{
		{coll: colls.Queue, model: mongo.IndexModel{Keys: windowIndex},
			serves: "claim window: oldest entries of claimable users, sorted and filtered on the index alone; SLI oldest age"},
		{coll: colls.Queue, model: mongo.IndexModel{Keys: absorbIndex},
			serves: "absorb: every pending entry of the users just claimed"},
		{coll: colls.Claims,
			model:    mongo.IndexModel{Keys: leaseUntil, Options: options.Index().SetExpireAfterSeconds(int32(StaleLeaseTTL.Seconds()))},
			fallback: &mongo.IndexModel{Keys: leaseUntil},
			serves:   "live leases and backoffs, read by every claim round; TTL removes stale ones"},
		{coll: colls.Claims, optional: true,
			model: mongo.IndexModel{Keys: bson.D{{Key: "attempts", Value: 1}}, Options: options.Index().
				SetPartialFilterExpression(bson.D{{Key: "attempts", Value: bson.D{{Key: "$gt", Value: 0}}}})},
			serves: "operators listing users that are failing (only those are indexed)"},
		{coll: colls.DeadLetter, model: mongo.IndexModel{Keys: bson.D{{Key: "deadLetter.at", Value: 1}}},
			serves: "dead letters by time, for operators"},
	}
	for _, s := range specs {
		name, err := s.coll.Indexes().CreateOne(ctx, s.model)
		if transient(err) {
			unreachable = fmt.Errorf("creating index on %s: %w", s.coll.Name(), err)
			continue
		}
		if err != nil && s.fallback != nil {
			caps.TTLIndexes = false
			log.Info("index option not supported by this server; building the index without it", "collection", s.coll.Name(), "keys", fmt.Sprint(s.model.Keys), "err", err)
			name, err = s.coll.Indexes().CreateOne(ctx, *s.fallback)
		}
		if err != nil && s.optional {
			caps.PartialIndexes = false
			log.Info("optional index not supported by this server; skipped", "collection", s.coll.Name(), "keys", fmt.Sprint(s.model.Keys), "serves", s.serves, "err", err)
			continue
		}
		if err != nil {
			log.Warn("index not created; queries still work, slower", "collection", s.coll.Name(), "keys", fmt.Sprint(s.model.Keys), "serves", s.serves, "err", err)
			continue
		}
		log.Debug("index ready", "collection", s.coll.Name(), "index", name)
	}
	return caps, unreachable
}

// DetectChangeStreams reports whether the server can watch the queue, by
// opening a stream and closing it at once.
func DetectChangeStreams(ctx context.Context, queue *mongo.Collection) bool {
	stream, err := queue.Watch(ctx, mongo.Pipeline{})
	if err != nil {
		return false
	}
	_ = stream.Close(ctx)
	return true
}
