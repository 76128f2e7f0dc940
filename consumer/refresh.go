package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/deadline"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
)

// Refresher recomputes and stores one user's score (scoring.Refresher),
// seeing every source write made before startedAt.
type Refresher interface {
	Refresh(ctx context.Context, username string, startedAt time.Time) error
}

// Limiter bounds the refreshes running at once; Acquire blocks until a slot
// is free or ctx ends.
type Limiter interface {
	Acquire(ctx context.Context) error
	Release()
	Limit() int
}

// NewFixedLimiter returns a Limiter admitting n refreshes at once, FIFO among waiters.
func NewFixedLimiter(n int) *limiter.Limiter { return limiter.New(n) }

// ownDeadline reports the refresh running out of its own time, not MongoDB
// failing (a user always too slow must be charged). The driver gives up on a
// command it cannot finish before ctx's deadline: a timeout in the last
// tenth of the refresh's time counts too.
func ownDeadline(ctx context.Context, err error, timeout time.Duration) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < timeout/10 && deadline.TimedOut(err)
}

// errRefreshTimeout marks a refresh that outlived RefreshTimeout; it counts
// towards MAX_ATTEMPTS although it looks like a timeout.
var errRefreshTimeout = errors.New("refresh timed out")

// refreshBatch refreshes works in one slot, sharing one deadline and one
// start (after every entry was claimed), and returns each user's outcome. A
// panic in the scorer fails the batch, its stack in the error.
func (c *Consumer) refreshBatch(ctx context.Context, works []work) (errs []error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RefreshTimeout)
	defer cancel()
	users := make([]string, len(works))
	for i, w := range works {
		users[i] = w.lease.User
	}
	batch := ""
	if len(users) > 1 {
		batch = fmt.Sprintf(" (batch of %d users)", len(users))
	}
	// Started by the server's clock (which source writes came before),
	// timed on the local one (which does not jump when the server's is resampled).
	start, began := c.serverTime.Now(), c.clock.Now()
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("refresh panicked%s: %v\n%s", batch, r, debug.Stack())
			errs = make([]error, len(works))
			for i := range errs {
				errs[i] = err
			}
		}
		d := clock.Since(c.clock, began).Seconds()
		for range works {
			c.metrics.RefreshDuration.Observe(d)
		}
		c.metrics.RefreshBatchSeconds.Observe(d)
	}()
	byUser := c.refresher.RefreshBatch(ctx, users, start)
	errs = make([]error, len(users))
	for i, u := range users {
		err, ok := byUser[u]
		switch {
		case !ok:
			errs[i] = errors.New("the batch refresh returned no outcome for this user")
		case err == nil:
		case ownDeadline(ctx, err, c.cfg.RefreshTimeout): // too slow, which retrying will not fix
			errs[i] = fmt.Errorf("%w after %s%s: %v", errRefreshTimeout, c.cfg.RefreshTimeout, batch, err)
		default:
			errs[i] = fmt.Errorf("refreshing user: %w", err)
		}
	}
	return errs
}
