package consumer

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The embedded server ignores hints, so what MongoDB does with a hint
// naming a missing index (BadValue, code 2) is played here.
func TestHintsFallBackThroughTheListAndRetryThePreferredIndex(t *testing.T) {
	badHint := mongo.CommandError{Code: 2, Message: "error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index"}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := newHints(absorbIndex, legacyAbsorbIndex)
	h.now = func() time.Time { return now }

	same := func(got any, want bson.D) bool {
		d, ok := got.(bson.D)
		if want == nil {
			return got == nil
		}
		return ok && indexName(d) == indexName(want)
	}
	steps := []struct {
		err  error
		want bson.D // the hint sent after err
	}{
		{nil, absorbIndex},
		{badHint, legacyAbsorbIndex}, // the new index is still being built
		{badHint, nil},               // neither exists: plan freely
	}
	for i, s := range steps {
		if i > 0 && !h.refused(s.err) {
			t.Fatalf("step %d: a refused hint was not taken as one", i)
		}
		if got := h.hint(); !same(got, s.want) {
			t.Fatalf("step %d: hint %v, want %v", i, got, s.want)
		}
	}
	if h.refused(badHint) {
		t.Error("with no hint sent, a BadValue is the query's own error, not a refused hint")
	}
	for _, err := range []error{nil, errors.New("connection reset"), mongo.CommandError{Code: 50, Message: "MaxTimeMSExpired"}} {
		if h.refused(err) {
			t.Errorf("%v taken for a refused hint", err)
		}
	}

	now = now.Add(hintRetry - time.Second)
	if got := h.hint(); got != nil {
		t.Errorf("asked for a refused index again before hintRetry: %v", got)
	}
	now = now.Add(time.Second)
	if got := h.hint(); !same(got, absorbIndex) {
		t.Errorf("after hintRetry: hint %v, want the preferred index again (its build has had time to finish)", got)
	}
}
