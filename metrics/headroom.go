package metrics

import (
	"math"
	"time"
)

// HeadroomSample is what one SLI sample knows: the queue as sampled, and this
// consumer's cumulative counters at that moment.
type HeadroomSample struct {
	At          time.Time
	Depth       float64 // queue documents
	Removed     float64 // cumulative entries this consumer acked or dead-lettered
	Refreshes   float64 // cumulative finished user refreshes (ok and error)
	Batches     float64 // cumulative finished batches (a slot's refresh of one user or several)
	BatchSecs   float64 // cumulative seconds those batches held their slots
	OKRefreshes float64 // cumulative successful refreshes
	Acked       float64 // cumulative entries acked
	Limit       float64 // current refresh concurrency limit
}

// Headroom is the estimate of whether the consumer keeps up, which says the
// service is in the vulnerable state before the queue shows it.
type Headroom struct {
	ArrivalRate   float64 // entries enqueued per second over the window
	DrainCapacity float64 // entries per second this consumer could acknowledge now
	TimeToDrain   float64 // seconds; 0 when empty, +Inf when arrivals ≥ capacity
}

// HeadroomEstimator derives Headroom from the oldest and newest samples of a
// sliding window. Arrivals are Δdepth + entries removed by this consumer:
// exact with one replica, a lower bound with several (each sees only its own
// removals; the alert rules compute the fleet's in PromQL). Capacity is
// DrainRate over the batches finished within the window (the last known
// values while idle); the slots count batches, not users.
type HeadroomEstimator struct {
	Window                               time.Duration // default 2m
	samples                              []HeadroomSample
	meanBatch, usersPerBatch, perRefresh float64 // last known, kept through idle windows
}

// Observe adds a sample and returns the estimate over the window.
func (e *HeadroomEstimator) Observe(s HeadroomSample) Headroom {
	window := e.Window
	if window <= 0 {
		window = 2 * time.Minute
	}
	e.samples = append(e.samples, s)
	// Keep the newest sample at least window old as the baseline.
	for len(e.samples) > 2 && s.At.Sub(e.samples[1].At) >= window {
		e.samples = e.samples[1:]
	}
	first := e.samples[0]
	var h Headroom
	if dt := s.At.Sub(first.At).Seconds(); dt > 0 {
		arrived := (s.Depth - first.Depth) + (s.Removed - first.Removed)
		h.ArrivalRate = math.Max(0, arrived/dt)
	}
	if n := s.Batches - first.Batches; n > 0 {
		e.meanBatch = (s.BatchSecs - first.BatchSecs) / n
		e.usersPerBatch = (s.Refreshes - first.Refreshes) / n
	}
	if ok := s.OKRefreshes - first.OKRefreshes; ok > 0 {
		e.perRefresh = (s.Acked - first.Acked) / ok
	}
	h.DrainCapacity = DrainRate(s.Limit, e.usersPerBatch, e.meanBatch, e.perRefresh)
	switch {
	case s.Depth <= 0:
		h.TimeToDrain = 0
	case h.DrainCapacity <= h.ArrivalRate:
		h.TimeToDrain = math.Inf(1)
	default:
		h.TimeToDrain = s.Depth / (h.DrainCapacity - h.ArrivalRate)
	}
	return h
}

// DrainRate is what refresh slots acknowledge per second with every slot
// busy: slots × users per batch ÷ a batch's seconds × entries acknowledged
// per user refresh (0 when any is unknown). The live headroom, the planner's
// bounds and the bench's estimate are this one formula.
func DrainRate(slots, usersPerBatch, batchSeconds, entriesPerUser float64) float64 {
	if slots <= 0 || usersPerBatch <= 0 || batchSeconds <= 0 || entriesPerUser <= 0 {
		return 0
	}
	return slots * usersPerBatch / batchSeconds * entriesPerUser
}
