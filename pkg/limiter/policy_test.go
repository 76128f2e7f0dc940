package limiter

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// run feeds one interval of n samples of latency d and decides.
func run(p *Policy, n int, d time.Duration, saturated bool) (int, string) {
	for range n {
		p.ObserveLatency(d, false)
	}
	l, r, _ := p.Decide(saturated)
	return l, r
}

func TestGrowsWhileLatencyStaysAtBaselineAndSlotsAreFull(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 2)
	for i := range 30 {
		l, _ := run(p, 10, 40*time.Millisecond, true)
		if want := min(2+i+1, 16); l != want {
			t.Fatalf("interval %d: limit %d, want %d", i, l, want)
		}
	}
}

func TestDoesNotGrowWithoutDemand(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 4)
	for range 20 {
		if l, _ := run(p, 10, 40*time.Millisecond, false); l != 4 {
			t.Fatalf("limit %d, want 4: nothing proves more concurrency helps", l)
		}
	}
}

func TestShrinksOnSustainedLatencyRiseAndRecovers(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 16)
	for range 5 {
		run(p, 10, 40*time.Millisecond, true) // baseline 40ms
	}
	// One slow interval is noise: nothing moves.
	if l, _ := run(p, 10, 200*time.Millisecond, true); l != 16 {
		t.Fatalf("limit %d after one slow interval, want 16 (hysteresis)", l)
	}
	l, reason := run(p, 10, 200*time.Millisecond, true)
	if l != 12 || reason != ReasonLatency {
		t.Fatalf("after two slow intervals: limit %d (%s), want 12 (latency)", l, reason)
	}
	for range 6 {
		l, _ = run(p, 10, 200*time.Millisecond, true)
	}
	if l >= 6 {
		t.Fatalf("limit %d after a long latency spike, want it well down", l)
	}
	low := l
	for range 30 {
		l, _ = run(p, 10, 40*time.Millisecond, true)
	}
	if l <= low {
		t.Fatalf("limit %d after the spike ended, want growth back from %d", l, low)
	}
}

func TestEmergencyCutOnErrorsAndPoolExhaustion(t *testing.T) {
	t.Parallel()
	for name, overload := range map[string]func(p *Policy){
		"timeouts": func(p *Policy) {
			for range 8 {
				p.ObserveLatency(40*time.Millisecond, false)
			}
			p.ObserveLatency(5*time.Second, true)
			p.ObserveLatency(5*time.Second, true)
		},
		"pool exhausted": func(p *Policy) {
			for range 10 {
				p.ObserveLatency(40*time.Millisecond, false)
			}
			p.ObserveCheckout(2*time.Second, true)
			p.ObserveCheckout(2*time.Second, true)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := NewPolicy(PolicyConfig{Max: 16}, 16)
			run(p, 10, 40*time.Millisecond, true)
			overload(p)
			l, reason, changed := p.Decide(true)
			if l != 1 || reason != ReasonOverload || !changed {
				t.Fatalf("limit %d (%s, changed %v), want an emergency cut to 1", l, reason, changed)
			}
			// Cautious growth: one step per healthy interval.
			for i := 1; i <= 3; i++ {
				if l, _ := run(p, 10, 40*time.Millisecond, true); l != 1+i {
					t.Fatalf("healthy interval %d after the cut: limit %d, want %d", i, l, 1+i)
				}
			}
		})
	}
}

func TestNoOscillationOnNoise(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 8)
	rnd := rand.New(rand.NewPCG(3, 4))
	decreases := 0
	for range 500 {
		// ±20% jitter around 40ms: well inside the 1.5× tolerance.
		for range 10 {
			p.ObserveLatency(time.Duration(float64(40*time.Millisecond)*(0.8+0.4*rnd.Float64())), false)
		}
		before := p.Limit()
		if l, _, _ := p.Decide(true); l < before {
			decreases++
		}
	}
	if decreases != 0 || p.Limit() != 16 {
		t.Fatalf("%d decreases on noise, final limit %d; want 0 and 16", decreases, p.Limit())
	}
}

