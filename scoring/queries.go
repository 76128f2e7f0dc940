package scoring

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Each function here answers one component with a single command whose result
// fits in the first batch, so the cursor is closed by the server and no
// getMore or killCursors follows: one round trip.

// source is a source collection as the queries address it: with the simple
// collation where the collection's default collation is another one, so that
// usernames and filter strings compare exactly (binary) whatever the
// collection's default, as user_scores' _id does; without any collation
// option otherwise (FerretDB refuses it).
type source struct {
	coll      *mongo.Collection
	collation *options.Collation // nil: the collection's default is simple
}

var simpleCollation = &options.Collation{Locale: "simple"}

func (s source) aggregate(ctx context.Context, pipeline mongo.Pipeline, batchSize int32) (*mongo.Cursor, error) {
	opts := options.Aggregate()
	if batchSize > 0 {
		opts.SetBatchSize(batchSize)
	}
	if s.collation != nil {
		opts.SetCollation(s.collation)
	}
	noteRoundTrip(ctx)
	return s.coll.Aggregate(ctx, pipeline, opts)
}

// countMatching counts the documents matching f.
func countMatching(ctx context.Context, src source, f bson.D) (float64, error) {
	return firstNumber(ctx, src, mongo.Pipeline{
		{{Key: "$match", Value: f}},
		{{Key: "$count", Value: "n"}},
	}, "n")
}

// countDistinct counts the distinct non-null values of field among the
// documents matching f. Values equal as numbers (1, int64 1, 1.0) are one
// value, as in MongoDB's $group; an array counts as one value.
func countDistinct(ctx context.Context, src source, field string, f bson.D) (float64, error) {
	// $ne: null excludes both null and missing fields.
	f = withCond(f, field, "$ne", nil)
	return firstNumber(ctx, src, mongo.Pipeline{
		{{Key: "$match", Value: f}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + field}}}},
		{{Key: "$count", Value: "n"}},
	}, "n")
}

// groupValue applies one $group accumulator (e.g. {$sum: "$points"}) to the
// documents matching f; 0 when none match.
func groupValue(ctx context.Context, src source, f, accumulator bson.D) (float64, error) {
	// One accumulator per $group on purpose: FerretDB 1.24 answered a second
	// accumulator in the same stage ({n: {$sum: 1}}) with a wrong 0.
	return firstNumber(ctx, src, mongo.Pipeline{
		{{Key: "$match", Value: f}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}, {Key: "v", Value: accumulator}}}},
	}, "v")
}

// extremeValue returns the largest (max) or smallest (min) numeric value of
// field among the documents matching f, or 0 when there is none.
func (r *Recomputer) extremeValue(ctx context.Context, src source, op Op, field string, f bson.D) (float64, error) {
	f = numericOnly(f, field)
	lacks := r.lacksAccumulator(op)
	if !lacks.Load() {
		v, err := groupValue(ctx, src, f, bson.D{{Key: accumulatorOf(op), Value: "$" + field}})
		if !isNotImplemented(err) {
			return v, err
		}
		r.learnLacksAccumulator(op, err)
	}
	return extremeBySort(ctx, src, op, field, f)
}

// avgValue returns the mean of the numeric values of field among the
// documents matching f, or 0 when there is none.
func (r *Recomputer) avgValue(ctx context.Context, src source, field string, f bson.D) (float64, error) {
	f = numericOnly(f, field)
	if !r.noAvgAccumulator.Load() {
		v, err := groupValue(ctx, src, f, bson.D{{Key: "$avg", Value: "$" + field}})
		if !isNotImplemented(err) {
			return v, err
		}
		r.learnLacksAccumulator(OpAvg, err)
	}
	// Without $avg: the sum and the count as two queries (two accumulators
	// in one $group come back wrong on FerretDB 1.24), divided here, exactly
	// as the batched path divides its two answers.
	sum, err := groupValue(ctx, src, f, bson.D{{Key: "$sum", Value: "$" + field}})
	if err != nil {
		return 0, fmt.Errorf("summing %s for the mean: %w", field, err)
	}
	n, err := countMatching(ctx, src, f)
	if err != nil {
		return 0, fmt.Errorf("counting %s values for the mean: %w", field, err)
	}
	return mean(sum, n), nil
}

