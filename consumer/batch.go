package consumer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// BatchRefresher recomputes and stores many users' scores in a fixed number
// of round trips for the batch (scoring.Refresher), and returns each user's
// outcome (nil: stored). startedAt is when the batch's refresh began: every
// user's recompute sees every source write made before it.
type BatchRefresher interface {
	RefreshBatch(ctx context.Context, users []string, startedAt time.Time) map[string]error
}

// batcher groups claimed users into refresh batches without a tick barrier.
// The first user to arrive leads a new batch: it waits for a refresh slot,
// and users claimed meanwhile join its batch (under load, batches fill while
// they wait for a slot); once it has the slot, a batch that is not yet full
// waits at most BatchLinger for company, then runs. Parallelism is bounded
// in batches: one slot each.
type batcher struct {
	max int

	mu      sync.Mutex
	forming *batch // the batch users join; nil when none
}

type batch struct {
	works []work
	full  chan struct{} // closed when max users joined
	done  chan struct{} // closed when every member's outcome is handed on
}

// join adds w to the forming batch; leader is true for the first member,
// which must run the batch (or release it) and close done.
func (g *batcher) join(w work) (b *batch, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forming == nil {
		g.forming = &batch{full: make(chan struct{}), done: make(chan struct{})}
		leader = true
	}
	b = g.forming
	b.works = append(b.works, w)
	if len(b.works) >= g.max {
		close(b.full)
		g.forming = nil
	}
	return b, leader
}

// seal closes b to new members and returns them.
func (g *batcher) seal(b *batch) []work {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forming == b {
		g.forming = nil
	}
	return slices.Clone(b.works)
}

// linger waits until b is full, d passes or ctx ends.
func (b *batch) linger(ctx context.Context, clk clock.Clock, d time.Duration) {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.full:
	case <-t.C():
	case <-ctx.Done():
	}
}
