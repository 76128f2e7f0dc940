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
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient(%v) = %v, want %v", name, tc.err, got, tc.want)
		}
	}
}
