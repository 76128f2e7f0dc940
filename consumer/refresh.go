package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/deadline"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// Refresher recomputes and stores one user's score (scoring.Refresher),
// seeing every source write made before startedAt.
type Refresher interface {
	Refresh(ctx context.Context, username string, startedAt time.Time) error
}

// Limiter bounds the refreshes running at once; Acquire blocks until a slot is free or ctx ends.
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

// errRefreshTimeout marks a refresh that outlived RefreshTimeout: charged, though it looks like a timeout.
var errRefreshTimeout = errors.New("refresh timed out")

// refreshBatch refreshes works in one slot, sharing one deadline and one
// start (after every entry was claimed), and returns each user's outcome. A
// panic in the scorer fails the batch, its stack in the error.
func (c *Consumer) refreshBatch(ctx context.Context, works []work) (errs []error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RefreshTimeout)
	defer cancel()
	users := mapped(works, func(w work) string { return w.lease.User })
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
			errs = slices.Repeat([]error{err}, len(works))
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

// transientCodes are server errors that say "not now" about the server, not
// "never" about the work: shutdowns, elections, overload.
var transientCodes = []int{
	6, 7, 89, 9001, // HostUnreachable, HostNotFound, NetworkTimeout, SocketException
	91, 11600, 11602, // ShutdownInProgress, InterruptedAtShutdown, InterruptedDueToReplStateChange
	189, 10107, 13435, 13436, // PrimarySteppedDown, NotWritablePrimary, NotPrimaryNoSecondaryOk, NotPrimaryOrSecondary
	262, 50, // ExceededTimeLimit, MaxTimeMSExpired
	462, // IngressRequestRateLimitExceeded (Atlas)
}

// transient reports whether err says MongoDB was unreachable, slow or
// electing (or the embedded server overloaded), not that this user's refresh
// is broken: retried, never counted towards MAX_ATTEMPTS.
func transient(err error) bool {
	if err == nil || errors.Is(err, errRefreshTimeout) {
		return false
	}
	var sse topology.ServerSelectionError
	if deadline.TimedOut(err) || mongo.IsNetworkError(err) || errors.As(err, &sse) || servertraits.Overloaded(err) {
		return true
	}
	var le mongo.LabeledError
	var se mongo.ServerError
	return errors.As(err, &le) && slices.ContainsFunc([]string{"RetryableWriteError", "TransientTransactionError", "SystemOverloadedError"}, le.HasErrorLabel) ||
		errors.As(err, &se) && slices.ContainsFunc(transientCodes, se.HasErrorCode)
}

// Backoff is the pipeline's one retry delay: attempt n (1-based) waits a random
// time in [d/2, d], d = min(Base·2^(n-1), Max): a retry storm spreads out, never at once.
type Backoff struct {
	Base time.Duration // first delay; defaults to 1s
	Max  time.Duration // cap; defaults to 5m
}

// Delay returns the wait before retry number attempt (1 = first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	d, ceiling := cmp.Or(max(b.Base, 0), time.Second), cmp.Or(max(b.Max, 0), 5*time.Minute)
	for i := 1; i < attempt && d < ceiling; i++ {
		d *= 2
	}
	half := min(d, ceiling) / 2
	return half + rand.N(half+1)
}
