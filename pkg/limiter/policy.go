package limiter

import (
	"cmp"
	"math"
	"time"
)

// PolicyConfig tunes the adaptive policy. Zero values take the defaults named.
type PolicyConfig struct {
	Min, Max        int           // bounds of the limit; Min defaults to 1, Max is required
	MinSamples      int           // latency samples an interval needs before it is judged; default 5
	Tolerance       float64       // latency up to baseline × Tolerance counts as no load; default 1.5
	Backoff         float64       // multiplicative decrease on sustained latency; default 0.75
	DecreaseAfter   int           // consecutive slow intervals before a decrease (hysteresis); default 2
	BaselineWindow  int           // intervals the no-load baseline is the minimum of; default 120
	ErrorRatio      float64       // overload errors / samples above this cut to Min; default 0.1
	MaxCheckoutWait time.Duration // mean wait for a pooled connection above this is a slow interval; default 50ms
}

func (c PolicyConfig) withDefaults() PolicyConfig {
	c.Min = max(c.Min, 1)
	c.Max = max(c.Max, c.Min)
	c.MinSamples = cmp.Or(c.MinSamples, 5)
	c.Tolerance = cmp.Or(c.Tolerance, 1.5)
	c.Backoff = cmp.Or(c.Backoff, 0.75)
	c.DecreaseAfter = cmp.Or(c.DecreaseAfter, 2)
	c.BaselineWindow = cmp.Or(c.BaselineWindow, 120)
	c.ErrorRatio = cmp.Or(c.ErrorRatio, 0.1)
	c.MaxCheckoutWait = cmp.Or(c.MaxCheckoutWait, 50*time.Millisecond)
	return c
}

// maxCatchUp bounds the intervals one judgement grows for: a replica judged
// rarely still must not leap (4 → 9 in one step was seen with 5).
const maxCatchUp = 3

// Reasons a policy changes the limit.
const (
	ReasonHeadroom = "headroom" // latency near the baseline and every slot busy: one more
	ReasonLatency  = "latency"  // latency well above the baseline for DecreaseAfter intervals: × Backoff
	ReasonOverload = "overload" // errors, timeouts or pool exhaustion: straight to Min
)

// Policy decides the limit once per interval from what the interval saw, in
// the manner of TCP Vegas and Netflix's concurrency-limits: the latency of
// work at no load is the baseline (the minimum interval mean over a long
// window, or the figure the fleet agrees on); while latency stays within
// Tolerance of it and demand fills every slot, the limit grows by one slot
// per interval, shared among the replicas (additive increase); when latency
// stays above it, queueing has begun somewhere downstream and the limit
// shrinks by a factor (multiplicative decrease). Overload signals — errors
// and timeouts from the server, failed connection checkouts — cut straight
// to Min, from where it grows back the same way. A slow interval must repeat
// DecreaseAfter times before anything shrinks, and growth needs saturation,
// so noise within the tolerance band moves nothing.
//
// Policy is not safe for concurrent use; the caller serialises Observe* and
// Decide (consumer/adaptive's Limiter does).
type Policy struct {
	cfg PolicyConfig
	// value is the limit before rounding down. Steps smaller than one slot
	// (1/replicas up, × Backoff down) accumulate in it, so replicas at a few
	// slots each still move smoothly and in proportion instead of jumping
	// between integers in whatever order their timers fire.
	value float64

	samples     int
	latencySum  time.Duration
	overloads   int
	checkouts   int
	checkoutSum time.Duration
	checkoutBad int

	means     []time.Duration // interval means, newest last, for the baseline
	fleet     time.Duration   // lowest baseline the fleet reports; 0 = judge alone
	stuck     bool            // most work in flight is past the slow threshold
	elapsed   int             // intervals since the last judgement, this one included
	replicas  int             // replicas sharing the server, this one included; ≥ 1
	slow      int             // consecutive slow intervals
	saturated bool            // demand filled every slot since the last judgement
}

// NewPolicy starts at initial (clamped to the bounds).
func NewPolicy(cfg PolicyConfig, initial int) *Policy {
	cfg = cfg.withDefaults()
	l := min(max(initial, cfg.Min), cfg.Max)
	return &Policy{cfg: cfg, value: float64(l), replicas: 1}
}

// ObserveLatency records one unit of work's latency; overload reports that it
// failed because the server was unreachable, timing out or overloaded.
func (p *Policy) ObserveLatency(d time.Duration, overload bool) {
	p.samples++
	p.latencySum += d
	if overload {
		p.overloads++
	}
}

// ObserveRunning records the ages of the work in flight as an interval
// ends. When most of it (more than half) is already older than the slow
// threshold, the interval is slow whatever has completed: a latency spike is
// judged while the slow work is still running, not seconds later when it
// finishes. One straggler (a heavy user) among healthy work is not.
func (p *Policy) ObserveRunning(ages []time.Duration) {
	b := p.Baseline()
	if b == 0 || len(ages) == 0 {
		return
	}
	past := 0
	for _, a := range ages {
		if float64(a) > float64(b)*p.cfg.Tolerance {
			past++
		}
	}
	p.stuck = p.stuck || 2*past > len(ages)
}

