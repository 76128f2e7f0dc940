package servertraits

import (
	"errors"
	"slices"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

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