// mean is sum/n, 0 for no values.
func mean(sum, n float64) float64 {
	if n == 0 {
		return 0
	}
	return sum / n
}

// numericOnly limits f to documents whose field holds a number.
func numericOnly(f bson.D, field string) bson.D {
	// Without this a string would win a max, as strings sort above numbers.
	// {$type: "number"} also matches an array holding a number; arrays are not
	// numbers (and would sort above them), hence the $not.
	f = withCond(f, field, "$type", "number")
	return withCond(f, field, "$not", bson.D{{Key: "$type", Value: "array"}})
}

// extremeBySort is extremeValue for servers without the $max or $min
// accumulator: the first document sorted by field, descending for max.
func extremeBySort(ctx context.Context, src source, op Op, field string, f bson.D) (float64, error) {
	dir := 1
	if op == OpMax {
		dir = -1
	}
	opts := options.FindOne().
		SetSort(bson.D{{Key: field, Value: dir}}).
		SetProjection(bson.D{{Key: field, Value: 1}, {Key: "_id", Value: 0}})
	if src.collation != nil {
		opts.SetCollation(src.collation)
	}
	noteRoundTrip(ctx)
	doc, err := src.coll.FindOne(ctx, f, opts).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("finding the %s %s: %w", map[Op]string{OpMax: "largest", OpMin: "smallest"}[op], field, err)
	}
	return numberAt(doc, strings.Split(field, ".")...)
}

// accumulatorOf is the $group accumulator that computes op for a user.
func accumulatorOf(op Op) string { return "$" + string(op) }

// lacksAccumulator is the flag set once the server has refused op's
// accumulator.
func (r *Recomputer) lacksAccumulator(op Op) *atomic.Bool {
	switch op {
	case OpMax:
		return r.noMaxAccumulator
	case OpMin:
		return r.noMinAccumulator
	case OpAvg:
		return r.noAvgAccumulator
	}
	return nil
}

// learnLacksAccumulator records that the server lacks op's $group
// accumulator, logging it the first time.
func (r *Recomputer) learnLacksAccumulator(op Op, err error) {
	if !r.lacksAccumulator(op).CompareAndSwap(false, true) {
		return
	}
	how := "one sorted find per user"
	if op == OpAvg {
		how = "a $sum and a count, as two queries"
	}
	r.log.Info(fmt.Sprintf("server lacks the %s $group accumulator; %s components use %s", accumulatorOf(op), op, how),
		"err", err)
}

// firstNumber runs pipeline and reads the number at key of its first result
// document; no document means 0.
func firstNumber(ctx context.Context, src source, pipeline mongo.Pipeline, key string) (float64, error) {
	cur, err := src.aggregate(ctx, pipeline, 0)
	if err != nil {
		return 0, fmt.Errorf("running aggregation: %w", err)
	}
	defer cur.Close(ctx)
	if !cur.Next(ctx) {
		if err := cur.Err(); err != nil {
			return 0, fmt.Errorf("reading aggregation result: %w", err)
		}
		return 0, nil
	}
	return numberAt(cur.Current, key)
}

// numberAt reads the numeric value at path in doc.
func numberAt(doc bson.Raw, path ...string) (float64, error) {
	v, err := doc.LookupErr(path...)
	if err != nil {
		return 0, fmt.Errorf("reading %s from result %s: %w", strings.Join(path, "."), doc, err)
	}
	n, ok := number(v)
	if !ok {
		return 0, fmt.Errorf("result %s holds a %s, not a number", doc, v.Type)
	}
	return n, nil
}

// isNotImplemented reports whether err is the server saying it lacks a
// feature (code 238 NotImplemented, or FerretDB's "... is not implemented yet").
func isNotImplemented(err error) bool {
	if err == nil {
		return false
	}
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(238) {
		return true
	}
	return strings.Contains(strings.ToLower(err.Error()), "not implemented")
}
