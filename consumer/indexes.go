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

// IndexSpec is one index the pipeline relies on, with the query it serves.
// Fallback, if set, is what to build when the server rejects Model (an
// optional feature such as TTL); Optional indexes are skipped instead.
// `scorerefresh doctor` checks a server against this same list.
type IndexSpec struct {
	Name     string // stable identifier, one of the Index* constants
	Coll     *mongo.Collection
	Model    mongo.IndexModel
	Fallback *mongo.IndexModel
	Optional bool
	Serves   string
}

// Names of the IndexSpecs.
const (
	IndexClaimWindow  = "queue.claim_window"
	IndexAbsorb       = "queue.absorb"
	IndexLeaseUntil   = "claims.lease_until"
	IndexAttempts     = "claims.attempts"
	IndexDeadLetterAt = "deadletter.at"
)

// IndexSpecs returns the indexes EnsureIndexes builds, in build order.
func IndexSpecs(colls Collections) []IndexSpec {
	leaseUntil := bson.D{{Key: "leaseUntil", Value: 1}}
	return []IndexSpec{
		{Name: IndexClaimWindow, Coll: colls.Queue,
			Model:  mongo.IndexModel{Keys: windowIndex},
			Serves: "claim window: oldest entries of claimable users, sorted and filtered on the index alone; SLI oldest age"},
		{Name: IndexAbsorb, Coll: colls.Queue,
			Model:  mongo.IndexModel{Keys: absorbIndex},
			Serves: "absorb: every pending entry of the users just claimed"},
		{Name: IndexLeaseUntil, Coll: colls.Claims,
			Model:    mongo.IndexModel{Keys: leaseUntil, Options: options.Index().SetExpireAfterSeconds(int32(StaleLeaseTTL.Seconds()))},
			Fallback: &mongo.IndexModel{Keys: leaseUntil},
			Serves:   "live leases and backoffs, read by every claim round; TTL removes stale ones"},
		{Name: IndexAttempts, Coll: colls.Claims, Optional: true,
			Model: mongo.IndexModel{Keys: bson.D{{Key: "attempts", Value: 1}}, Options: options.Index().
				SetPartialFilterExpression(bson.D{{Key: "attempts", Value: bson.D{{Key: "$gt", Value: 0}}}})},
			Serves: "operators listing users that are failing (only those are indexed)"},
		{Name: IndexDeadLetterAt, Coll: colls.DeadLetter,
			Model:  mongo.IndexModel{Keys: bson.D{{Key: "deadLetter.at", Value: 1}}},
			Serves: "dead letters by time, for operators"},
	}
}

// RetiredIndex is an index an earlier release built and this one no longer
// builds: it uses ReplacedBy instead, and the retired one only as a
// fallback while ReplacedBy is missing. The service never drops it (the
// release before may still run, and use it, during a rollout or after a
// rollback); `scorerefresh doctor` names it so an operator drops it once
// that release is gone and its replacement is built.
type RetiredIndex struct {
	Coll       *mongo.Collection
	Keys       bson.D
	ReplacedBy bson.D
	LastUsedBy string // the last release that builds and hints it
	Serves     string // what it served
}

// RetiredIndexes lists the indexes earlier releases built that this one
// does not build.
func RetiredIndexes(colls Collections) []RetiredIndex {
	return []RetiredIndex{
		{Coll: colls.Queue, Keys: legacyAbsorbIndex, ReplacedBy: absorbIndex, LastUsedBy: "0.2.0", Serves: "absorb"},
	}
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
	for _, s := range IndexSpecs(colls) {
		name, err := s.Coll.Indexes().CreateOne(ctx, s.Model)
		if transient(err) {
			unreachable = fmt.Errorf("creating index on %s: %w", s.Coll.Name(), err)
			continue
		}
		if err != nil && s.Fallback != nil {
			caps.TTLIndexes = false
			log.Info("index option not supported by this server; building the index without it", "collection", s.Coll.Name(), "keys", fmt.Sprint(s.Model.Keys), "err", err)
			name, err = s.Coll.Indexes().CreateOne(ctx, *s.Fallback)
		}
		if err != nil && s.Optional {
			caps.PartialIndexes = false
			log.Info("optional index not supported by this server; skipped", "collection", s.Coll.Name(), "keys", fmt.Sprint(s.Model.Keys), "serves", s.Serves, "err", err)
			continue
		}
		if err != nil {
			log.Warn("index not created; queries still work, slower", "collection", s.Coll.Name(), "keys", fmt.Sprint(s.Model.Keys), "serves", s.Serves, "err", err)
			continue
		}
		log.Debug("index ready", "collection", s.Coll.Name(), "index", name)
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
