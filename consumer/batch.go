package consumer

import (
	"context"
	"slices"
	"sync"
	"time"
)

// BatchRefresher recomputes and stores many users' scores in a fixed number
// of round trips for the batch (scoring.Refresher), and returns each user's
// outcome (nil: stored). startedAt is when the batch's refresh began: every
// user's recompute sees every source write made before it.
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
// one that gets it takes its share of the users waiting: the waiting
// divided by the free slots, rounded up, at most max. Spreading beats
// filling wherever latency binds: 64 waiting users on 16 free slots run as
// 16 batches of 4, each as quick as a batch of one, where batches of 16
// would leave 12 slots idle. A batch grows past its share only while every
// slot is busy, which is when fewer, larger queries pay. The users waiting
// never outnumber the goroutines waiting for a slot, so none is left behind.
type batcher struct {
	mu      sync.Mutex
	waiting []work
	running int // batches holding a slot
}

// SpreadBatch is the batch size when a consumer holds as many users as it
// may: an even share of them per slot, at most maxBatch (4 with the
// defaults). Capacity models use it: a batch runs that many, not maxBatch.
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

// take is called by a goroutine that holds one of limit slots: it returns
// its batch, at most maxBatch users, or nothing when the others took them
// all (the caller gives its slot back). A batch holds its slot until done.
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

// drop takes one waiting user, if any, for a goroutine that will never get
// a slot (shutdown): the caller releases it.
func (g *batcher) drop() []work {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		return nil
	}
	w := g.waiting[0]
	g.waiting = slices.Delete(g.waiting, 0, 1)
	return []work{w}
}
