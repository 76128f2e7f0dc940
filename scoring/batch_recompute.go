package scoring

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// RecomputeBatch computes the scores of users as of startedAt, exactly as
// Recompute would for each of them, with one aggregation per component for
// the whole batch: one round trip per component per batch instead of per
// user. The result has an entry for every user, repeats removed; a user with
// no source documents gets 0 for every component.
//
// A component whose batched shape the server lacks (FerretDB 1.24 has no $max
// or $min accumulator) falls back to one query per user; the Recomputer
// learns that once, at the cost of one refused command, and logs it once.
// Without $avg, an avg component stays batched as two aggregations, a $sum
// and a count, divided as Recompute divides them. Users whose
// documents hold an array in the user field are also computed one query each
// for that component, so that such a document counts for every user it names,
// as it does in Recompute. A batch above MaxBatchUsers users is split into
// chunks of its own round trips.
//
// Any failing query fails the whole batch: the error says which component.
func (r *Recomputer) RecomputeBatch(ctx context.Context, users []string, startedAt time.Time) (map[string]Result, error) {
	out := make(map[string]Result, len(users))
	for _, chunk := range batchChunks(users) {
		for _, u := range chunk {
			out[u] = Result{Components: make(map[string]float64, len(r.rules.Components))}
		}
		for _, c := range r.rules.Components {
			values, err := r.componentValues(ctx, c, chunk, startedAt)
			if err != nil {
				return nil, fmt.Errorf("computing component %q (%s over %s) for a batch of %d users: %w", c.Name, c.Op, c.Collection, len(chunk), err)
			}
			for _, u := range chunk {
				// Same arithmetic, in the same order, as Recompute: the
				// scores are equal to the last bit.
				res := out[u]
				res.Components[c.Name] = values[u]
				res.Score += c.Weight * values[u]
				out[u] = res
			}
		}
	}
	return out, nil
}

// componentValues returns c's value for each of users that has documents.
func (r *Recomputer) componentValues(ctx context.Context, c Component, users []string, startedAt time.Time) (map[string]float64, error) {
	if !r.batchUnsupported(c.Op) {
		values, alone, err := r.batchValues(ctx, c, users, startedAt)
		if err == nil {
			return values, r.valuesOneByOne(ctx, c, values, alone, startedAt)
		}
		if !isNotImplemented(err) {
			return nil, err
		}
		r.learnUnbatched(c, err)
		if c.Op == OpAvg && !r.batchUnsupported(c.Op) {
			// It was $avg that was lacking: the $sum and count shape is
			// batched too.
			values, alone, err := r.batchValues(ctx, c, users, startedAt)
			if err == nil {
				return values, r.valuesOneByOne(ctx, c, values, alone, startedAt)
			}
			if !isNotImplemented(err) {
				return nil, err
			}
			r.learnUnbatched(c, err)
		}
	}
	values := make(map[string]float64, len(users))
	return values, r.valuesOneByOne(ctx, c, values, users, startedAt)
}

// valuesOneByOne sets values[u] for each of users with Recompute's query.
func (r *Recomputer) valuesOneByOne(ctx context.Context, c Component, values map[string]float64, users []string, startedAt time.Time) error {
	for _, u := range users {
		v, err := r.componentValue(ctx, c, u, startedAt)
		if err != nil {
			return fmt.Errorf("for user %q: %w", u, err)
		}
		values[u] = v
	}
	return nil
}

func (r *Recomputer) batchUnsupported(op Op) bool {
	if op == OpMax || op == OpMin {
		return r.lacksAccumulator(op).Load()
	}
	f := r.unbatched[op]
	return f != nil && f.Load()
}

// learnUnbatched records that the server refused c's batched shape, logging
// it the first time. For avg, the first refusal is of $avg, which has a
// batched fallback.
func (r *Recomputer) learnUnbatched(c Component, err error) {
	if c.Op == OpMax || c.Op == OpMin || (c.Op == OpAvg && !r.noAvgAccumulator.Load()) {
		r.learnLacksAccumulator(c.Op, err)
		return
	}
	if f := r.unbatched[c.Op]; f != nil && f.CompareAndSwap(false, true) {
		r.log.Info("server lacks what the batched query needs; these components use one query per user",
			"op", string(c.Op), "err", err)
	}
}

// batchValues runs c's batched aggregation over users. values holds the users
// with documents; alone lists the users to compute one by one because a
// document with an array in the user field names them.
func (r *Recomputer) batchValues(ctx context.Context, c Component, users []string, startedAt time.Time) (values map[string]float64, alone []string, err error) {
	src, err := r.source(ctx, c.Collection)
	if err != nil {
		return nil, nil, err
	}
	if c.Op == OpAvg && r.noAvgAccumulator.Load() {
		return r.batchAvgBySum(ctx, src, c, users, startedAt)
	}
	pipeline, err := batchPipeline(c, users, startedAt)
	if err != nil {
		return nil, nil, err
	}
	return runBatch(ctx, src, pipeline, users)
}

