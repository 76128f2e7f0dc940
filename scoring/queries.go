package scoring

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// Each query here answers one component, for one user or a batch, with one command whose
// result fits in the first batch: the server closes the cursor, no getMore or killCursors follows.

// source is a source collection as the queries address it: with the simple collation where the default is
// another (usernames and filter strings compare binary, as user_scores' _id does), else none (FerretDB refuses it).
type source struct {
	coll      *mongo.Collection
	collation *options.Collation // nil: the collection's default is simple
}

var simpleCollation = &options.Collation{Locale: "simple"}

// componentValues returns c's value for each of users that has documents: the batched
// query for several, but the per-user query for the users a document with an array in
// the user field names (see run) and for all once the server refused the batched shape.
func (r *Recomputer) componentValues(ctx context.Context, c Component, users []string, startedAt time.Time) (map[string]float64, error) {
	src, err := r.source(ctx, c.Collection)
	if err != nil {
		return nil, err
	}
	values := make(map[string]float64, len(users))
	alone := users
	// A refused batched query is tried once more: avg without $avg has a batched fallback.
	for try := 0; len(users) > 1 && try < 2 && !r.unbatched(c.Op).Load(); try++ {
		a, err := r.query(ctx, src, c, users, startedAt, values)
		if !isNotImplemented(err) {
			if err != nil {
				return nil, err
			}
			alone = a
			break
		}
		// For max and min, and for avg the first time, what was refused is the accumulator.
		if c.Op == OpMax || c.Op == OpMin || c.Op == OpAvg && !r.lacksAccumulator(OpAvg).Load() {
			r.learnLacksAccumulator(c.Op, err)
		} else if r.unbatched(c.Op).CompareAndSwap(false, true) {
			r.log.Info("server lacks what the batched query needs; these components use one query per user",
				"op", string(c.Op), "err", err)
		}
	}
	for _, u := range alone {
		if values[u], err = r.userValue(ctx, src, c, u, startedAt); err != nil && len(users) > 1 {
			return nil, fmt.Errorf("for user %q: %w", u, err)
		} else if err != nil {
			return nil, err
		}
	}
	return values, nil
}

// userValue is c's value for u alone: its accumulator while the server has
// it, the way round (a sorted find for max and min) from then on.
func (r *Recomputer) userValue(ctx context.Context, src source, c Component, u string, startedAt time.Time) (float64, error) {
	lacks := r.lacksAccumulator(c.Op) // nil for the ops every server has
	values := map[string]float64{}
	for {
		if (c.Op == OpMax || c.Op == OpMin) && lacks.Load() {
			return extremeBySort(ctx, src, c.Op, c.Field, numericOnly(userMatch(c, []string{u}, startedAt), c.Field))
		}
		withAccumulator := lacks != nil && !lacks.Load()
		_, err := r.query(ctx, src, c, []string{u}, startedAt, values)
		if !withAccumulator || !isNotImplemented(err) {
			return values[u], err
		}
		r.learnLacksAccumulator(c.Op, err)
	}
}

// query runs c's query for users into values (avg without $avg: two aggregations); alone is run's.
func (r *Recomputer) query(ctx context.Context, src source, c Component, users []string, startedAt time.Time, values map[string]float64) (alone []string, err error) {
	f := userMatch(c, users, startedAt)
	batched := len(users) > 1
	if c.Op == OpAvg && r.lacksAccumulator(OpAvg).Load() {
		// A $sum and a count as two aggregations (one accumulator per $group: see pipeline), divided here.
		f = numericOnly(f, c.Field)
		sums, counts := map[string]float64{}, map[string]float64{}
		p, key := pipeline(c, OpSum, f, batched)
		if alone, err = run(ctx, src, p, key, users, sums); err != nil {
			return nil, fmt.Errorf("summing %s for the mean: %w", c.Field, err)
		}
		// Same $match: the same documents, so the same users alone.
		p, key = pipeline(c, OpCount, f, batched)
		if _, err := run(ctx, src, p, key, users, counts); err != nil {
			return nil, fmt.Errorf("counting %s values for the mean: %w", c.Field, err)
		}
		for u, n := range counts {
			if n > 0 { // else 0, also when the documents changed between the two reads
				values[u] = sums[u] / n
			}
		}
		return alone, nil
	}
	p, key := pipeline(c, c.Op, f, batched)
	if p == nil {
		return nil, fmt.Errorf("unknown op %q", c.Op)
	}
	return run(ctx, src, p, key, users, values)
}

