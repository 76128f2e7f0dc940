package scoring

import (
	"context"
	"sync/atomic"
)

// roundTripsKey carries a refresh's round-trip tally in its context.
//
// The tally rides in the context rather than in parameters because the
// commands are sent several layers down (a component's query, a fallback
// per-user query, the OCC read, a conflict retry), all of which already take
// the context; a Recomputer or Store shared by concurrent refreshes has no
// other per-call place to keep it.
type roundTripsKey struct{}

// withRoundTrips returns a context whose commands are tallied in the returned
// counter.
func withRoundTrips(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, roundTripsKey{}, n), n
}

// noteRoundTrip records one command about to be sent, if ctx is tallied.
// One driver call is one command here: every query of this package gets its
// whole answer in the first reply (a single result document, or a batchSize
// above the most documents the answer can hold), so no getMore follows,
// except for an answer beyond 16 MiB, whose getMore is not counted.
func noteRoundTrip(ctx context.Context) {
	if n, ok := ctx.Value(roundTripsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}
