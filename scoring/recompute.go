package scoring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// Result is one user's freshly computed score.
type Result struct {
	Score      float64            // Σ weight × value over the components
	Components map[string]float64 // component name -> value before weighting
}

// Recomputer computes scores from the source collections; it is safe for concurrent use.
// Share one per process, so that what it learns about the server is learnt once.
type Recomputer struct {
	db     *mongo.Database
	rules  *Rules
	log    *slog.Logger
	traits *servertraits.Traits // what the server refused: a round trip per process, not per refresh
	// learnCollation (listCollation but in tests) tells whether a collection's default collation is not simple.
	learnCollation func(ctx context.Context, coll string) (nonSimple bool, err error)
	collations     sync.Map // learnCollation's answer (bool) per collection name
}

// RecomputerOption configures a Recomputer.
type RecomputerOption func(*Recomputer)

// WithRecomputerLogger sends the log lines (one per feature the server lacks) to l, not nowhere.
func WithRecomputerLogger(l *slog.Logger) RecomputerOption {
	return func(r *Recomputer) { r.log = l }
}

// WithRecomputerTraits records what the server refuses in t, the service's, not in its own.
func WithRecomputerTraits(t *servertraits.Traits) RecomputerOption {
	return func(r *Recomputer) { r.traits = t }
}

// NewRecomputer returns a Recomputer reading the source collections of rules from db.
func NewRecomputer(db *mongo.Database, rules *Rules, opts ...RecomputerOption) *Recomputer {
	r := &Recomputer{db: db, rules: rules, log: slog.New(slog.DiscardHandler), traits: servertraits.New()}
	r.learnCollation = r.listCollation
	for _, o := range opts {
		o(r)
	}
	return r
}

// Recompute is RecomputeBatch for username alone: its per-user queries.
func (r *Recomputer) Recompute(ctx context.Context, username string, startedAt time.Time) (Result, error) {
	out, err := r.RecomputeBatch(ctx, []string{username}, startedAt)
	return out[username], err
}

// RecomputeBatch computes users' scores as of startedAt, when the refresh began, with one query per
// component and chunk of MaxBatchUsers, per-user ($eq) or batched ($in) alike (docs/batched-recompute.md).
// Every distinct user gets an entry (0 for each component without documents); a failing query fails all.
func (r *Recomputer) RecomputeBatch(ctx context.Context, users []string, startedAt time.Time) (map[string]Result, error) {
	out := make(map[string]Result, len(users))
	for _, chunk := range chunkUsers(uniqueUsers(users), MaxBatchUsers, maxBatchNameBytes) {
		for _, u := range chunk {
			out[u] = Result{Components: make(map[string]float64, len(r.rules.Components))}
		}
		for _, c := range r.rules.Components {
			values, err := r.componentValues(ctx, c, chunk, startedAt)
			if err != nil {
				batch := ""
				if len(chunk) > 1 {
					batch = fmt.Sprintf(" for a batch of %d users", len(chunk))
				}
				return nil, fmt.Errorf("computing component %q (%s over %s)%s: %w", c.Name, c.Op, c.Collection, batch, err)
			}
			for _, u := range chunk { // the same arithmetic in the same order whatever the batch: equal to the last bit
				out[u].Components[c.Name] = values[u]
				out[u] = Result{Score: out[u].Score + c.Weight*values[u], Components: out[u].Components}
			}
		}
	}
	return out, nil
}

// userMatch is the $match of c's query for users: $eq for one, $in for several
// (literal operands: a name such as "$gt" is never an operator), the window (a
// lower bound only: a producer whose clock runs ahead stamps documents after
// startedAt), the filter whole under $and (it cannot change the other conditions).
func userMatch(c Component, users []string, startedAt time.Time) bson.D {
	op, v := "$in", any(users)
	if len(users) == 1 {
		op, v = "$eq", users[0]
	}
	f := withCond(nil, c.UserField, op, v)
	if c.Window > 0 {
		// BSON dates hold milliseconds; the bound rounded down, a document
		// stamped exactly at the edge of the window counts.
		f = withCond(f, c.TimeField, "$gte", startedAt.Add(-c.Window).Truncate(time.Millisecond))
	}
	if len(c.Filter) > 0 {
		f = append(f, bson.E{Key: "$and", Value: bson.A{c.Filter}})
	}
	return f
}

// source returns the named source collection with the collation its queries need, learnt on first use.
func (r *Recomputer) source(ctx context.Context, name string) (source, error) {
	src := source{coll: r.db.Collection(name)}
	nonSimple, known := r.collations.Load(name)
	if !known {
		ns, err := r.learnCollation(ctx, name)
		if err != nil {
			return source{}, fmt.Errorf("learning the default collation of %s: %w", name, err)
		}
		nonSimple, _ = r.collations.LoadOrStore(name, ns)
	}
	if nonSimple.(bool) {
		src.collation = simpleCollation
	}
	return src, nil
}

// listCollation asks the server (listCollections) whether coll, if it exists, has a default
// collation other than simple. Where the user may not list collections (a custom MongoDB role),
// the queries carry the simple collation anyway: MongoDB accepts it whatever the default, and
// FerretDB, the one server that refuses the option, never refuses listCollections.
func (r *Recomputer) listCollation(ctx context.Context, coll string) (bool, error) {
	noteRoundTrip(ctx)
	specs, err := r.db.ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: coll}})
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(13) { // Unauthorized
		r.log.Info("cannot read a source collection's default collation (listCollections refused); its queries carry the simple collation",
			"collection", coll, "err", err)
		return true, nil
	}
	return slices.ContainsFunc(specs, func(s mongo.CollectionSpecification) bool { // none on an error
		loc, ok := s.Options.Lookup("collation", "locale").StringValueOK()
		return ok && loc != "simple"
	}), err
}

// withCond adds {field: {op: v}} to f, merging with the operators already on
// field (userField, timeField and field may be the same path).
func withCond(f bson.D, field, op string, v any) bson.D {
	for i, e := range f {
		if e.Key == field {
			f[i].Value = append(e.Value.(bson.D), bson.E{Key: op, Value: v})
			return f
		}
	}
	return append(f, bson.E{Key: field, Value: bson.D{{Key: op, Value: v}}})
}
