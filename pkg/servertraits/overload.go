package servertraits

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// internalError is the code FerretDB answers with for anything its backend
// reports that it has no MongoDB code for (InternalError).
const internalError = 1

// sqliteOverload are the messages FerretDB 1.24's SQLite backend passes on
// as an InternalError when it is overloaded, not when the command is wrong:
// the single writer's lock not granted within its busy timeout ("database
// is locked", SQLITE_BUSY and its extended codes such as 517), and a query
// cut short when its maxTimeMS ran out ("interrupted (9)", SQLITE_INTERRUPT:
// MongoDB answers that case with MaxTimeMSExpired, code 50, and FerretDB's
// handleMaxTimeMSError does not convert it on every path). Recorded from the
// embedded server under load in TestFleetDrainsAndClosesEveryCursor.
var sqliteOverload = []string{"database is locked", "interrupted (9)"}

// Overloaded reports an error that says the embedded server (FerretDB over
// SQLite) was too busy to answer, which is "not now", as a MongoDB timeout
// is: retried, and never charged to the work that met it. Neither message
// can come from MongoDB, whose overloads carry codes of their own.
func Overloaded(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	for _, m := range sqliteOverload {
		// With the code: a write error of a bulk write carries its own.
		if se.HasErrorCodeWithMessage(internalError, m) {
			return true
		}
	}
	return false
}
