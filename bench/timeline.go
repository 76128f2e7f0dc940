package bench

import (
	"math"
	"time"
)

// What a run's timeline says: pure functions of the samples, the
// scenarios' figures and targets are computed from.

// windowRate is the entries done per second between t0 and t1 (seconds).
func (r *runResult) windowRate(t0, t1 float64) float64 {
	a, b := r.at(t0), r.at(t1)
	if b.T <= a.T {
		return 0
	}
	return (b.Progress - a.Progress) / (b.T - a.T)
}

// at is the first sample at or after t (the last one if none).
func (r *runResult) at(t float64) sample {
	for _, s := range r.Timeline {
		if s.T >= t {
			return s
		}
	}
	if len(r.Timeline) == 0 {
		return sample{}
	}
	return r.Timeline[len(r.Timeline)-1]
}

// never lets a run go on to its time cap.
func never([]sample) bool { return false }

// lastsAndDid ends a fixed-length run after d, but not before something was
// done: on a loaded machine a short (smoke) run can pass before the consumer
// has started, and a run that did nothing measures nothing. Give such a run
// a max of d plus some grace.
func lastsAndDid(d time.Duration) func([]sample) bool {
	return func(s []sample) bool { return last(s).T >= d.Seconds() && last(s).Progress > 0 }
}

func last(s []sample) sample {
	if len(s) == 0 {
		return sample{}
	}
	return s[len(s)-1]
}

func maxOldest(s []sample, from float64) float64 {
	m := 0.0
	for _, x := range s {
		if x.T >= from {
			m = math.Max(m, x.OldestAge)
		}
	}
	return m
}

func maxOldestIn(s []sample, from, to float64) float64 {
	m := 0.0
	for _, x := range s {
		if x.T >= from && x.T < to {
			m = math.Max(m, x.OldestAge)
		}
	}
	return m
}

// depthSlope is the least-squares growth of depth per second between t0 and t1.
func depthSlope(s []sample, t0, t1 float64) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, x := range s {
		if x.T < t0 || x.T > t1 {
			continue
		}
		d := float64(x.Depth)
		n++
		sx += x.T
		sy += d
		sxx += x.T * x.T
		sxy += x.T * d
	}
	if n < 2 || n*sxx-sx*sx == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// recoveredAfter is the seconds after restore until the oldest age was back
// under its highest level between warm and the trigger; -1 if never.
func recoveredAfter(samples []sample, warm, triggerAt, restoreAt float64) float64 {
	level := maxOldestIn(samples, warm, triggerAt)
	for _, s := range samples {
		if s.T >= restoreAt && s.OldestAge <= level {
			return s.T - restoreAt
		}
	}
	return -1
}

// drainedAfter is the seconds after restore until both the depth and the
// oldest age were back under their highest levels between warm and the
// trigger; -1 if never.
func drainedAfter(samples []sample, warm, triggerAt, restoreAt float64) float64 {
	var depth int64
	for _, s := range samples {
		if s.T >= warm && s.T < triggerAt {
			depth = max(depth, s.Depth)
		}
	}
	age := maxOldestIn(samples, warm, triggerAt)
	for _, s := range samples {
		if s.T >= restoreAt && s.Depth <= depth && s.OldestAge <= age {
			return s.T - restoreAt
		}
	}
	return -1
}

// peakDepth is the deepest the queue was from the given second on.
func peakDepth(s []sample, from float64) int64 {
	var m int64
	for _, x := range s {
		if x.T >= from {
			m = max(m, x.Depth)
		}
	}
	return m
}
