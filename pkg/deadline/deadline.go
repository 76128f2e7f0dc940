// Package deadline gives a repeated operation a deadline that stretches while
// the operation keeps running out of time, and returns to its base once it
// succeeds.
//
// The Go driver sends no maxTimeMS with find or aggregate, so the server
// finishes a read abandoned at its client-side deadline. Retrying with the
// same deadline piles a second copy on a server still busy with the first,
// and an operation that needs a little longer never succeeds. Doubling the
// deadline after each timeout in a row gets through in a few tries.
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

// Next is the deadline for the next try: Base doubled once per timeout in a
// row, at most Max. It is how long a try may run, not a delay: no jitter.
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

// Observe records a try's outcome and reports whether it ran out of time
// (so the next deadline is longer). Other errors say nothing about how long
// the operation needs: they leave the deadline as it is.
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

// TimedOut reports whether err is an operation running out of time, as the
// context or the driver reports it.
func TimedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err)
}
