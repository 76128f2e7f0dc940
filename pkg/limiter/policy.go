package limiter

import (
	"math"
	"slices"
	"time"
)

// PolicyConfig bounds the adaptive policy's limit.
type PolicyConfig struct{ Min, Max int } // Min defaults to 1, Max is required

// The policy's tunables.
const (
	minSamples      = 5                     // latency samples an interval needs before it is judged
	tolerance       = 1.5                   // latency up to baseline × tolerance counts as no load
	backoff         = 0.75                  // multiplicative decrease on sustained latency
	decreaseAfter   = 2                     // consecutive slow intervals before a decrease (hysteresis)
	baselineWindow  = 120                   // intervals the no-load baseline is the minimum of
	errorRatio      = 0.1                   // overload errors / samples above this cut to Min
	maxCheckoutWait = 50 * time.Millisecond // mean wait for a pooled connection above this is a slow interval
	maxCatchUp      = 3                     // intervals one judgement grows for: a replica judged rarely must not leap
)

// Reasons a policy changes the limit.
const (
	ReasonHeadroom = "headroom" // latency near the baseline and every slot busy: one more
	ReasonLatency  = "latency"  // latency well above the baseline for decreaseAfter intervals: × backoff
	ReasonOverload = "overload" // errors, timeouts or pool exhaustion: straight to Min
)

// Policy decides the limit once per interval, in the manner of TCP Vegas: the
// baseline is the latency at no load (the lowest interval mean over a long
// window); while latency stays within tolerance of it and demand fills every
// slot, the limit grows a slot per interval; above it, the limit shrinks by a
// factor; overload cuts straight to Min. Not safe for concurrent use.
type Policy struct {
	cfg PolicyConfig
	// value is the limit before rounding down: steps smaller than one slot
	// (× backoff) accumulate in it, so a limit of a few slots moves smoothly.
	value float64

	means []time.Duration // interval means, newest last, for the baseline
	slow  int             // consecutive slow intervals
	cur   interval        // what was seen since the last judgement
}

type interval struct {
	samples, overloads, checkouts, checkoutBad int
	latencySum, checkoutSum                    time.Duration

	stuck     bool // most work in flight is past the slow threshold
	elapsed   int  // intervals since the last judgement, this one included
	saturated bool // demand filled every slot
}

// NewPolicy starts at initial (clamped to the bounds).
func NewPolicy(cfg PolicyConfig, initial int) *Policy {
	cfg.Min = max(cfg.Min, 1)
	cfg.Max = max(cfg.Max, cfg.Min)
	l := min(max(initial, cfg.Min), cfg.Max)
	return &Policy{cfg: cfg, value: float64(l)}
}

// ObserveLatency records one unit of work's latency; overload: it failed for
// a server unreachable, timing out or overloaded.
func (p *Policy) ObserveLatency(d time.Duration, overload bool) {
	p.cur.samples++
	p.cur.latencySum += d
	if overload {
		p.cur.overloads++
	}
}

// ObserveRunning records the ages of the work in flight as an interval ends: with
// more than half of it past the slow threshold the interval is slow, whatever has
// completed (a spike is judged while the slow work runs); one straggler is not.
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
	p.cur.stuck = p.cur.stuck || 2*past > len(ages)
}

// ObserveCheckout records a wait for a pooled connection; failed: it gave up (pool exhausted).
func (p *Policy) ObserveCheckout(wait time.Duration, failed bool) {
	p.cur.checkouts++
	p.cur.checkoutSum += wait
	if failed {
		p.cur.checkoutBad++
	}
}

// Decide closes the interval. saturated says whether demand filled every
// slot at some point in it (growing an unsaturated limit proves nothing).
// An interval with fewer than minSamples latencies is not judged: its
// samples carry over into the next, so slow refreshes still get decisions.
func (p *Policy) Decide(saturated bool) (limit int, reason string, changed bool) {
	p.cur.saturated = p.cur.saturated || saturated
	p.cur.elapsed++
	old := p.Limit()
	// Two signals at least: one failed checkout (a ping timing out) or one
	// timed-out refresh in a quiet interval is not an overloaded server.
	overloaded := p.cur.checkoutBad >= 2 || (p.cur.overloads >= 2 && float64(p.cur.overloads)/float64(p.cur.samples) > errorRatio)
	enough := p.cur.samples >= minSamples
	if !overloaded && !enough && !p.cur.stuck {
		return old, "", false
	}
	defer func() { p.cur = interval{} }()
	if overloaded {
		p.value, reason, p.slow = float64(p.cfg.Min), ReasonOverload, 0
	} else {
		slow := p.cur.stuck || (p.cur.checkouts > 0 && p.cur.checkoutSum/time.Duration(p.cur.checkouts) > maxCheckoutWait)
		if enough {
			mean := p.cur.latencySum / time.Duration(p.cur.samples)
			p.means = append(p.means, mean)
			p.means = p.means[max(0, len(p.means)-baselineWindow):]
			slow = slow || float64(mean) > float64(p.Baseline())*tolerance
		}
		if slow {
			p.slow++
			if p.slow >= decreaseAfter {
				p.value, reason, p.slow = max(float64(p.cfg.Min), p.value*backoff), ReasonLatency, 0
			}
		} else {
			p.slow = 0
			// Growth per interval elapsed, not per judgement: replicas with
			// few slots are judged less often, and AIMD is fair only when all grow alike.
			if p.cur.saturated && p.value < float64(p.cfg.Max) {
				p.value, reason = min(float64(p.cfg.Max), p.value+float64(min(p.cur.elapsed, maxCatchUp))), ReasonHeadroom
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
// interval mean in its window, zero before the first judged interval.
func (p *Policy) Baseline() time.Duration {
	if len(p.means) == 0 {
		return 0
	}
	return slices.Min(p.means)
}

// Limit is the current decision: value rounded down, the epsilon keeping
// three thirds from flooring to one less.
func (p *Policy) Limit() int { return int(math.Floor(p.value + 1e-9)) }
