package consumer

import (
	"context"
	"fmt"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// indexSpec is one index the pipeline's queries rely on, with the query it serves.
type indexSpec struct {
	coll   *mongo.Collection
	model  mongo.IndexModel
	serves string
}

// EnsureIndexes creates the indexes the pipeline's queries need. It is
// idempotent (createIndexes with an existing identical index is a no-op) and
// never fatal: an index the server cannot build is skipped with one log
// line, because the queries stay correct without it, only slower.
func EnsureIndexes(ctx context.Context, colls Collections, log *slog.Logger) {
	specs := []indexSpec{
		{colls.Queue, mongo.IndexModel{Keys: bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}}},
			"claim window: oldest entries of claimable users, sorted and filtered on the index alone"},
		{colls.Queue, mongo.IndexModel{Keys: bson.D{{Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}},
			"absorb: every pending entry of the users just claimed"},
		{colls.Claims, mongo.IndexModel{Keys: bson.D{{Key: "leaseUntil", Value: 1}}},
			"live leases and backoffs, read by every claim round"},
		{colls.DeadLetter, mongo.IndexModel{Keys: bson.D{{Key: "deadLetter.at", Value: 1}}},
			"dead letters by time, for operators"},
	}
	for _, s := range specs {
		name, err := s.coll.Indexes().CreateOne(ctx, s.model)
		if err != nil {
			log.Warn("index not created; queries still work, slower", "collection", s.coll.Name(), "keys", fmt.Sprint(s.model.Keys), "serves", s.serves, "err", err)
			continue
		}
		log.Debug("index ready", "collection", s.coll.Name(), "index", name)
	}
}
