package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

func TestTransientClassification(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"nil":                 {nil, false},
		"deadline":            {fmt.Errorf("refreshing user: %w", context.DeadlineExceeded), true},
		"network label":       {mongo.CommandError{Code: 0, Labels: []string{"NetworkError"}}, true},
		"retryable write":     {mongo.CommandError{Code: 11000, Labels: []string{"RetryableWriteError"}}, true},
		"stepped down":        {mongo.CommandError{Code: 189}, true},
		"shutdown":            {fmt.Errorf("wrapped: %w", mongo.CommandError{Code: 91}), true},
		"server selection":    {topology.ServerSelectionError{Wrapped: errors.New("no server")}, true},
		"bad query":           {mongo.CommandError{Code: 2, Message: "BadValue"}, false},
		"duplicate key":       {mongo.CommandError{Code: 11000}, false},
		"a scorer bug":        {errors.New("refresh panicked: index out of range"), false},
		"write conflict loop": {errors.New("scoring: too many version conflicts"), false},
		// What the embedded server (FerretDB 1.24 over SQLite) answered under
		// load in TestFleetDrainsAndClosesEveryCursor, messages as recorded.
		"embedded server's lock": {fmt.Errorf("inserting 8 leases: %w", mongo.CommandError{Code: 1, Name: "InternalError",
			Message: "[msg_insert.go:168 handler.(*Handler).MsgInsert] [collection.go:135 sqlite.(*collection).InsertAll.func1] database is locked (517)"}), true},
		"embedded server's maxTimeMS": {mongo.CommandError{Code: 1, Name: "InternalError",
			Message: "[msg_find.go:344 handler.handleMaxTimeMSError] [collection.go:94 sqlite.(*collection).Query] interrupted (9)"}, true},
		"embedded server's lock in a bulk write": {mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Code: 1,
			Message: "[msg_update.go:133 handler.(*Handler).updateDocument] database is locked (517)"}}}}, true},
		"another internal error": {mongo.CommandError{Code: 1, Name: "InternalError", Message: "unexpected document shape"}, false},
		"the message alone":      {errors.New("database is locked"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient(%v) = %v, want %v", name, tc.err, got, tc.want)
		}
	}
}