// ObserveCheckout records a wait for a pooled connection; failed means the
// checkout gave up (the pool was exhausted).
func (p *Policy) ObserveCheckout(wait time.Duration, failed bool) {
	p.checkouts++
	p.checkoutSum += wait
	if failed {
		p.checkoutBad++
	}
}

// Decide closes the interval. saturated says whether demand filled every
// slot at some point in it (growing an unsaturated limit proves nothing).
// An interval with fewer than MinSamples latencies (slow refreshes, a quiet
// queue) is not judged: its samples carry over into the next, so a consumer
// whose refreshes take seconds still gets decisions, just less often.
func (p *Policy) Decide(saturated bool) (limit int, reason string, changed bool) {
	p.saturated = p.saturated || saturated
	p.elapsed++
	old := p.Limit()
	overloaded := p.checkoutBad >= 2 || (p.overloads >= 2 && float64(p.overloads)/float64(p.samples) > p.cfg.ErrorRatio)
	enough := p.samples >= p.cfg.MinSamples
	if !overloaded && !enough && !p.stuck {
		return old, "", false
	}
	defer p.resetInterval()
	saturated = p.saturated
	switch {
	// Two signals at least: one failed checkout (a ping timing out) or one
	// timed-out refresh in a quiet interval is not an overloaded server.
	case overloaded:
		p.value, reason = float64(p.cfg.Min), ReasonOverload
		p.slow = 0
	default:
		slow := p.stuck || (p.checkouts > 0 && p.checkoutSum/time.Duration(p.checkouts) > p.cfg.MaxCheckoutWait)
		if enough {
			mean := p.latencySum / time.Duration(p.samples)
			p.addMean(mean)
			slow = slow || float64(mean) > float64(p.Baseline())*p.cfg.Tolerance
		}
		if slow {
			p.slow++
			if p.slow >= p.cfg.DecreaseAfter {
				p.value = max(float64(p.cfg.Min), p.value*p.cfg.Backoff)
				reason = ReasonLatency
				p.slow = 0
			}
		} else {
			p.slow = 0
			// Growth is per interval elapsed, not per judgement: a replica
			// with few slots gathers MinSamples more slowly and is judged
			// less often, and growing per judgement would let the replicas
			// with more slots grow faster, the rich getting richer, instead
			// of all growing alike (which is what makes AIMD fair). Capped
			// so that one judgement after a long quiet spell is no leap.
			if saturated && p.value < float64(p.cfg.Max) {
				p.value = min(float64(p.cfg.Max), p.value+float64(min(p.elapsed, maxCatchUp))/float64(p.replicas))
				reason = ReasonHeadroom
			}
		}
	}
	limit = p.Limit()
	if limit == old {
		reason = ""
	}
	return limit, reason, limit != old
}

// Baseline is the no-load latency the policy measures against: the lower of
// its own (OwnBaseline) and the fleet's (SetFleet), since the fleet's was
// read up to a share period ago.
func (p *Policy) Baseline() time.Duration {
	own := p.OwnBaseline()
	if p.fleet > 0 && (own == 0 || p.fleet < own) {
		return p.fleet
	}
	return own
}

// OwnBaseline is the lowest interval mean this policy judged in its window,
// zero before the first judged interval. It is what a replica shares with
// the fleet: sharing Baseline instead would keep a departed replica's figure
// alive for ever.
func (p *Policy) OwnBaseline() time.Duration {
	var b time.Duration
	for i, m := range p.means {
		if i == 0 || m < b {
			b = m
		}
	}
	return b
}

// SetFleet sets the lowest baseline the replicas on the same server report
// (0 = none: judge alone) and how many they are, this one included. Replicas
// that each judged against their own baseline would not share a server
// fairly: one that started while the others loaded the server measures a
// higher "no-load" latency, so it keeps growing while they see latency
// above theirs and shrink. Judged against one baseline, they all see the
// same slow intervals, and additive increase with multiplicative decrease
// converges to equal shares. Each grows by 1/replicas per step so that the
// fleet together grows by one, as a lone replica would: N replicas adding
// one each would overshoot the server's knee N times as far.
func (p *Policy) SetFleet(baseline time.Duration, replicas int) {
	p.fleet = max(baseline, 0)
	p.replicas = max(replicas, 1)
}

// Limit is the current decision: value rounded down, the epsilon keeping
// three thirds from flooring to one less.
func (p *Policy) Limit() int { return int(math.Floor(p.value + 1e-9)) }

func (p *Policy) addMean(m time.Duration) {
	p.means = append(p.means, m)
	if len(p.means) > p.cfg.BaselineWindow {
		p.means = p.means[len(p.means)-p.cfg.BaselineWindow:]
	}
}

func (p *Policy) resetInterval() {
	p.saturated, p.stuck, p.elapsed = false, false, 0
	p.samples, p.latencySum, p.overloads = 0, 0, 0
	p.checkouts, p.checkoutSum, p.checkoutBad = 0, 0, 0
}
