package servertraits

import (
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// IDIndexName names the _id index every collection has: the server builds
// it and always names it "_id_" (IndexConstants::kIdIndexName in MongoDB's
// source).
const IDIndexName = "_id_"

// IndexName is the name the server gives an index built on keys without a
// name: each key and its value joined by "_" ({createdAt: 1, _id: 1} is
// "createdAt_1__id_1"), the _id index excepted (IDIndexName). Hints name
// their index: a hint by key pattern is ambiguous where two indexes share
// it (they differ by collation or partial filter), and MongoDB refuses it.
func IndexName(keys bson.D) string {
	if len(keys) == 1 && keys[0].Key == "_id" && fmt.Sprint(keys[0].Value) == "1" {
		return IDIndexName
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s_%v", k.Key, k.Value)
	}
	return strings.Join(parts, "_")
}

// RefusesHint reports the server refusing a hint. MongoDB's planner
// (src/mongo/db/query/query_planner.cpp) answers BadValue (2) "hint
// provided does not correspond to an existing index" ("bad hint" in older
// releases) when no index matches, and IndexNotFound (27) "Hint matched
// multiple indexes, must hint by index name" when a key pattern matches
// two. A BadValue that does not mention the hint is the query's own error
// (a filter the server rejects), which no other hint would cure.
// FerretDB accepts any hint and ignores it.
func RefusesHint(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	return se.HasErrorCode(27) || se.HasErrorCodeWithMessage(2, "hint")
}
