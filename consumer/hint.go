package consumer

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// hintRetry is how long a query goes without an index the server refused
// before it asks for that index again.
const hintRetry = 5 * time.Minute

// hints are the indexes one query hints, in order of preference, sent by
// name (indexName): a key pattern matches every index on those keys, and
// MongoDB refuses it outright when two match (the same keys with another
// collation or partial filter, which an operator may build). MongoDB
// refuses a hint that names no index it has: one missing, one whose build
// failed, or one a rolling upgrade has just added and whose build is still
// running. The query then hints the next index, and none after the last,
// so a missing index costs speed and never fails the query. After hintRetry
// the preferred index is asked for again, so an index that was still being
// built when the process started is used once it is ready.
//
// Hints are used by one goroutine (the claim loop's claimer).
type hints struct {
	indexes []bson.D
	skip    int // leading indexes refused; len(indexes): hint none
	retryAt time.Time
	now     func() time.Time
}

func newHints(indexes ...bson.D) *hints {
	return &hints{indexes: indexes, now: time.Now}
}

// hint is what to pass to the query's SetHint: the preferred index's name,
// or nil when every index was refused.
func (h *hints) hint() any {
	if h.skip > 0 && !h.now().Before(h.retryAt) {
		h.skip = 0
	}
	if h.skip < len(h.indexes) {
		return indexName(h.indexes[h.skip])
	}
	return nil
}

// refused reports whether err is the server refusing the hint just sent,
// and if so moves on to the next index: the caller runs the query again.
// With no hint sent there is nothing to move on to.
func (h *hints) refused(err error) bool {
	if h.skip >= len(h.indexes) || !servertraits.RefusesHint(err) {
		return false
	}
	h.skip++
	h.retryAt = h.now().Add(hintRetry)
	return true
}

// indexName is the name of the index on keys that EnsureIndexes builds:
// it names none, so the server names it (servertraits.IndexName), and
// deployed queues have exactly these names.
func indexName(keys bson.D) string { return servertraits.IndexName(keys) }
