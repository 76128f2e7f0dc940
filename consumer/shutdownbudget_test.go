package consumer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestShutdownEndsWithinItsBudget begins shutdown while one user's refresh
// runs (it ends only when cancelled) and a claim round hangs in its absorb,
// the lease of the user it claims already written. The round is cancelled
// at once and hands its user back; the refresh gets SHUTDOWN_TIMEOUT on the
// clock; Run returns after no more clock time than ShutdownBudget allows,
// with no lease left. OpTimeout is twice what the test waits for anything,
// so a round left to run to its deadline, as one was before shutdown
// cancelled it, fails the test.
func TestShutdownEndsWithinItsBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "slow")

	// Once armed, the first read of the queue after a lease insert (the
	// absorb of a round that has won its users) hangs until its context ends.
	var stage atomic.Int32 // 0 off, 1 armed, 2 a lease insert seen, 3 hung
	hung := make(chan struct{})
	ended := make(chan error, 1)
	mon := &mongotest.Commands{OnStarted: func(ctx context.Context, e mongotest.Command) {
		switch {
		case e.Name == "insert" && e.Collection == "score_claims":
			stage.CompareAndSwap(1, 2)
		case e.Name == "find" && e.Collection == "score_events" && stage.CompareAndSwap(2, 3):
			close(hung)
			<-ctx.Done()
			ended <- ctx.Err()
		}
	}}
	watched := b.watchedBy(t, mon.Monitor(nil))

	rec, inRefresh, release, cancelled := heldRefresh() // only the shutdown timeout ends it
	clk := clocktest.NewFake(time.Now())
	cfg := Config{ShutdownTimeout: 7 * time.Second, OpTimeout: 2 * failAfter, PollInterval: time.Hour}
	c, _ := watched.newConsumer(t, rec, consumerOpts{clock: clk, cfg: cfg})
	cancel, wait := startCancel(t, c)
	// Should the test fail before the shutdown timeout, the refresh lets
	// Run's cleanup return (cleanups run last registered first).
	var released atomic.Bool
	t.Cleanup(func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	})
	await(t, inRefresh, "the refresh of slow to start")

	stage.Store(1)
	b.enqueue(t, "ann")
	c.Wake()
	if err := clk.BlockUntilWaiting(boundedCtx(t), wakeGap); err != nil {
		t.Fatalf("the woken claim round never waited its %v: %v", wakeGap, err)
	}
	clk.Advance(wakeGap)
	await(t, hung, "the claim round of ann to reach its absorb")
	if n := b.count(t, b.colls.Claims, nil); n != 2 {
		t.Fatalf("%d leases while ann's round absorbs, want 2 (slow's and ann's)", n)
	}

	cancel()
	if err := await(t, ended, "the hung absorb to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("the absorb in flight ended with %v, want cancelled by the shutdown", err)
	}
	// From here on, what the shutdown waits for on the clock is advanced as
	// it comes: only the shutdown timeout should be.
	var spent time.Duration
	if err := clk.BlockUntilWaiting(boundedCtx(t), cfg.ShutdownTimeout); err != nil {
		t.Fatalf("shutdown never began its %v wait for running refreshes: %v", cfg.ShutdownTimeout, err)
	}
	released.Store(true) // from here, only the timeout may end the refresh
	clk.Advance(cfg.ShutdownTimeout)
	spent += cfg.ShutdownTimeout
	await(t, cancelled, "the shutdown timeout to cancel slow's refresh")
	returned := make(chan error, 1)
	go func() { returned <- wait() }()
	if err := await(t, returned, "Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if budget := ShutdownBudget(cfg.OpTimeout, cfg.ShutdownTimeout); spent > budget {
		t.Errorf("shutdown took %v on the clock, over its budget %v", spent, budget)
	}
	if n := b.count(t, b.colls.Claims, nil); n != 0 {
		t.Errorf("%d leases left after shutdown, want 0: the cancelled round's and the cancelled refresh's are released", n)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 2 {
		t.Errorf("the queue holds %d entries, want 2: neither user was refreshed", n)
	}
	if n := rec.callsOf("ann"); n != 0 {
		t.Errorf("ann was refreshed %d times after shutdown began, want 0", n)
	}
}

func TestShutdownBudgetAddsItsStages(t *testing.T) {
	t.Parallel()
	// The defaults: a cancelled round's cleanup, 25 s for refreshes, one
	// OpTimeout for the final flush.
	if got, want := ShutdownBudget(0, 0), claimCleanup+DefaultShutdownTimeout+DefaultOpTimeout; got != want {
		t.Errorf("ShutdownBudget(0, 0) = %v, want %v", got, want)
	}
	if got, want := ShutdownBudget(time.Second, 5*time.Second), claimCleanup+6*time.Second; got != want {
		t.Errorf("ShutdownBudget(1s, 5s) = %v, want %v", got, want)
	}
}
