// Package adaptive is the refresh concurrency limiter behind
// ADAPTIVE_CONCURRENCY=true. Each replica judges latency against its own
// baseline (sharing baselines across the fleet gained 1.03× the best fixed
// limit, bench/results/adaptive). It feeds pkg/limiter's Policy from the
// pipeline and the driver, applies its decisions and reports them.
package adaptive

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
)

// Limiter is a consumer.Limiter moved between 1 and REFRESH_CONCURRENCY by
// a limiter.Policy fed with every refresh's latency and outcome, the age of
// those running and every connection checkout's wait.
type Limiter struct {
	*limiter.Limiter
	interval time.Duration
	metrics  *metrics.Consumer
	log      *slog.Logger
	clock    clock.Clock

	mu        sync.Mutex
	policy    *limiter.Policy
	saturated bool                // every slot was taken at some point this interval
	running   map[*time.Time]bool // start of every refresh in flight
}

// New starts at max/4 (at least 1), which grows within seconds given
// headroom. interval is how often the limit is reconsidered (default 1s);
// clk times refreshes and decisions (nil: the wall clock).
func New(max int, interval time.Duration, cfg limiter.PolicyConfig, m *metrics.Consumer, log *slog.Logger, clk clock.Clock) *Limiter {
	cfg.Max = max
	start := cmp.Or(max/4, 1)
	a := &Limiter{
		Limiter:  limiter.New(start),
		interval: cmp.Or(interval, time.Second),
		metrics:  m,
		log:      cmp.Or(log, slog.New(slog.DiscardHandler)),
		policy:   limiter.NewPolicy(cfg, start),
		clock:    clock.Or(clk),
		running:  map[*time.Time]bool{},
	}
	m.ConcurrencyLimit.Set(float64(start))
	return a
}

// Acquire takes a slot and notes saturation for the policy.
func (a *Limiter) Acquire(ctx context.Context) error {
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

// RefreshStarted notes a refresh starting; the returned func reports its end:
// overload (a transient MongoDB failure) or cancelled (by shutdown: its latency means nothing).
func (a *Limiter) RefreshStarted() (finished func(overload, cancelled bool)) {
	a.mu.Lock()
	start := a.clock.Now()
	a.running[&start] = true
	a.mu.Unlock()
	return func(overload, cancelled bool) {
		d := a.clock.Now().Sub(start)
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.running, &start)
		if !cancelled {
			a.policy.ObserveLatency(d, overload)
		}
	}
}

// ObserveCheckout feeds a connection checkout from the driver's pool monitor.
func (a *Limiter) ObserveCheckout(wait time.Duration, failed bool) {
	a.mu.Lock()
	a.policy.ObserveCheckout(wait, failed)
	a.mu.Unlock()
}

// Run reconsiders the limit every interval until ctx ends.
func (a *Limiter) Run(ctx context.Context) {
	clock.Every(ctx, a.clock, a.interval, func(context.Context) { a.decide() })
}

func (a *Limiter) decide() {
	a.mu.Lock()
	now := a.clock.Now()
	ages := make([]time.Duration, 0, len(a.running))
	for start := range a.running {
		ages = append(ages, now.Sub(*start))
	}
	a.policy.ObserveRunning(ages)
	// Waiters mean the slots were full all along.
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
