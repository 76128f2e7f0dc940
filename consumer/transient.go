package consumer

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// transientCodes are server errors that say "not now" about the server, not
// "never" about the work: shutdowns, elections, overload.
var transientCodes = map[int32]bool{
	6: true, 7: true, 89: true, 9001: true, // HostUnreachable, HostNotFound, NetworkTimeout, SocketException
	91: true, 11600: true, 11602: true, // ShutdownInProgress, InterruptedAtShutdown, InterruptedDueToReplStateChange
	189: true, 10107: true, 13435: true, 13436: true, // PrimarySteppedDown, NotWritablePrimary, NotPrimaryNoSecondaryOk, NotPrimaryOrSecondary
	262: true, 50: true, // ExceededTimeLimit, MaxTimeMSExpired
	462: true, // IngressRequestRateLimitExceeded (Atlas)
}

// transient reports whether err says MongoDB was unreachable, slow or
// electing (or the embedded server overloaded: servertraits.Overloaded)
// rather than that this user's refresh is broken. A transient failure
// is retried with backoff but never counts towards MAX_ATTEMPTS: an outage
// must not dead-letter a healthy backlog.
func transient(err error) bool {
	if err == nil || errors.Is(err, errRefreshTimeout) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err) || mongo.IsNetworkError(err) {
		return true
	}
	var sse topology.ServerSelectionError
	if errors.As(err, &sse) || servertraits.Overloaded(err) {
		return true
	}
	var le mongo.LabeledError
	if errors.As(err, &le) && (le.HasErrorLabel("RetryableWriteError") || le.HasErrorLabel("TransientTransactionError") || le.HasErrorLabel("SystemOverloadedError")) {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		for code := range transientCodes {
			if se.HasErrorCode(int(code)) {
				return true
			}
		}
	}
	return false
}

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