// batchAvgBySum is the batched avg without $avg: a $sum and a count as two
// aggregations (never two accumulators in one $group, which FerretDB 1.24
// answers wrongly), divided per user by mean, as avgValue divides.
func (r *Recomputer) batchAvgBySum(ctx context.Context, src source, c Component, users []string, startedAt time.Time) (map[string]float64, []string, error) {
	f := numericOnly(sourceMatch(c, withCond(nil, c.UserField, "$in", users), startedAt), c.Field)
	sums, alone, err := runBatch(ctx, src, mongo.Pipeline{{{Key: "$match", Value: f}}, batchGroup(c, bson.D{{Key: "$sum", Value: "$" + c.Field}})}, users)
	if err != nil {
		return nil, nil, fmt.Errorf("summing %s for the mean: %w", c.Field, err)
	}
	// Same $match: the same documents, so the same users alone.
	counts, _, err := runBatch(ctx, src, mongo.Pipeline{{{Key: "$match", Value: f}}, batchGroup(c, bson.D{{Key: "$sum", Value: 1}})}, users)
	if err != nil {
		return nil, nil, fmt.Errorf("counting %s values for the mean: %w", c.Field, err)
	}
	values := make(map[string]float64, len(counts))
	for u, n := range counts {
		values[u] = mean(sums[u], n)
	}
	return values, alone, nil
}

// runBatch runs a batched pipeline whose results are {_id: user, v: value}.
func runBatch(ctx context.Context, src source, pipeline mongo.Pipeline, users []string) (values map[string]float64, alone []string, err error) {
	// One more than the groups expected, so the first reply holds them all and
	// the server closes the cursor: no getMore.
	cur, err := src.aggregate(ctx, pipeline, int32(len(users)+1))
	if err != nil {
		return nil, nil, fmt.Errorf("running batched aggregation: %w", err)
	}
	defer cur.Close(ctx)

	inBatch := make(map[string]bool, len(users))
	for _, u := range users {
		inBatch[u] = true
	}
	values = make(map[string]float64, len(users))
	named := map[string]bool{}
	for cur.Next(ctx) {
		if u, ok := cur.Current.Lookup("_id").StringValueOK(); ok {
			if values[u], err = numberAt(cur.Current, "v"); err != nil {
				return nil, nil, err
			}
			continue
		}
		// The user field held an array: $group keyed the documents by the
		// whole array, which a per-user $eq would have matched element by
		// element.
		namesIn(cur.Current.Lookup("_id"), inBatch, named)
	}
	if err := cur.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading batched aggregation result: %w", err)
	}
	for _, u := range users {
		if named[u] {
			alone = append(alone, u)
		}
	}
	return values, alone, nil
}

// namesIn adds to into the strings of inBatch that the array v holds, at any
// depth (a dotted user field through arrays of documents yields nested arrays).
func namesIn(v bson.RawValue, inBatch, into map[string]bool) {
	arr, ok := v.ArrayOK()
	if !ok {
		return
	}
	vals, err := arr.Values()
	if err != nil {
		return // the server sent it, so it is well formed
	}
	for _, e := range vals {
		if s, ok := e.StringValueOK(); ok && inBatch[s] {
			into[s] = true
		}
		namesIn(e, inBatch, into)
	}
}

// batchPipeline is c's query for users: the documents componentFilter would
// match for any of them, grouped by the user field into {_id: user, v: value}.
//
// The usernames go in only as elements of $in, which are literal values: a
// name such as "$gt" or `{"$ne": null}` is never read as an operator.
func batchPipeline(c Component, users []string, startedAt time.Time) (mongo.Pipeline, error) {
	f := sourceMatch(c, withCond(nil, c.UserField, "$in", users), startedAt)
	user := "$" + c.UserField
	group := func(acc bson.D) bson.D { return batchGroup(c, acc) }
	match := func(f bson.D) bson.D { return bson.D{{Key: "$match", Value: f}} }
	switch c.Op {
	case OpCount:
		return mongo.Pipeline{match(f), group(bson.D{{Key: "$sum", Value: 1}})}, nil
	case OpSum:
		return mongo.Pipeline{match(f), group(bson.D{{Key: "$sum", Value: "$" + c.Field}})}, nil
	case OpMax, OpMin, OpAvg:
		return mongo.Pipeline{match(numericOnly(f, c.Field)), group(bson.D{{Key: accumulatorOf(c.Op), Value: "$" + c.Field}})}, nil
	case OpDistinct:
		// Group by (user, value), then count each user's groups: the same
		// $group equality as countDistinct (1, int64 1 and 1.0 are one
		// value), using only $sum, which every server has. $addToSet + $size
		// would hold each user's values in one array and FerretDB 1.24 lacks
		// $addToSet.
		return mongo.Pipeline{
			match(withCond(f, c.Field, "$ne", nil)),
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "u", Value: user}, {Key: "v", Value: "$" + c.Field}}}}}},
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$_id.u"}, {Key: "v", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		}, nil
	}
	return nil, fmt.Errorf("unknown op %q", c.Op)
}

// batchGroup groups c's documents by user into {_id: user, v: acc}; one
// accumulator per $group, as in groupValue.
func batchGroup(c Component, acc bson.D) bson.D {
	return bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + c.UserField}, {Key: "v", Value: acc}}}}
}
