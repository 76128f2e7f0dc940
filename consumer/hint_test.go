package consumer

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// The embedded server ignores hints, so what MongoDB does with a hint
// naming a missing index (BadValue, code 2) is played here.
func TestHintsFallBackThroughTheListAndRetryThePreferredIndex(t *testing.T) {
	badHint := mongo.CommandError{Code: 2, Message: "error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index"}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := newHints(absorbIndex, legacyAbsorbIndex)
	h.now = func() time.Time { return now }

	same := func(got any, want bson.D) bool {
		if want == nil {
			return got == nil
		}
		name, ok := got.(string)
		return ok && name == servertraits.IndexName(want)
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
	for _, err := range []error{nil, errors.New("connection reset"), mongo.CommandError{Code: 50, Message: "MaxTimeMSExpired"},
		mongo.CommandError{Code: 2, Message: "Unknown type name alias: undefined"}} { // the filter's own error
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

// TestIsBadHintTakesEveryRefusal: MongoDB refuses a hint with BadValue when
// no index matches it (worded "bad hint" before 4.2) and with
// IndexNotFound when a key pattern matches two indexes; each must move the
// query on to its next hint rather than fail every round.
func TestIsBadHintTakesEveryRefusal(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		mongo.CommandError{Code: 2, Message: "error processing query: ns=db.score_events planner returned error :: caused by :: hint provided does not correspond to an existing index"},
		mongo.CommandError{Code: 2, Message: "bad hint"},
		mongo.CommandError{Code: 27, Message: "error processing query: planner returned error :: caused by :: Hint matched multiple indexes, must hint by index name. Matched: kp: { createdAt: 1, _id: 1, username: 1 } name: 'createdAt_1__id_1_username_1' and kp: { createdAt: 1, _id: 1, username: 1 } name: 'window_fr' collation: { locale: \"fr\" }"},
	} {
		if !servertraits.RefusesHint(err) {
			t.Errorf("%v not taken for a refused hint", err)
		}
	}
}

// TestIndexNamesAreTheDeployedOnes: hints name the indexes as MongoDB named
// them when EnsureIndexes built them without a name, which is what every
// deployed queue has (the names are never changed).
func TestIndexNamesAreTheDeployedOnes(t *testing.T) {
	t.Parallel()
	want := map[string]bson.D{
		"createdAt_1__id_1_username_1": windowIndex,
		"username_1_createdAt_1__id_1": absorbIndex,
		"username_1_createdAt_1":       legacyAbsorbIndex,
		"_id_":                         idIndex,
	}
	for name, keys := range want {
		if got := servertraits.IndexName(keys); got != name {
			t.Errorf("servertraits.IndexName(%v) = %q, want %q", keys, got, name)
		}
	}
	b := setup(t)
	cur, err := b.colls.Queue.Indexes().List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var built []struct {
		Name string `bson:"name"`
		Key  bson.D `bson:"key"`
	}
	if err := cur.All(t.Context(), &built); err != nil {
		t.Fatal(err)
	}
	for _, ix := range built {
		if got := servertraits.IndexName(ix.Key); got != ix.Name {
			t.Errorf("the server named the index on %v %q; indexName says %q", ix.Key, ix.Name, got)
		}
	}
	if len(built) != 3 {
		t.Errorf("queue indexes %v, want _id_ and the two EnsureIndexes builds", built)
	}
}
