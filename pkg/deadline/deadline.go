// Package deadline gives a repeated operation a deadline that doubles while
// it keeps running out of time, and returns to its base once it succeeds.
// The Go driver sends no maxTimeMS with find or aggregate, so the server
// finishes a read abandoned at its client-side deadline: retrying with the
// same deadline piles a second copy on it, and never gets through.
package deadline

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Stretch is the deadline of one repeated operation; Base must be set. Not
// safe for concurrent use: each loop owns one.
type Stretch struct {
	Base time.Duration // the deadline while the operation succeeds in time
	Max  time.Duration // the longest it stretches to; Base when smaller

	timeouts int // consecutive outcomes that ran out of time
}

// Next is how long the next try may run: Base doubled per timeout in a row, at most Max.
func (s *Stretch) Next() time.Duration {
	d := s.Base
	for range s.timeouts {
		if d >= s.Max/2 {
			return max(s.Max, s.Base)
		}
		d *= 2
	}
	return d
}

// Observe records a try's outcome and reports whether it ran out of time.
// Other errors say nothing about how long the operation needs.
func (s *Stretch) Observe(err error) (timedOut bool) {
	switch {
	case err == nil:
		s.timeouts = 0
	case TimedOut(err):
		s.timeouts++
		return true
	}
	return false
}

// TimedOut reports an operation out of time, as the context or the driver says it.
func TimedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err)
}
