// Package adaptive is the refresh concurrency limiter behind
// ADAPTIVE_CONCURRENCY=true and the exchange that lets the replicas sharing
// a server judge latency against one baseline. The decisions themselves
// (when to grow, when to cut) are pkg/limiter's Policy; this package feeds
// it from the pipeline and the driver, applies what it decides and reports
// it in the metrics. It satisfies consumer.Limiter, and the consumer tells
// it when refreshes start and finish.
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

// Limiter is the consumer.Limiter behind ADAPTIVE_CONCURRENCY=true: a
// resizable limit moved between 1 and REFRESH_CONCURRENCY by a
// limiter.Policy fed with every refresh's latency and outcome, the age of
// refreshes still running, every connection checkout's wait and, when
// shared, the fleet's baseline. Running refreshes are never interrupted by a
// smaller limit; it only admits fewer.
type Limiter struct {
	*limiter.Limiter
	interval time.Duration
	metrics  *metrics.Consumer
	log      *slog.Logger
	clock    clock.Clock

	mu        sync.Mutex
	policy    *limiter.Policy
	saturated bool                 // every slot was taken at some point this interval
	running   map[uint64]time.Time // start of every refresh in flight
	nextID    uint64

	fleet      BaselineExchange // nil: this replica judges alone
	shareEvery time.Duration
	fleetAt    time.Time // last successful exchange; under mu
}

// BaselineExchange shares latency baselines between the replicas on one
// server: it publishes this replica's own and returns the fleet's view.
// Exchange is called from one goroutine.
type BaselineExchange interface {
	Exchange(ctx context.Context, own time.Duration) (Fleet, error)
}

// Fleet is what the replicas on one server currently report: the lowest
// fresh baseline (0 if none) and how many replicas there are.
type Fleet struct {
	Baseline time.Duration
	Replicas int
}

// New starts at max/4 (at least 1), a cautious guess that
// grows within seconds when there is headroom. interval is how often the
// limit is reconsidered; default 1s. clk times refreshes and paces the
// decisions; nil is the wall clock.
func New(max int, interval time.Duration, cfg limiter.PolicyConfig, m *metrics.Consumer, log *slog.Logger, clk clock.Clock) *Limiter {
	cfg.Max = max
	start := cmp.Or(max/4, 1)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Limiter{
		Limiter:  limiter.New(start),
		interval: cmp.Or(interval, time.Second),
		metrics:  m,
		log:      log,
		policy:   limiter.NewPolicy(cfg, start),
		clock:    clock.Or(clk),
		running:  map[uint64]time.Time{},
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

// ShareBaseline makes the limiter exchange baselines with the fleet every
// period (default 10s) while it runs. Call it before Run.
func (a *Limiter) ShareBaseline(x BaselineExchange, every time.Duration) {
	a.fleet, a.shareEvery = x, cmp.Or(every, 10*time.Second)
}

// RefreshStarted notes a refresh starting; the returned func reports its end:
// overload for a transient MongoDB failure (unreachable, timing out,
// electing), cancelled for one cut short by shutdown (its latency means
// nothing).
func (a *Limiter) RefreshStarted() (finished func(overload, cancelled bool)) {
	a.mu.Lock()
	id := a.nextID
	a.nextID++
	start := a.clock.Now()
	a.running[id] = start
	a.mu.Unlock()
	return func(overload, cancelled bool) {
		d := a.clock.Now().Sub(start)
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.running, id)
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

// Run reconsiders the limit every interval, and exchanges baselines with the
// fleet if shared, until ctx ends.
func (a *Limiter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if a.fleet != nil {
		// Its own loop: an exchange stuck on a slow server must not hold
		// up the decisions that are meant to react to that server.
		wg.Go(func() {
			for {
				// Every interval until this replica has published a
				// baseline, then every shareEvery: replicas starting
				// together agree on a bar and a size within seconds
				// instead of judging alone for the first period.
				wait := a.shareEvery
				if !a.exchange(ctx) {
					wait = a.interval
				}
				if clock.Sleep(ctx, a.clock, wait) != nil {
					return
				}
			}
		})
	}
	clock.Every(ctx, a.clock, a.interval, func(context.Context) { a.decide() })
}

// exchange publishes this replica's baseline and adopts the fleet's. After a
// failure the last fleet figure stands until it is fleetStale old (decide
// drops it then); the exchange is retried next period.
//
// It reports whether this replica's own baseline was published.
func (a *Limiter) exchange(ctx context.Context) (published bool) {
	if a.fleet == nil {
		return false
	}
	a.mu.Lock()
	own := a.policy.OwnBaseline()
	a.mu.Unlock()
	xctx, cancel := context.WithTimeout(ctx, a.shareEvery/2)
	defer cancel()
	fleet, err := a.fleet.Exchange(xctx, own)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("sharing the latency baseline with the fleet failed; judging with the last one", "op", "adaptive concurrency", "err", err)
		}
		return false
	}
	a.mu.Lock()
	a.policy.SetFleet(fleet.Baseline, fleet.Replicas)
	a.fleetAt = a.clock.Now()
	a.mu.Unlock()
	return own > 0
}

// fleetStale is how long a fleet figure is trusted without a successful
// exchange: as long as the fleet trusts a published baseline.
const fleetStale = 2 * time.Minute

func (a *Limiter) decide() {
	a.mu.Lock()
	now := a.clock.Now()
	if !a.fleetAt.IsZero() && now.Sub(a.fleetAt) > fleetStale {
		a.policy.SetFleet(0, 1)
		a.fleetAt = time.Time{}
	}
	ages := make([]time.Duration, 0, len(a.running))
	for _, start := range a.running {
		ages = append(ages, now.Sub(start))
	}
	a.policy.ObserveRunning(ages)
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
