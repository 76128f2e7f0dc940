package consumer

import (
	"math/rand/v2"
	"time"
)

// Backoff is the pipeline's one retry delay after a failure (a user's failed
// refresh, a failed flush, claim round, dead letter or stream), a jittered
// exponential delay: attempt n (1-based) waits a random time in [d/2, d]
// where d = min(Base·2^(n-1), Max). Half of the delay is kept fixed so a
// retry storm still spreads out but never retries at once.
type Backoff struct {
	Base time.Duration // first delay; defaults to 1s
	Max  time.Duration // cap; defaults to 5m
}

// Delay returns the wait before retry number attempt (1 = first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	base, max := b.Base, b.Max
	if base <= 0 {
		base = time.Second
	}
	if max <= 0 {
		max = 5 * time.Minute
	}
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + rand.N(half+1)
}
