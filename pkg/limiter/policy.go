package limiter

import (
	"math"
	"time"
)

// PolicyConfig bounds the adaptive policy's limit.
type PolicyConfig struct {
	Min, Max int // Min defaults to 1, Max is required
}

// The policy's tunables, fixed: no operator set them.
const (
	minSamples      = 5                     // latency samples an interval needs before it is judged
	tolerance       = 1.5                   // latency up to baseline × tolerance counts as no load
	backoff         = 0.75                  // multiplicative decrease on sustained latency
	decreaseAfter   = 2                     // consecutive slow intervals before a decrease (hysteresis)
	baselineWindow  = 120                   // intervals the no-load baseline is the minimum of
	errorRatio      = 0.1                   // overload errors / samples above this cut to Min
	maxCheckoutWait = 50 * time.Millisecond // mean wait for a pooled connection above this is a slow interval
)

// maxCatchUp bounds the intervals one judgement grows for: a replica judged
// rarely still must not leap (4 → 9 in one step was seen with 5).
const maxCatchUp = 3

// Reasons a policy changes the limit.
const (
	ReasonHeadroom = "headroom" // latency near the baseline and every slot busy: one more
	ReasonLatency  = "latency"  // latency well above the baseline for decreaseAfter intervals: × backoff
	ReasonOverload = "overload" // errors, timeouts or pool exhaustion: straight to Min
)

// Policy decides the limit once per interval from what the interval saw, in
// the manner of TCP Vegas and Netflix's concurrency-limits: the latency of
// work at no load is the baseline (the minimum interval mean over a long
// window); while latency stays within tolerance of it and demand fills
// every slot, the limit grows by one slot per interval (additive increase);
// when latency
// stays above it, queueing has begun somewhere downstream and the limit
// shrinks by a factor (multiplicative decrease). Overload signals — errors
// and timeouts from the server, failed connection checkouts — cut straight
// to Min, from where it grows back the same way. A slow interval must repeat
// decreaseAfter times before anything shrinks, and growth needs saturation,
// so noise within the tolerance band moves nothing.
//
// Policy is not safe for concurrent use; the caller serialises Observe* and
// Decide (consumer/adaptive's Limiter does).
type Policy struct {
	cfg PolicyConfig
	// value is the limit before rounding down. Steps smaller than one slot
	// (× backoff down) accumulate in it, so a limit of a few slots still
	// moves smoothly instead of jumping between integers.
	value float64

	samples     int
	latencySum  time.Duration
	overloads   int
	checkouts   int
	checkoutSum time.Duration
	checkoutBad int

	means     []time.Duration // interval means, newest last, for the baseline
	stuck     bool            // most work in flight is past the slow threshold
	elapsed   int             // intervals since the last judgement, this one included
	slow      int             // consecutive slow intervals
	saturated bool            // demand filled every slot since the last judgement
}

// NewPolicy starts at initial (clamped to the bounds).
func NewPolicy(cfg PolicyConfig, initial int) *Policy {
	cfg.Min = max(cfg.Min, 1)
	cfg.Max = max(cfg.Max, cfg.Min)
	l := min(max(initial, cfg.Min), cfg.Max)
	return &Policy{cfg: cfg, value: float64(l)}
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
		if float64(a) > float64(b)*tolerance {
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
// An interval with fewer than minSamples latencies (slow refreshes, a quiet
// queue) is not judged: its samples carry over into the next, so a consumer
// whose refreshes take seconds still gets decisions, just less often.
func (p *Policy) Decide(saturated bool) (limit int, reason string, changed bool) {
	p.saturated = p.saturated || saturated
	p.elapsed++
	old := p.Limit()
	overloaded := p.checkoutBad >= 2 || (p.overloads >= 2 && float64(p.overloads)/float64(p.samples) > errorRatio)
	enough := p.samples >= minSamples
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
		slow := p.stuck || (p.checkouts > 0 && p.checkoutSum/time.Duration(p.checkouts) > maxCheckoutWait)
		if enough {
			mean := p.latencySum / time.Duration(p.samples)
			p.addMean(mean)
			slow = slow || float64(mean) > float64(p.Baseline())*tolerance
		}
		if slow {
			p.slow++
			if p.slow >= decreaseAfter {
				p.value = max(float64(p.cfg.Min), p.value*backoff)
				reason = ReasonLatency
				p.slow = 0
			}
		} else {
			p.slow = 0
			// Growth is per interval elapsed, not per judgement: a replica
			// with few slots gathers minSamples more slowly and is judged
			// less often, and growing per judgement would let the replicas
			// with more slots grow faster, the rich getting richer, instead
			// of all growing alike (which is what makes AIMD fair). Capped
			// so that one judgement after a long quiet spell is no leap.
			if saturated && p.value < float64(p.cfg.Max) {
				p.value = min(float64(p.cfg.Max), p.value+float64(min(p.elapsed, maxCatchUp)))
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

// Baseline is the no-load latency the policy measures against: the lowest
// interval mean it judged in its window, zero before the first judged
// interval.
func (p *Policy) Baseline() time.Duration {
	var b time.Duration
	for i, m := range p.means {
		if i == 0 || m < b {
			b = m
		}
	}
	return b
}

// Limit is the current decision: value rounded down, the epsilon keeping
// three thirds from flooring to one less.
func (p *Policy) Limit() int { return int(math.Floor(p.value + 1e-9)) }

func (p *Policy) addMean(m time.Duration) {
	p.means = append(p.means, m)
	if len(p.means) > baselineWindow {
		p.means = p.means[len(p.means)-baselineWindow:]
	}
}

func (p *Policy) resetInterval() {
	p.saturated, p.stuck, p.elapsed = false, false, 0
	p.samples, p.latencySum, p.overloads = 0, 0, 0
	p.checkouts, p.checkoutSum, p.checkoutBad = 0, 0, 0
}
