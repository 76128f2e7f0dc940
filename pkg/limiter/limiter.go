// Package limiter bounds how many operations run at once, with a limit that can
// change while work is in flight: growing admits waiters at once; shrinking never
// interrupts running work, it admits fewer until fewer run than the new limit.
package limiter

import (
	"container/list"
	"context"
	"sync"
)

// Limiter is a resizable concurrency limit with FIFO admission.
type Limiter struct {
	mu              sync.Mutex
	limit, inFlight int
	waiters         list.List // of chan struct{}, oldest first
}

// New returns a limiter admitting limit operations at once (at least 1).
func New(limit int) *Limiter { return &Limiter{limit: max(limit, 1)} }

// Acquire waits for a slot or for ctx to end; a caller that gets nil must Release exactly once.
func (l *Limiter) Acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.inFlight < l.limit && l.waiters.Len() == 0 {
		l.inFlight++
		l.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	elem := l.waiters.PushBack(ready)
	l.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case <-ready:
			// Admitted just as ctx ended: hand the slot on rather than leak it.
			l.inFlight--
			l.admitLocked()
		default:
			l.waiters.Remove(elem)
		}
		l.mu.Unlock()
		return ctx.Err()
	}
}

func (l *Limiter) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight <= 0 {
		panic("limiter: Release without Acquire")
	}
	l.inFlight--
	l.admitLocked()
}

// SetLimit changes the limit (at least 1).
func (l *Limiter) SetLimit(n int) {
	l.mu.Lock()
	l.limit = max(n, 1)
	l.admitLocked()
	l.mu.Unlock()
}

func (l *Limiter) Limit() int { return l.read(func() int { return l.limit }) }

// InFlight returns how many acquired slots are not yet released; it may
// exceed Limit for a while after the limit shrank.
func (l *Limiter) InFlight() int { return l.read(func() int { return l.inFlight }) }

func (l *Limiter) Waiting() int { return l.read(l.waiters.Len) }

func (l *Limiter) read(f func() int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return f()
}

func (l *Limiter) admitLocked() {
	for l.inFlight < l.limit && l.waiters.Len() > 0 {
		ready := l.waiters.Remove(l.waiters.Front()).(chan struct{})
		l.inFlight++
		close(ready)
	}
}