// pipeline is op's aggregation over the documents matching f, and the key of the value in its
// results: one result for a user, {_id: user, v} per user of a batch. One accumulator per
// $group: FerretDB 1.24 answered a second one in the same stage ({n: {$sum: 1}}) with a wrong 0.
func pipeline(c Component, op Op, f bson.D, batched bool) (mongo.Pipeline, string) {
	var user any // one user: a single group
	if batched {
		user = "$" + c.UserField
	}
	match := func(f bson.D) bson.D { return bson.D{{Key: "$match", Value: f}} }
	group := func(acc bson.D) bson.D {
		return bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: user}, {Key: "v", Value: acc}}}}
	}
	count := bson.D{{Key: "$count", Value: "n"}}
	switch op {
	case OpCount:
		if !batched {
			return mongo.Pipeline{match(f), count}, "n"
		}
		return mongo.Pipeline{match(f), group(bson.D{{Key: "$sum", Value: 1}})}, "v"
	case OpSum:
		// $sum skips missing and non-numeric values, which is the contract's "count as 0".
		return mongo.Pipeline{match(f), group(bson.D{{Key: "$sum", Value: "$" + c.Field}})}, "v"
	case OpMax, OpMin, OpAvg:
		return mongo.Pipeline{match(numericOnly(f, c.Field)), group(bson.D{{Key: "$" + string(op), Value: "$" + c.Field}})}, "v"
	case OpDistinct:
		// Values equal as numbers (1, int64 1, 1.0) are one, as in $group, an array is one value,
		// $ne: null excludes null and missing. A batch counts each user's (user, value) groups:
		// $addToSet would hold a user's values in one array (and FerretDB 1.24 lacks it).
		f = withCond(f, c.Field, "$ne", nil)
		if !batched {
			return mongo.Pipeline{match(f), {{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + c.Field}}}}, count}, "n"
		}
		return mongo.Pipeline{
			match(f),
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "u", Value: user}, {Key: "v", Value: "$" + c.Field}}}}}},
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$_id.u"}, {Key: "v", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		}, "v"
	}
	return nil, ""
}

// run runs a pipeline of pipeline's into values: one user's single result
// (none means 0), or a batch's {_id: user, v: value}. alone lists the users
// of a batch that a document with an array in the user field names.
func run(ctx context.Context, src source, p mongo.Pipeline, key string, users []string, values map[string]float64) (alone []string, err error) {
	batched, what, opts := len(users) > 1, "aggregation", options.Aggregate().SetCollation(src.collation) // nil: none
	if batched {
		// One more than the groups expected: the first reply holds them all, no getMore.
		opts.SetBatchSize(int32(len(users) + 1))
		what = "batched aggregation"
	}
	noteRoundTrip(ctx)
	cur, err := src.coll.Aggregate(ctx, p, opts)
	if err != nil {
		return nil, fmt.Errorf("running %s: %w", what, err)
	}
	defer cur.Close(ctx)
	if !batched {
		values[users[0]] = 0 // no result
	}
	named := map[string]bool{}
	for cur.Next(ctx) {
		if !batched {
			values[users[0]], err = numberAt(cur.Current, key)
			return nil, err
		}
		if u, ok := cur.Current.Lookup("_id").StringValueOK(); !ok {
			// The user field held an array: $group keyed the documents by the
			// whole array, which a per-user $eq matches element by element.
			namesIn(cur.Current.Lookup("_id"), named)
		} else if values[u], err = numberAt(cur.Current, key); err != nil {
			return nil, err
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("reading %s result: %w", what, err)
	}
	return slices.DeleteFunc(slices.Clone(users), func(u string) bool { return !named[u] }), nil
}

// namesIn adds to into the strings that the array v holds, at any depth (a
// dotted user field through arrays of documents yields nested arrays).
func namesIn(v bson.RawValue, into map[string]bool) {
	arr, _ := v.ArrayOK()
	vals, _ := arr.Values() // none unless v is an array (well formed: the server sent it)
	for _, e := range vals {
		if s, ok := e.StringValueOK(); ok {
			into[s] = true
		}
		namesIn(e, into)
	}
}

// numericOnly limits f to documents whose field holds a number (strings sort above numbers: one would
// win a max); {$type: "number"} also matches an array holding a number, hence the $not.
func numericOnly(f bson.D, field string) bson.D {
	f = withCond(f, field, "$type", "number")
	return withCond(f, field, "$not", bson.D{{Key: "$type", Value: "array"}})
}

// extremeBySort is max or min for one user (f) without the accumulator: the first document by field, or 0.
func extremeBySort(ctx context.Context, src source, op Op, field string, f bson.D) (float64, error) {
	opts := options.FindOne().SetSort(bson.D{{Key: field, Value: map[Op]int{OpMax: -1, OpMin: 1}[op]}}).SetCollation(src.collation).
		SetProjection(bson.D{{Key: field, Value: 1}, {Key: "_id", Value: 0}})
	noteRoundTrip(ctx)
	doc, err := src.coll.FindOne(ctx, f, opts).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("finding the %s %s: %w", map[Op]string{OpMax: "largest", OpMin: "smallest"}[op], field, err)
	}
	return numberAt(doc, strings.Split(field, ".")...)
}

