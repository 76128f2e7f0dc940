package consumer

import (
	"context"
	"slices"
	"sync"
	"time"
)

// BatchRefresher is a Refresher of many users in a fixed number of round
// trips (scoring.Refresher), returning each user's outcome (nil: stored).
type BatchRefresher interface {
	RefreshBatch(ctx context.Context, users []string, startedAt time.Time) map[string]error
}

// alone is a Refresher as a BatchRefresher: New sets its batches to one user.
type alone struct{ Refresher }

func (a alone) RefreshBatch(ctx context.Context, users []string, startedAt time.Time) map[string]error {
	errs := make(map[string]error, len(users))
	for _, u := range users {
		errs[u] = a.Refresh(ctx, u, startedAt)
	}
	return errs
}

// batcher spreads claimed users over the refresh slots, without a tick
// barrier. Every claimed user brings a goroutine that waits for a slot; the
// one that gets it takes the waiting divided by the free slots, rounded up,
// at most max: 64 users on 16 free slots run as 16 batches of 4, each as
// quick as one user, where batches of 16 would leave 12 slots idle. The users
// waiting never outnumber the goroutines waiting, so none is left behind.
type batcher struct {
	mu      sync.Mutex
	waiting []work
	running int // batches holding a slot
}

// SpreadBatch is the batch size when a consumer holds as many users as it
// may, at most maxBatch (4 with the defaults): what capacity models use.
func SpreadBatch(maxBatch, maxUsersInFlight, slots int) int {
	if slots < 1 {
		return max(1, maxBatch)
	}
	return max(1, min(maxBatch, (maxUsersInFlight+slots-1)/slots))
}

// add queues works for a slot. A claim round adds all its users before any
// of their goroutines can take a share: the first slot does not run alone.
func (g *batcher) add(works ...work) {
	g.mu.Lock()
	g.waiting = append(g.waiting, works...)
	g.mu.Unlock()
}

// take returns the batch of a goroutine holding one of limit slots, or
// nothing when the others took every user (the caller gives its slot back).
func (g *batcher) take(limit, maxBatch int) []work {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		return nil
	}
	// This slot is among the free ones, however low the limit was just set.
	free := max(1, limit-g.running)
	n := min(maxBatch, (len(g.waiting)+free-1)/free)
	out := slices.Clone(g.waiting[:n])
	g.waiting = slices.Delete(g.waiting, 0, n)
	g.running++
	return out
}

// hold notes w holding a slot alone (its last batch failed as a whole).
func (g *batcher) hold(w work) []work {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
	return []work{w}
}

// done notes that a batch taken with take or hold gave its slot back.
func (g *batcher) done() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
}

// drop takes one waiting user, if any, for a goroutine that will never get a slot (shutdown).
func (g *batcher) drop() []work {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(1, len(g.waiting))
	out := slices.Clone(g.waiting[:n])
	g.waiting = slices.Delete(g.waiting, 0, n)
	return out
}
