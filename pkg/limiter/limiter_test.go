package limiter

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLimitBoundsConcurrencyWhileResizing(t *testing.T) {
	t.Parallel()
	const initial, largest = 4, 16
	l := New(initial)
	var running, maxSeen, done atomic.Int64
	var limitMu sync.Mutex
	allowed := initial // the largest limit in force since the last shrink took effect
	warm := make(chan struct{})
	var wg sync.WaitGroup
	const jobs = 2000
	for i := range jobs {
		wg.Go(func() {
			if err := l.Acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			// Count and check under one lock: a count taken before a
			// shrink and checked after it would blame the limiter for the
			// test's own interleaving.
			limitMu.Lock()
			n := running.Add(1)
			if n > int64(allowed) {
				t.Errorf("%d running with at most %d allowed", n, allowed)
			}
			limitMu.Unlock()
			for {
				m := maxSeen.Load()
				if n <= m || maxSeen.CompareAndSwap(m, n) {
					break
				}
			}
			<-warm // the first jobs hold their slots until every job is in
			if i%7 == 0 {
				time.Sleep(time.Microsecond) // vary hold times
			}
			running.Add(-1)
			done.Add(1)
			l.Release()
		})
	}
	// Every job is in: holding a slot (blocked on warm) or queued. Unless
	// the limiter is broken, exactly the initial limit holds slots.
	for running.Load()+int64(l.Waiting()) < jobs {
		time.Sleep(100 * time.Microsecond)
	}
	if n := running.Load(); n != initial {
		t.Errorf("%d jobs hold a slot with a limit of %d (%d waiting)", n, initial, l.Waiting())
	}
	close(warm)
	// Resize under load. Growing raises the bound at once; shrinking lowers
	// it only once the running work has drained below the new limit.
	rnd := rand.New(rand.NewPCG(1, 2))
	for done.Load() < jobs {
		n := 1 + rnd.IntN(largest)
		limitMu.Lock()
		if n > allowed {
			allowed = n
		}
		limitMu.Unlock()
		l.SetLimit(n)
		for l.InFlight() > n && done.Load() < jobs {
			time.Sleep(10 * time.Microsecond)
		}
		limitMu.Lock()
		allowed = n
		limitMu.Unlock()
	}
	wg.Wait()
	if got := done.Load(); got != jobs {
		t.Fatalf("%d jobs ran, want %d: work was lost", got, jobs)
	}
	// The most ever running: at least the initial limit (the test did run
	// jobs concurrently), never more than the largest limit set.
	if m := maxSeen.Load(); m < initial || m > largest {
		t.Errorf("at most %d jobs ran at once; want between %d and %d", m, initial, largest)
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d after all jobs", l.InFlight(), l.Waiting())
	}
}

func TestGrowingAdmitsWaitersAtOnce(t *testing.T) {
	t.Parallel()
	l := New(1)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	admitted := make(chan int, 3)
	for i := range 3 {
		go func() {
			if err := l.Acquire(context.Background()); err == nil {
				admitted <- i
			}
		}()
	}
	for l.Waiting() != 3 {
		time.Sleep(time.Millisecond)
	}
	l.SetLimit(3) // two more slots: two waiters admitted without any Release
	<-admitted
	<-admitted
	if l.Waiting() != 1 || l.InFlight() != 3 {
		t.Fatalf("waiting %d, in flight %d; want 1 and 3", l.Waiting(), l.InFlight())
	}
	l.Release()
	<-admitted
}

func TestShrinkingNeverInterruptsRunningWork(t *testing.T) {
	t.Parallel()
	l := New(3)
	for range 3 {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	l.SetLimit(1)
	if l.InFlight() != 3 {
		t.Fatalf("in flight %d after shrinking, want the 3 running", l.InFlight())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := l.Acquire(ctx); err == nil {
		t.Fatal("admitted with 3 in flight and a limit of 1")
	}
	l.Release()
	l.Release() // 1 in flight now: still at the limit
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := l.Acquire(ctx2); err == nil {
		t.Fatal("admitted with 1 in flight and a limit of 1")
	}
	l.Release()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledWaiterLosesNoSlot(t *testing.T) {
	t.Parallel()
	l := New(1)
	_ = l.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- l.Acquire(ctx) }()
	for l.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled Acquire returned nil")
	}
	l.Release()
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d; want 0, 0", l.InFlight(), l.Waiting())
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFIFO(t *testing.T) {
	t.Parallel()
	l := New(1)
	_ = l.Acquire(context.Background())
	order := make(chan int, 5)
	for i := range 5 {
		go func() {
			_ = l.Acquire(context.Background())
			order <- i
			l.Release()
		}()
		for l.Waiting() != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	l.Release()
	for want := range 5 {
		if got := <-order; got != want {
			t.Fatalf("admitted %d, want %d (first come, first served)", got, want)
		}
	}
}
