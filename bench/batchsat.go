//go:build !oldrelease

package bench

import (
	"time"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/planner"
)

// capacitySnap is what the service's metrics said at one moment of a run:
// the inputs of planner.DrainRate, cumulative, and the drain-capacity gauge
// as the service last set it.
type capacitySnap struct {
	T         float64 // seconds since the consumer started
	Batches   float64 // refresh_batch_duration_seconds count
	BatchSecs float64 // refresh_batch_duration_seconds sum
	Users     float64 // refresh_batch_users sum: users refreshed
	OK        float64 // successful refreshes
	Acked     float64
	Gauge     float64 // scorerefresh_drain_capacity
}

// capacitySnaps takes a snapshot every `every` of a run.
type capacitySnaps struct {
	every time.Duration
	next  time.Duration
	list  []capacitySnap
}

func (c *capacitySnaps) observe(elapsed time.Duration, s *scorerefresh) {
	if elapsed < c.next {
		return
	}
	c.next = elapsed + max(c.every, 100*time.Millisecond)
	snap := capacitySnap{T: elapsed.Seconds()}
	for _, svc := range s.svcs {
		snap.add(svc)
	}
	c.list = append(c.list, snap)
}

func (c *capacitySnap) add(svc *app.Service) {
	n, sum := histogram(svc.Metrics.RefreshBatchSeconds)
	c.Batches += n
	c.BatchSecs += sum
	_, users := histogram(svc.Metrics.RefreshBatchUsers)
	c.Users += users
	c.OK += metrics.Read(svc.Metrics.Refreshes.WithLabelValues(metrics.OutcomeOK))
	c.Acked += metrics.Read(svc.Metrics.EntriesAcked)
	c.Gauge += metrics.Read(svc.SLI.DrainCapacity)
}

// saturation is a drain while its backlog was deep: the measured ack rate
// and the drain capacity the service estimated over the same stretch.
type saturation struct {
	From float64 `json:"from_s"` // the stretch, seconds since the consumer started
	To   float64 `json:"to_s"`
	Rate float64 `json:"acked_per_second"`
	// UsersPerBatch, BatchMs and EntriesPerUser are planner.DrainRate's
	// inputs over the stretch, from the service's histograms.
	UsersPerBatch  float64 `json:"users_per_batch"`
	BatchMs        float64 `json:"mean_batch_ms"`
	EntriesPerUser float64 `json:"entries_per_user"`
	// Estimate is planner.DrainRate(REFRESH_CONCURRENCY, those inputs): the
	// formula of scorerefresh_drain_capacity over the stretch.
	Estimate float64 `json:"drain_rate_estimate"`
	// Gauge is scorerefresh_drain_capacity as the service last set it
	// within the stretch (its sampler's window, SLI_INTERVAL apart; 0: it
	// set none there).
	Gauge   float64 `json:"drain_capacity_gauge"`
	GaugeAt float64 `json:"drain_capacity_gauge_at"`
}

// saturatedDrain finds the stretch of run where every slot could be busy:
// from the first tenth of the run (start-up: connections, the first claim
// round) to the last sample with more than twice MAX_USERS_IN_FLIGHT queued
// (past it claim rounds cannot fill the consumer). A run too short for
// that is taken whole.
func saturatedDrain(run *runResult, snaps []capacitySnap, inFlight, slots int) saturation {
	var s saturation
	if run == nil || len(run.Timeline) == 0 {
		return s
	}
	s.From, s.To = 0.1*run.Seconds, -1.0
	for _, p := range run.Timeline {
		if p.T >= s.From && p.Depth > int64(2*inFlight) {
			s.To = p.T
		}
	}
	if s.To <= s.From {
		s.From, s.To = 0, run.Seconds
	}
	s.Rate = run.windowRate(s.From, s.To)
	a, b, ok := snapsAround(snaps, s.From, s.To)
	if !ok {
		return s
	}
	if n := b.Batches - a.Batches; n > 0 {
		s.UsersPerBatch = (b.Users - a.Users) / n
		s.BatchMs = 1000 * (b.BatchSecs - a.BatchSecs) / n
	}
	if ok := b.OK - a.OK; ok > 0 {
		s.EntriesPerUser = (b.Acked - a.Acked) / ok
	}
	s.Estimate = planner.DrainRate(float64(slots), s.UsersPerBatch, s.BatchMs/1000, s.EntriesPerUser)
	for _, p := range snaps {
		if p.T <= s.To && p.Gauge > 0 {
			s.Gauge, s.GaugeAt = p.Gauge, p.T
		}
	}
	return s
}

// snapsAround are the first snapshot at or after from and the last at or
// before to.
func snapsAround(snaps []capacitySnap, from, to float64) (a, b capacitySnap, ok bool) {
	first, last := -1, -1
	for i, p := range snaps {
		if first < 0 && p.T >= from {
			first = i
		}
		if p.T <= to {
			last = i
		}
	}
	if first < 0 || last <= first {
		return a, b, false
	}
	return snaps[first], snaps[last], true
}
