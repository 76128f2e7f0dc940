package consumer

import (
	"context"
)

// WakeupSource tells the claim loop that work may have arrived, sooner than
// the next poll. A source is only a hint: the poll at POLL_INTERVAL always
// stays on as the safety net, so a source that misses an event (or dies)
// delays work by at most one poll period and never loses it.
type WakeupSource interface {
	// Run calls wake whenever work may have arrived, until ctx ends.
	Run(ctx context.Context, wake func()) error
}

// signal is a wake-up that coalesces: any number of sends before the
// receiver looks count as one.
type signal chan struct{}

func newSignal() signal { return make(signal, 1) }

func (s signal) notify() {
	select {
	case s <- struct{}{}:
	default:
	}
}
