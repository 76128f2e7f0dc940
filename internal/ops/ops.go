// Package ops is what the operator commands of the production binary
// (status, deadletters, doctor) ask of MongoDB; cmd/scorerefresh parses
// their flags. Every read is bounded whatever the queue's depth
// (docs/operator-commands.md): counts are exact only up to a threshold and
// estimated past it, figures that need documents read a window of at most N
// of them and say so, and writes go in batches of one round trip each.
package ops

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// SchemaVersion is the version of every --json document the operator
// commands print. It changes only when a field is removed or changes
// meaning; new fields may appear within a version.
const SchemaVersion = 1

// Collections are the collections the operator commands read and write.
type Collections struct {
	DB         *mongo.Database
	Queue      *mongo.Collection
	Claims     *mongo.Collection
	DeadLetter *mongo.Collection
	Scores     *mongo.Collection
}

// NewCollections names the collections of db as cfg configures them.
func NewCollections(db *mongo.Database, cfg config.Config) Collections {
	return Collections{
		DB:         db,
		Queue:      db.Collection(cfg.QueueCollection),
		Claims:     db.Collection(cfg.ClaimsCollection),
		DeadLetter: db.Collection(cfg.DeadLetterCollection),
		Scores:     db.Collection(cfg.ScoresCollection),
	}
}

func (c Collections) consumer() consumer.Collections {
	return consumer.Collections{Queue: c.Queue, Claims: c.Claims, DeadLetter: c.DeadLetter}
}

// Env is a connection set up exactly as `scorerefresh run` sets up its own:
// the same configuration, client options (pool, app name) and rules file.
type Env struct {
	Config config.Config
	Colls  Collections
	Rules  *scoring.Rules
	svc    *app.Service
}

// Open connects as the service would, without serving metrics (an operator
// command must not take the service's port).
func Open(ctx context.Context, cfg config.Config, version, revision string) (*Env, error) {
	cfg.MetricsAddr = ""
	svc, err := app.New(ctx, cfg, app.Options{Version: version, Revision: revision})
	if err != nil {
		return nil, err
	}
	return &Env{Config: cfg, Colls: NewCollections(svc.DB, cfg), Rules: svc.Rules, svc: svc}, nil
}

func (e *Env) Close(ctx context.Context) error { return e.svc.Close(ctx) }

// ServerTime is the database server's clock (hello.localTime), the one
// clock every replica and operator shares, and the local time halfway
// through the round trip, to compare it with.
func ServerTime(ctx context.Context, db *mongo.Database) (server, local time.Time, rtt time.Duration, err error) {
	start := time.Now()
	raw, err := db.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	rtt = time.Since(start)
	if err != nil {
		return time.Time{}, time.Time{}, rtt, fmt.Errorf("reading the server's clock (hello): %w", err)
	}
	server, ok := raw.Lookup("localTime").TimeOK()
	if !ok || server.IsZero() {
		return time.Time{}, time.Time{}, rtt, fmt.Errorf("reading the server's clock: hello has no localTime date")
	}
	return server, start.Add(rtt / 2), rtt, nil
}

// countUpTo counts filter's documents exactly while they are at most limit,
// reading at most limit+1 index keys; past that it reports limit+1, not exact.
func countUpTo(ctx context.Context, coll *mongo.Collection, filter bson.D, limit int64) (n int64, exact bool, err error) {
	n, err = coll.CountDocuments(ctx, filter, options.Count().SetLimit(limit+1))
	if err != nil {
		return 0, false, err
	}
	return n, n <= limit, nil
}

// depth is a collection's size: estimatedDocumentCount (collection
// metadata, O(1)) past limit, an exact count at or below it.
func depth(ctx context.Context, coll *mongo.Collection, limit int64) (n int64, exact bool, err error) {
	est, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("estimating the size of %s: %w", coll.Name(), err)
	}
	if est > limit {
		return est, false, nil
	}
	// Not exact, n is limit+1, more than est.
	n, exact, err = countUpTo(ctx, coll, bson.D{}, limit)
	if err != nil {
		return 0, false, fmt.Errorf("counting %s: %w", coll.Name(), err)
	}
	return n, exact, nil
}

// idString renders any _id for a human or a JSON field: an ObjectId as its
// hex, a string as itself, anything else as relaxed Extended JSON.
func idString(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeObjectID:
		return v.ObjectID().Hex()
	case bson.TypeString:
		return v.StringValue()
	case 0:
		return ""
	}
	return v.String()
}

// findAll reads every document of coll that filter matches; what says which
// read failed, in its error.
func findAll[T any](ctx context.Context, coll *mongo.Collection, filter any, opts *options.FindOptionsBuilder, what string) ([]T, error) {
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var docs []T
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return docs, nil
}