func TestSlowPoolCheckoutsCountAsSlowIntervals(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 10)
	run(p, 10, 40*time.Millisecond, true)
	for range 2 {
		for range 10 {
			p.ObserveLatency(40*time.Millisecond, false)
			p.ObserveCheckout(200*time.Millisecond, false)
		}
		p.Decide(true)
	}
	if l := p.Limit(); l >= 10 {
		t.Fatalf("limit %d with connections queueing 200ms in the pool, want a decrease", l)
	}
}

func TestBoundsAreKept(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Min: 2, Max: 5}, 100)
	if p.Limit() != 5 {
		t.Fatalf("initial limit %d, want clamped to 5", p.Limit())
	}
	for range 20 {
		run(p, 10, 40*time.Millisecond, true)
	}
	if p.Limit() != 5 {
		t.Fatalf("limit %d, want at most 5", p.Limit())
	}
	p.ObserveLatency(time.Second, true)
	p.ObserveLatency(time.Second, true)
	if l, _, _ := p.Decide(true); l != 2 {
		t.Fatalf("cut to %d, want the floor 2", l)
	}
}

func TestSlowWorkAccumulatesSamplesAcrossIntervals(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 4)
	// Two refreshes a second: no interval alone has 5 samples, but every
	// third interval has enough carried over to be judged, and grows for
	// the three intervals it covers.
	var grew []int
	for i := 1; i <= 9; i++ {
		p.ObserveLatency(2*time.Second, false)
		p.ObserveLatency(2*time.Second, false)
		if _, reason, changed := p.Decide(true); changed && reason == ReasonHeadroom {
			grew = append(grew, i)
		}
	}
	if !slices.Equal(grew, []int{3, 6, 9}) || p.Limit() != 13 {
		t.Fatalf("grew at intervals %v to %d, want at 3, 6, 9 (one per 5+ samples) to 4 + 9 = 13", grew, p.Limit())
	}
}

// Replicas with few and many slots gather samples at different rates; both
// must grow alike per unit of time, or the larger one pulls away.
func TestGrowthPerIntervalDoesNotFavourTheLarger(t *testing.T) {
	t.Parallel()
	small, large := NewPolicy(PolicyConfig{Max: 64}, 2), NewPolicy(PolicyConfig{Max: 64}, 10)
	for range 12 {
		for _, p := range []*Policy{small, large} {
			// One sample per slot per interval: the small replica is judged
			// every third interval, the large one every interval.
			for range p.Limit() / 2 {
				p.ObserveLatency(40*time.Millisecond, false)
			}
			p.Decide(true)
		}
	}
	if gs, gl := small.Limit()-2, large.Limit()-10; gs < gl-maxCatchUp || gs == 0 {
		t.Fatalf("small grew %d, large %d over the same 12 intervals: want alike", gs, gl)
	}
}

func TestRunningWorkPastTheThresholdIsJudgedBeforeItEnds(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 8)
	run(p, 10, 40*time.Millisecond, true) // baseline 40ms; limit 9
	ages := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	// Young work says nothing: no samples, no judgement.
	p.ObserveRunning(ages(9, 50*time.Millisecond))
	if _, _, changed := p.Decide(true); changed {
		t.Fatalf("limit changed on work younger than the slow threshold")
	}
	// Every slot stuck at 5× the baseline, nothing finished: two intervals cut.
	for range 2 {
		p.ObserveRunning(ages(9, 200*time.Millisecond))
		p.Decide(true)
	}
	if l := p.Limit(); l >= 9 {
		t.Fatalf("limit %d with every slot stuck at 5× the baseline, want a cut", l)
	}
}

// A heavy user's refresh running for a minute among healthy work must not
// talk the limit down, however many intervals it spans.
func TestOneStragglerIsNotASpike(t *testing.T) {
	t.Parallel()
	p := NewPolicy(PolicyConfig{Max: 16}, 8)
	run(p, 10, 40*time.Millisecond, true)
	before := p.Limit()
	for i := range 60 {
		running := []time.Duration{time.Duration(i+1) * time.Second}
		for range 7 {
			running = append(running, 20*time.Millisecond)
		}
		p.ObserveRunning(running)
		if l, reason := run(p, 20, 40*time.Millisecond, false); l < before {
			t.Fatalf("interval %d: limit %d (%s) from %d because one refresh is slow", i, l, reason, before)
		}
	}
}
