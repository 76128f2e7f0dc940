// Package planner predicts how scorerefresh drains a backlog (drain time,
// the oldest age over time, the arrival rate a fleet sustains, the replicas
// a target age needs) and whether a transient (slower round trips, a burst)
// leaves the queue in a state it does not come back from; the model is
// derived in docs/capacity-planning.md. It talks to no database: the
// consumer's costs are its own constants (consumer/cost.go), its batch
// spreading consumer.SpreadBatch, the capacity formula metrics.DrainRate
// (the live headroom's). Simulate, a discrete-event simulation over the
// backlog's own entries, gives the timelines; the closed forms (FleetBounds,
// Mix.Demand, Mix.SustainableRate, Assess) the first-principles figures.
// Make runs both for 1…N replicas.
package planner

import (
	"encoding/json"
	"math"
	"time"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/metrics"
)

// overheadInFlight is the claim and ack commands a busy replica has in
// flight on average besides its refreshes: a claim round (4 round trips)
// every REFRESH_CONCURRENCY refreshes and a flush (2) every 50 ms or so.
const overheadInFlight = 0.75

// ackInterval is consumer.AckFlushInterval in the model's seconds.
const ackInterval = float64(consumer.AckFlushInterval) / float64(time.Second)

// Config is the fleet's configuration.
type Config struct {
	Components       int     `json:"components"`         // rule components
	Concurrency      int     `json:"refreshConcurrency"` // REFRESH_CONCURRENCY
	MaxUsersInFlight int     `json:"maxUsersInFlight"`   // MAX_USERS_IN_FLIGHT
	ClaimWindow      int     `json:"claimWindow"`        // CLAIM_WINDOW
	Replicas         int     `json:"replicas"`
	Batch            int     `json:"batch"`               // REFRESH_BATCH_SIZE resolved: most users per recompute; 1: one refresh per user
	PollInterval     float64 `json:"pollIntervalSeconds"` // POLL_INTERVAL
	ChangeStreams    bool    `json:"changeStreams"`       // arrivals wake an idle replica at once
}

// RoundTrips is the cost of one refresh (of one batch when Batch > 1).
func (c Config) RoundTrips() int { return c.Components + 2 }

// slots is the users one replica refreshes at once: a batch per slot.
func (c Config) slots() int { return c.Concurrency * c.Batch }

// HeldCap is the most users one replica holds.
func (c Config) HeldCap() int { return min(c.MaxUsersInFlight, consumer.LeadFactor*c.slots()) }

// SpreadBatch is the users per batch with every slot busy: the held users
// spread over the slots, at most Batch (consumer.SpreadBatch).
func (c Config) SpreadBatch() int { return consumer.SpreadBatch(c.Batch, c.HeldCap(), c.Concurrency) }

// Server is how long a round trip takes.
type Server struct {
	RTT  float64 `json:"rttSeconds"`  // network round trip
	Cost float64 `json:"costSeconds"` // the server's time per command, uncontended
	// Capacity is the most commands a second the server answers; 0: no limit.
	Capacity float64 `json:"capacityPerSecond,omitempty"`
	// Knee and Slope model a server that degrades under load: every command
	// takes Slope longer per command in flight beyond Knee. Slope 0: none.
	Knee  int     `json:"knee,omitempty"`
	Slope float64 `json:"slopeSeconds,omitempty"`
	// EntryCost is the server's time per queue entry an ack flush deletes
	// (a firehose user's refresh acknowledges thousands at once).
	EntryCost float64 `json:"entryCostSeconds,omitempty"`
	// ScanCost is the server's time per queued entry for each of a claim
	// round's two queue reads: about 0 on MongoDB's index, not on FerretDB.
	ScanCost float64 `json:"scanCostSeconds,omitempty"`
}

// Latency is one command's round trip with inFlight commands in flight
// (itself included), its network part multiplied by rttFactor. A closed
// system of n clients in front of a server of capacity Q cannot complete
// more than Q commands a second, so each takes at least n/Q.
func (s Server) Latency(inFlight float64, rttFactor float64) float64 {
	lat := s.RTT*rttFactor + s.Cost
	if s.Capacity > 0 {
		lat = math.Max(lat, inFlight/s.Capacity)
	}
	if s.Slope > 0 && inFlight > float64(s.Knee) {
		lat += s.Slope * (inFlight - float64(s.Knee))
	}
	return lat
}

