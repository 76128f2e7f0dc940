package consumer

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// hintRetry is how long a query goes without a refused index before asking
// for it again (an index still building at start is used once ready).
const hintRetry = 5 * time.Minute

// hints are the indexes one query hints, in order of preference, by name
// (indexName): MongoDB refuses a key pattern that two indexes match (an
// operator's with another collation or partial filter). A hint naming no
// index (missing, failed, still building) is refused too: the query then
// hints the next, and none after the last, so a missing index costs speed,
// never the query. Used by the claimer alone.
type hints struct {
	indexes []bson.D
	skip    int // leading indexes refused; len(indexes): hint none
	retryAt time.Time
	now     func() time.Time
}

func newHints(indexes ...bson.D) *hints {
	return &hints{indexes: indexes, now: time.Now}
}

// hint is the preferred index's name for SetHint, nil when all were refused.
func (h *hints) hint() any {
	if h.skip > 0 && !h.now().Before(h.retryAt) {
		h.skip = 0
	}
	if h.skip < len(h.indexes) {
		return indexName(h.indexes[h.skip])
	}
	return nil
}

// refused reports whether err refuses the hint just sent, and moves on to
// the next index: the caller runs the query again.
func (h *hints) refused(err error) bool {
	if h.skip >= len(h.indexes) || !servertraits.RefusesHint(err) {
		return false
	}
	h.skip++
	h.retryAt = h.now().Add(hintRetry)
	return true
}

// indexName is the server's name for the index on keys (EnsureIndexes
// names none, so deployed queues have exactly these).
func indexName(keys bson.D) string { return servertraits.IndexName(keys) }