// accumulators are the features of the $group accumulators a server may lack (FerretDB 1.24: all).
var accumulators = map[Op]servertraits.Feature{
	OpMax: servertraits.AccumulatorMax, OpMin: servertraits.AccumulatorMin, OpAvg: servertraits.AccumulatorAvg,
}

// lacksAccumulator is set once the server refused op's accumulator; nil for ops every server has.
func (r *Recomputer) lacksAccumulator(op Op) *atomic.Bool {
	if f, ok := accumulators[op]; ok {
		return r.traits.Learnt(f)
	}
	return nil
}

// learnLacksAccumulator records that the server lacks op's $group accumulator, logging it once.
func (r *Recomputer) learnLacksAccumulator(op Op, err error) {
	if r.lacksAccumulator(op).CompareAndSwap(false, true) {
		how := cmp.Or(map[Op]string{OpAvg: "a $sum and a count, as two queries"}[op], "one sorted find per user")
		r.log.Info(fmt.Sprintf("server lacks the $%s $group accumulator; %s components use %s", op, op, how), "err", err)
	}
}

// unbatched is the flag set once the server has refused op's batched shape;
// for max and min, their accumulator's, which that shape needs.
func (r *Recomputer) unbatched(op Op) *atomic.Bool {
	if op == OpMax || op == OpMin {
		return r.lacksAccumulator(op)
	}
	return r.traits.Learnt(servertraits.BatchedShape(string(op)))
}

func numberAt(doc bson.Raw, path ...string) (float64, error) {
	v, err := doc.LookupErr(path...)
	if err != nil {
		return 0, fmt.Errorf("reading %s from result %s: %w", strings.Join(path, "."), doc, err)
	}
	if n, ok := number(v); ok {
		return n, nil
	}
	return 0, fmt.Errorf("result %s holds a %s, not a number", doc, v.Type)
}

// isNotImplemented reports the server lacking a feature: code 238, or FerretDB's "... is not implemented yet".
func isNotImplemented(err error) bool {
	var se mongo.ServerError
	return err != nil && (errors.As(err, &se) && se.HasErrorCode(238) || strings.Contains(strings.ToLower(err.Error()), "not implemented"))
}

// number converts the BSON numeric types (int32, int64, double, decimal128) to float64, or !ok.
func number(v bson.RawValue) (n float64, ok bool) {
	d, ok := v.Decimal128OK()
	if !ok {
		return v.AsFloat64OK()
	}
	// String gives e.g. "2.5", "1.5E+3", "NaN" or "-Infinity", all of which
	// ParseFloat reads; beyond float64's range it saturates to ±Inf.
	n, err := strconv.ParseFloat(d.String(), 64)
	return n, err == nil || errors.Is(err, strconv.ErrRange)
}
