// Package clock is the time source of everything that waits or measures a
// duration, injected so tests move time with clocktest's fake.
package clock

import (
	"cmp"
	"context"
	"time"
)

// Nower reads the time: all a caller needs when the time it wants is the
// database server's (package serverclock, a Nower but not a Clock).
type Nower interface {
	Now() time.Time
}

// Clock is the local clock: the time, and waiting for it to pass.
type Clock interface {
	Nower
	// After returns a channel that receives the time once d has passed. Prefer Sleep or NewTimer
	// where the wait can be abandoned: a fake counts an After as a waiter until it fires.
	After(d time.Duration) <-chan time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer behind an interface. Since Go 1.23 neither Stop nor
// Reset leaves a stale value to receive, and the fake behaves the same.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real is the wall clock (package time).
type Real struct{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (Real) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (Real) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

// Or returns c, or the wall clock when c is nil.
func Or(c Clock) Clock { return cmp.Or[Clock](c, Real{}) }

// realTimer and realTicker wrap package time's, their C field as a method.
type realTimer struct{ *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.Timer.C }

type realTicker struct{ *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.Ticker.C }

func Since(clk Nower, t time.Time) time.Duration { return clk.Now().Sub(t) }

// Sleep waits d on clk, or until ctx ends, returning ctx's error; d <= 0 returns ctx.Err() at once.
func Sleep(ctx context.Context, clk Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Every calls fn(ctx) each time interval passes on clk, the first after one interval, until ctx
// ends and no call is running. A call that overruns the interval delays the next, as with a time.Ticker.
func Every(ctx context.Context, clk Clock, interval time.Duration, fn func(ctx context.Context)) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if ctx.Err() != nil {
			return // both were ready: ending wins
		}
		fn(ctx)
	}
}
