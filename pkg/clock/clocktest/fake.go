// Package clocktest is a clock.Clock that moves only when a test says so.
package clocktest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// Fake is a clock.Clock whose time stands still until Advance moves it, firing the timers and
// tickers that come due on the way, in order. Tests wait for the code to wait (BlockUntil).
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
	changed chan struct{} // closed, and replaced, whenever waiters change
	auto    bool
	armed   []time.Duration // every timer's duration, in the order armed
}

func NewFake(start time.Time) *Fake { return &Fake{now: start, changed: make(chan struct{})} }

// NewAuto returns a fake that jumps to every timer's deadline as the timer is
// made, so code that sleeps runs through at once: for code that waits on one thing at a time.
func NewAuto(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{}), auto: true}
}

// waiter is a pending timer or ticker.
type waiter struct {
	f      *Fake
	at     time.Time
	period time.Duration // 0: a timer
	c      chan time.Time
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// NewTimer returns a timer firing once the fake has moved d on; at once if d <= 0, as with package time.
func (f *Fake) NewTimer(d time.Duration) clock.Timer { return fakeTimer{f.start(0, d)} }

// NewTicker returns a ticker firing every d the fake moves on; it panics on d <= 0, as time's does.
func (f *Fake) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("clocktest: non-positive interval for NewTicker")
	}
	return fakeTicker{f.start(d, d)}
}

// start returns a new waiter of period (0: a timer), armed for d.
func (f *Fake) start(period, d time.Duration) *waiter {
	w := &waiter{f: f, period: period, c: make(chan time.Time, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arm(w, d)
	return w
}

// arm starts w's wait of d (its period, for a ticker); a timer of d <= 0 fires at once.
func (f *Fake) arm(w *waiter, d time.Duration) {
	w.at = f.now.Add(d)
	if w.period == 0 && d <= 0 {
		w.c <- f.now
		return
	}
	if w.period == 0 {
		f.armed = append(f.armed, d)
	}
	f.waiters = append(f.waiters, w)
	f.notify()
	if f.auto && w.period == 0 {
		f.advanceTo(w.at)
	}
}

// Advance moves the fake d on, firing every timer and ticker due on the way at its deadline,
// earliest first, a ticker once per period; as with package time, a tick to a full channel is dropped.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceTo(f.now.Add(d))
}

// advanceTo moves to t, firing what comes due. Called with mu held, as are arm, remove and notify.
func (f *Fake) advanceTo(t time.Time) {
	for len(f.waiters) > 0 {
		next := slices.MinFunc(f.waiters, func(a, b *waiter) int { return a.at.Compare(b.at) })
		if next.at.After(t) {
			break
		}
		f.now = next.at
		select {
		case next.c <- f.now:
		default:
		}
		if next.period > 0 {
			next.at = next.at.Add(next.period)
		} else {
			f.remove(next)
		}
	}
	if t.After(f.now) {
		f.now = t
	}
	f.notify() // time left changed: WaitUntil looks again
}

// Pending returns how long until each pending timer and ticker next fires, shortest first.
func (f *Fake) Pending() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Duration, len(f.waiters))
	for i, w := range f.waiters {
		out[i] = w.at.Sub(f.now)
	}
	slices.Sort(out)
	return out
}

// Armed returns the duration of every timer armed (NewTimer, After, Reset) that had to wait, in order.
func (f *Fake) Armed() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.armed)
}

// BlockUntil waits until at least n timers and tickers are pending, or ctx
// ends (returning its error), so a test can Advance without racing the code.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	return f.WaitUntil(ctx, func(pending []time.Duration) bool { return len(pending) >= n })
}

// BlockUntilWaiting waits until a timer or ticker is pending with exactly d
// left, whatever else is waiting, or ctx ends (returning its error).
func (f *Fake) BlockUntilWaiting(ctx context.Context, d time.Duration) error {
	return f.WaitUntil(ctx, func(pending []time.Duration) bool { return slices.Contains(pending, d) })
}

// WaitUntil waits until cond holds for the waits Pending lists, checked each time they change, or
// ctx ends (returning its error). cond may call the fake's methods.
func (f *Fake) WaitUntil(ctx context.Context, cond func(pending []time.Duration) bool) error {
	for {
		f.mu.Lock()
		changed := f.changed // taken first: a change after it closes it
		f.mu.Unlock()
		if cond(f.Pending()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (f *Fake) remove(w *waiter) bool {
	i := slices.Index(f.waiters, w)
	if i < 0 {
		return false
	}
	f.waiters = slices.Delete(f.waiters, i, i+1)
	f.notify()
	return true
}

func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// stopLocked removes w and empties its channel, as Stop does since Go 1.23.
func (w *waiter) stopLocked() bool {
	select {
	case <-w.c:
	default:
	}
	return w.f.remove(w)
}

func (w *waiter) C() <-chan time.Time { return w.c }

type fakeTimer struct{ *waiter }

func (t fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.stopLocked()
}

func (t fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	active := t.stopLocked()
	if t.period > 0 {
		t.period = d
	}
	t.f.arm(t.waiter, d)
	return active
}

type fakeTicker struct{ *waiter }

func (t fakeTicker) Stop() { fakeTimer(t).Stop() }
func (t fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clocktest: non-positive interval for Ticker.Reset")
	}
	fakeTimer(t).Reset(d)
}