// Transient is round trips RTTFactor times longer from At for For seconds,
// and/or Burst entries of as many new users at At.
type Transient struct {
	At        float64 `json:"atSeconds"`
	For       float64 `json:"forSeconds"`
	RTTFactor float64 `json:"rttFactor"`
	Burst     int     `json:"burst,omitempty"`
}

// Active says whether the transient disturbs anything.
func (t Transient) Active() bool { return (t.RTTFactor > 1 && t.For > 0) || t.Burst > 0 }

// End is when the disturbance is over.
func (t Transient) End() float64 {
	if t.RTTFactor > 1 && t.For > 0 {
		return t.At + t.For
	}
	return t.At
}

// Bounds are the first-principles ceilings on refreshes a second for a fleet.
type Bounds struct {
	Replicas int     `json:"replicas"`
	Latency  float64 `json:"latency"`  // every slot busy at an idle server's round trip
	InFlight float64 `json:"inFlight"` // what MAX_USERS_IN_FLIGHT allows
	Server   Limit   `json:"server"`   // capacity over a refresh's round trips; +Inf without one
	// Loaded is the rate with every slot busy, the round trip taken at that
	// load: what a deep backlog, or a transient that fills the slots, gets.
	Loaded float64 `json:"loaded"`
	// Lower, the least of Loaded and InFlight, is what the fleet does;
	// Binding says what holds it there.
	Lower   float64 `json:"lower"`
	Binding string  `json:"binding"`
}

// FleetBounds computes the bounds for replicas replicas.
func FleetBounds(c Config, s Server, replicas int) Bounds {
	rt := float64(c.RoundTrips())
	slots := float64(replicas * c.Concurrency)
	b := Bounds{Replicas: replicas, Server: Limit(math.Inf(1))}
	batch := float64(c.SpreadBatch())
	b.Latency = metrics.DrainRate(slots, batch, rt*s.Latency(1, 1), 1)
	full := float64(replicas) * (float64(c.Concurrency) + overheadInFlight)
	lat := s.Latency(full, 1)
	b.Loaded = metrics.DrainRate(slots, batch, rt*lat, 1)
	// A held user waits out its refresh, the ack flush (its interval and
	// round trips) and the claim round that replaces it; batches are made
	// of held users, so the users held bound the drain whatever the batch.
	hold := rt*lat + ackInterval + float64(consumer.AckRoundTrips+consumer.ClaimRoundTrips)*lat
	b.InFlight = float64(replicas*c.HeldCap()) / hold
	if s.Capacity > 0 {
		b.Server = Limit(s.Capacity * batch / rt)
	}
	b.Lower, b.Binding = b.Loaded, "latency"
	switch {
	case b.InFlight < b.Loaded:
		b.Lower, b.Binding = b.InFlight, "users in flight"
	case b.Loaded < 0.999*b.Latency && s.Capacity > 0 && full/s.Capacity >= s.RTT+s.Cost:
		b.Binding = "server capacity"
	case b.Loaded < 0.999*b.Latency:
		b.Binding = "server under load"
	}
	return b
}

// Limit is a figure that may be unbounded (+Inf), null in JSON.
type Limit float64

func (l Limit) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(l), 0) || math.IsNaN(float64(l)) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(l))
}

// LatencyCeiling and ServerCeiling are the two ceilings no drain beats, as
// the bench reports them next to its measurements. LatencyCeiling is the
// refreshes per second of usersInRefresh users in refresh at once, each
// refresh roundTrips trips of secondsPerTrip.
func LatencyCeiling(usersInRefresh, roundTrips, secondsPerTrip float64) float64 {
	return metrics.DrainRate(usersInRefresh, 1, roundTrips*secondsPerTrip, 1)
}

// ServerCeiling is qps queries a second over roundTrips queries a refresh.
func ServerCeiling(qps, roundTrips float64) float64 {
	if qps <= 0 || roundTrips <= 0 {
		return 0
	}
	return qps / roundTrips
}
