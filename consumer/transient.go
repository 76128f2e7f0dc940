package consumer

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

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
	return errors.As(err, &se) && slices.ContainsFunc(transientCodes, se.HasErrorCode)
}

// Backoff is the pipeline's one retry delay after a failure: attempt n
// (1-based) waits a random time in [d/2, d], d = min(Base·2^(n-1), Max), so
// a retry storm spreads out but never retries at once.
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
