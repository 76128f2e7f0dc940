package servertraits

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// IDIndexName names the _id index every collection has
// (IndexConstants::kIdIndexName in MongoDB's source).
const IDIndexName = "_id_"

// IndexName is the name the server gives an unnamed index on keys: each key
// and its value joined by "_" ({createdAt: 1, _id: 1} is "createdAt_1__id_1"),
// the _id index excepted. Hints name their index: MongoDB refuses a hint by
// key pattern that two indexes share (differing by collation or filter).
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
// (query_planner.cpp) answers BadValue (2) "hint provided does not correspond
// to an existing index" ("bad hint" in older releases), and IndexNotFound
// (27) "Hint matched multiple indexes, must hint by index name". A BadValue
// not mentioning the hint is the query's own error, which no hint would
// cure. FerretDB ignores hints.
func RefusesHint(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(27) || se.HasErrorCodeWithMessage(2, "hint"))
}

// sqliteOverload are the messages FerretDB 1.24's SQLite backend passes on
// as an InternalError (code 1) when it is overloaded, not when the command
// is wrong: the single writer's lock not granted within its busy timeout
// ("database is locked", SQLITE_BUSY and extended codes such as 517), and a
// query cut short when its maxTimeMS ran out ("interrupted (9)",
// SQLITE_INTERRUPT, which FerretDB does not convert to MaxTimeMSExpired on
// every path). Recorded from the embedded server under load.
var sqliteOverload = []string{"database is locked", "interrupted (9)"}

// Overloaded reports an error that says the embedded server was too busy to
// answer, which is "not now", as a MongoDB timeout is: retried, and never
// charged to the work that met it. Neither message can come from MongoDB.
func Overloaded(err error) bool {
	var se mongo.ServerError
	// With the code: a write error of a bulk write carries its own.
	return errors.As(err, &se) && slices.ContainsFunc(sqliteOverload, func(m string) bool {
		return se.HasErrorCodeWithMessage(1, m)
	})
}
