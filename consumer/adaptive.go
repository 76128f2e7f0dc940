package consumer

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
)

// AdaptiveLimiter is the Limiter behind ADAPTIVE_CONCURRENCY=true: a
// resizable limit moved between 1 and REFRESH_CONCURRENCY by a
// limiter.Policy fed with every refresh's latency and outcome and every
// connection checkout's wait. Running refreshes are never interrupted by a
// smaller limit; it only admits fewer.
type AdaptiveLimiter struct {
	*limiter.Limiter
	interval time.Duration
	metrics  *metrics.Consumer
	log      *slog.Logger

	mu        sync.Mutex
	policy    *limiter.Policy
	saturated bool // every slot was taken at some point this interval
}

// NewAdaptiveLimiter starts at max/4 (at least 1), a cautious guess that
// grows within seconds when there is headroom. interval is how often the
// limit is reconsidered; default 1s.
func NewAdaptiveLimiter(max int, interval time.Duration, cfg limiter.PolicyConfig, m *metrics.Consumer, log *slog.Logger) *AdaptiveLimiter {
	cfg.Max = max
	start := cmp.Or(max/4, 1)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &AdaptiveLimiter{
		Limiter:  limiter.New(start),
		interval: cmp.Or(interval, time.Second),
		metrics:  m,
		log:      log,
		policy:   limiter.NewPolicy(cfg, start),
	}
	m.ConcurrencyLimit.Set(float64(start))
	return a
}

// Acquire takes a slot and notes saturation for the policy.
func (a *AdaptiveLimiter) Acquire(ctx context.Context) error {
	if err := a.Limiter.Acquire(ctx); err != nil {
		return err
	}
	if a.InFlight() >= a.Limit() {
		a.mu.Lock()
		a.saturated = true
		a.mu.Unlock()
	}
	return nil
}

// ObserveRefresh feeds one refresh's latency; overload is a transient MongoDB
// failure (unreachable, timing out, electing).
func (a *AdaptiveLimiter) ObserveRefresh(d time.Duration, overload bool) {
	a.mu.Lock()
	a.policy.ObserveLatency(d, overload)
	a.mu.Unlock()
}

// ObserveCheckout feeds a connection checkout from the driver's pool monitor.
func (a *AdaptiveLimiter) ObserveCheckout(wait time.Duration, failed bool) {
	a.mu.Lock()
	a.policy.ObserveCheckout(wait, failed)
	a.mu.Unlock()
}

// Run reconsiders the limit every interval until ctx ends.
func (a *AdaptiveLimiter) Run(ctx context.Context) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.decide()
		}
	}
}

func (a *AdaptiveLimiter) decide() {
	a.mu.Lock()
	// Waiters mean demand exceeds the limit even if no Acquire saw the
	// slots full this interval (they were full all along).
	saturated := a.saturated || a.Waiting() > 0
	a.saturated = false
	limit, reason, changed := a.policy.Decide(saturated)
	baseline := a.policy.Baseline()
	a.mu.Unlock()
	a.metrics.LatencyBaseline.Set(baseline.Seconds())
	if !changed {
		return
	}
	a.SetLimit(limit)
	a.metrics.ConcurrencyLimit.Set(float64(limit))
	a.metrics.LimitChanges.WithLabelValues(reason).Inc()
	level := slog.LevelDebug
	if reason == limiter.ReasonOverload {
		level = slog.LevelWarn
	}
	a.log.Log(context.Background(), level, "refresh concurrency limit changed", "op", "adaptive concurrency", "limit", limit, "reason", reason, "baseline", baseline)
}
