package scoring

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Each function here answers one component with a single command whose result
// fits in the first batch, so the cursor is closed by the server and no
// getMore or killCursors follows: one round trip.

// countMatching counts the documents matching f.
func countMatching(ctx context.Context, coll *mongo.Collection, f bson.D) (float64, error) {
	return firstNumber(ctx, coll, mongo.Pipeline{
		{{Key: "$match", Value: f}},
		{{Key: "$count", Value: "n"}},
	}, "n")
}

// countDistinct counts the distinct non-null values of field among the
// documents matching f. Values equal as numbers (1, int64 1, 1.0) are one
// value, as in MongoDB's $group; an array counts as one value.
func countDistinct(ctx context.Context, coll *mongo.Collection, field string, f bson.D) (float64, error) {
	// $ne: null excludes both null and missing fields.
	f = withCond(f, field, "$ne", nil)
	return firstNumber(ctx, coll, mongo.Pipeline{
		{{Key: "$match", Value: f}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + field}}}},
		{{Key: "$count", Value: "n"}},
	}, "n")
}

// groupValue applies one $group accumulator (e.g. {$sum: "$points"}) to the
// documents matching f; 0 when none match.
func groupValue(ctx context.Context, coll *mongo.Collection, f, accumulator bson.D) (float64, error) {
	// One accumulator per $group on purpose: FerretDB 1.24 answered a second
	// accumulator in the same stage ({n: {$sum: 1}}) with a wrong 0.
	return firstNumber(ctx, coll, mongo.Pipeline{
		{{Key: "$match", Value: f}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}, {Key: "v", Value: accumulator}}}},
	}, "v")
}

// maxValue returns the largest numeric value of field among the documents
// matching f, or 0 when there is none.
func (r *Recomputer) maxValue(ctx context.Context, coll *mongo.Collection, field string, f bson.D) (float64, error) {
	f = numericOnly(f, field)
	if !r.noMaxAccumulator.Load() {
		v, err := groupValue(ctx, coll, f, bson.D{{Key: "$max", Value: "$" + field}})
		if !isNotImplemented(err) {
			return v, err
		}
		r.learnNoMaxAccumulator(err)
	}
	return maxBySort(ctx, coll, field, f)
}

// numericOnly limits f to documents whose field holds a number.
func numericOnly(f bson.D, field string) bson.D {
	// Without this a string would win a max, as strings sort above numbers.
	// {$type: "number"} also matches an array holding a number; arrays are not
	// numbers (and would sort above them), hence the $not.
	f = withCond(f, field, "$type", "number")
	return withCond(f, field, "$not", bson.D{{Key: "$type", Value: "array"}})
}

// maxBySort is maxValue for servers without the $max accumulator: the first
// document sorted by field descending.
func maxBySort(ctx context.Context, coll *mongo.Collection, field string, f bson.D) (float64, error) {
	opts := options.FindOne().
		SetSort(bson.D{{Key: field, Value: -1}}).
		SetProjection(bson.D{{Key: field, Value: 1}, {Key: "_id", Value: 0}})
	noteRoundTrip(ctx)
	doc, err := coll.FindOne(ctx, f, opts).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("finding the largest %s: %w", field, err)
	}
	return numberAt(doc, strings.Split(field, ".")...)
}

// learnNoMaxAccumulator records that the server lacks the $max accumulator,
// logging it the first time.
func (r *Recomputer) learnNoMaxAccumulator(err error) {
	if r.noMaxAccumulator.CompareAndSwap(false, true) {
		r.log.Info("server lacks the $max $group accumulator; max components use one sorted find per user",
			"err", err)
	}
}

// firstNumber runs pipeline and reads the number at key of its first result
// document; no document means 0.
func firstNumber(ctx context.Context, coll *mongo.Collection, pipeline mongo.Pipeline, key string) (float64, error) {
	noteRoundTrip(ctx)
	cur, err := coll.Aggregate(ctx, pipeline)
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
