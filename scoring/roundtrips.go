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
// One driver call is one command here: every query and write of this package
// asks for its whole answer in the first reply (see batchSize), so no getMore
// follows except for answers beyond 16 MiB, which are not counted.
func noteRoundTrip(ctx context.Context) {
	if n, ok := ctx.Value(roundTripsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}
