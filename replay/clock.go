package replay

import (
	"context"
	"time"
)

// Clock is the time source of arrival pacing, injected so tests drive time
// instead of sleeping.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx ends (returning its error).
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
