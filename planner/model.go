// Package planner predicts how scorerefresh drains a backlog (drain time,
// the oldest age over time, the arrival rate a fleet sustains, the replicas
// a target age needs) and whether a transient (slower round trips, a burst)
// leaves the queue in a state it does not come back from, by the model of
// docs/capacity-planning.md, with no database. Simulate, a discrete-event
// simulation over the backlog's own entries, gives the timelines; the closed
// forms (FleetBounds, Mix, Assess) the first-principles figures; Make runs both.
package planner

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
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
	RTT       float64 `json:"rttSeconds"`                  // network round trip
	Cost      float64 `json:"costSeconds"`                 // the server's time per command, uncontended
	Capacity  float64 `json:"capacityPerSecond,omitempty"` // the most commands a second it answers; 0: no limit
	Knee      int     `json:"knee,omitempty"`              // degrading under load: past Knee commands in flight,
	Slope     float64 `json:"slopeSeconds,omitempty"`      // every command takes Slope longer per command beyond it; 0: none
	EntryCost float64 `json:"entryCostSeconds,omitempty"`  // the server's time per entry an ack flush deletes (a firehose user's refresh deletes thousands)
	ScanCost  float64 `json:"scanCostSeconds,omitempty"`   // per queued entry, each of a claim round's two reads: about 0 on MongoDB's index, not on FerretDB
}

// Latency is one command's round trip with inFlight commands in flight
// (itself included), its network part times rttFactor: at least n/Q, as n
// clients of a server of capacity Q complete at most Q commands a second.
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
	Loaded   float64 `json:"loaded"`   // every slot busy at the round trip of that load: what a deep backlog, or a transient filling the slots, gets
	Lower    float64 `json:"lower"`    // the least of Loaded and InFlight: what the fleet does
	Binding  string  `json:"binding"`  // what holds it there
}

// FleetBounds computes the bounds for replicas replicas.
func FleetBounds(c Config, s Server, replicas int) Bounds {
	rt, slots, batch := float64(c.RoundTrips()), float64(replicas*c.Concurrency), float64(c.SpreadBatch())
	b := Bounds{Replicas: replicas, Server: Limit(math.Inf(1))}
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

// LatencyCeiling and ServerCeiling are the ceilings no drain beats, as the
// bench reports them: the refreshes a second of usersInRefresh users in
// refresh at once, each roundTrips trips of secondsPerTrip.
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

// The stability classes, as Describe words them.
const (
	ClassNoLoad     = "no load"
	ClassStable     = "stable"
	ClassMetastable = "metastable" // keeps up lightly loaded, falls behind with every slot busy: the wedge
	ClassOverloaded = "overloaded"
)

// Stability is the first-principles verdict for a load.
type Stability struct {
	Class           string  `json:"class"`
	Demand          float64 `json:"demandRefreshesPerSecond"` // the refreshes a second the load needs, with NormalWait's coalescing
	NormalWait      float64 `json:"normalWaitSeconds"`        // for its claim, while the fleet keeps up
	Loaded          float64 `json:"loadedRefreshesPerSecond"` // the fleet's with every slot busy
	Margin          float64 `json:"margin"`                   // Loaded / Demand − 1
	BusyLow         float64 `json:"busyLow"`                  // commands in flight while the fleet keeps up (the low fixed point); -1: none
	SettledWait     Limit   `json:"settledWaitSeconds"`       // how old entries get once coalescing brings a backed-up queue's demand to Loaded; +Inf: never
	BacklogUsers    int     `json:"backlogUsers,omitempty"`
	RecoverySeconds float64 `json:"recoverySeconds,omitempty"` // the time BacklogUsers users take to clear at Loaded − Demand (stable only)
}

// Assess classifies a load of rate entries a second with mix's users, and
// estimates the recovery from a backlog of backlogUsers users (0: none).
func Assess(c Config, s Server, replicas int, mix Mix, rate float64, backlogUsers int) Stability {
	st := Stability{NormalWait: float64(consumer.ClaimRoundTrips) * s.Latency(1, 1), BusyLow: -1}
	if !c.ChangeStreams {
		st.NormalWait += c.PollInterval / 2
	}
	st.Loaded = FleetBounds(c, s, replicas).Lower // the least of Loaded and InFlight
	if rate <= 0 {
		st.Class = ClassNoLoad
		return st
	}
	st.Demand = mix.Demand(rate, st.NormalWait)
	st.Margin = st.Loaded/st.Demand - 1
	st.SettledWait = Limit(mix.SettledWait(rate, st.Loaded))
	busy, ok := lowFixedPoint(c, s, replicas, st.Demand)
	switch {
	case !ok:
		st.Class = ClassOverloaded
	case st.Loaded >= st.Demand:
		st.Class, st.BusyLow = ClassStable, busy
		if backlogUsers > 0 {
			st.BacklogUsers, st.RecoverySeconds = backlogUsers, float64(backlogUsers)/(st.Loaded-st.Demand)
		}
	default:
		st.Class, st.BusyLow = ClassMetastable, busy
	}
	return st
}

// lowFixedPoint finds the commands in flight that a demand of d refreshes a
// second keeps busy when the fleet keeps up: by Little's law d × round
// trips × latency(n) users are in refresh, one per slot while they fit
// (batches spread over free slots stay single), then batches grow on
// every slot. Iterating from an idle server climbs to the lowest fixed
// point; if the users pass what full batches hold, the fleet cannot keep up.
func lowFixedPoint(c Config, s Server, replicas int, d float64) (float64, bool) {
	rt, slots, n := float64(c.RoundTrips()), float64(replicas*c.Concurrency), 0.0
	for range 10_000 {
		users := d * rt * s.Latency(math.Max(n, 1), 1)
		if users > slots*float64(c.SpreadBatch()) {
			return users, false
		}
		next := math.Min(users, slots)
		if math.Abs(next-n) < 1e-9 {
			return next, true
		}
		n = next
	}
	return n, true
}

// Describe is the verdict in a sentence.
func (st Stability) Describe() string {
	switch st.Class {
	case ClassNoLoad:
		return "no arrivals after the backlog: nothing to wedge; a transient only delays the drain"
	case ClassStable:
		return fmt.Sprintf("stable: %.1f refreshes/s with every slot busy against a demand of %.1f/s (headroom %+.0f%%); any backlog drains",
			st.Loaded, st.Demand, 100*st.Margin) + When(st.RecoverySeconds > 0, " (this one's %d users in about %s)", st.BacklogUsers, Seconds(st.RecoverySeconds))
	case ClassMetastable:
		return fmt.Sprintf("METASTABLE: keeps up while lightly loaded (%.1f commands in flight), but with every slot busy it does %.1f refreshes/s against a demand of %.1f/s (headroom %+.0f%%): a transient that fills the slots leaves the queue %s",
			st.BusyLow, st.Loaded, st.Demand, 100*st.Margin, settled(float64(st.SettledWait)))
	}
	return fmt.Sprintf("OVERLOADED: the load needs %.1f refreshes/s, more than the fleet does (%.1f/s with every slot busy, headroom %+.0f%%): the queue %s even without a transient",
		st.Demand, st.Loaded, 100*st.Margin, settled(float64(st.SettledWait)))
}

func settled(wait float64) string {
	if math.IsInf(wait, 1) || wait > 7*24*3600 {
		return "growing without bound"
	}
	return fmt.Sprintf("backed up until entries are about %s old (coalescing then brings the demand down to what the fleet does)", Seconds(wait))
}

// Seconds prints a duration in seconds for people: 42.0s, 12m30s, 3h05m.
func Seconds(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "∞"
	case s < 0:
		return "-"
	case s < 100:
		return fmt.Sprintf("%.1fs", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	}
	return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
}

// Mix is how arrivals spread over users, learnt from a backlog: each
// user's share of the entries, plus a share from users it has not seen,
// estimated (Good–Turing) as the fraction of entries whose user appears once.
type Mix struct {
	groups []shareGroup // users with the same share, largest share first
	New    float64      `json:"new"` // share of arrivals from unseen users
	Users  int          `json:"users"`
}

type shareGroup struct {
	share float64 // of all arrivals, per user
	users int
}

// NewMix builds the mix from each user's number of entries.
func NewMix(counts []int) Mix {
	total, byCount := 0, map[int]int{}
	for _, n := range counts {
		if n > 0 {
			total += n
			byCount[n]++
		}
	}
	if total == 0 {
		return Mix{Users: len(counts), New: 1}
	}
	m := Mix{Users: len(counts), New: float64(byCount[1]) / float64(total)}
	for n, users := range byCount {
		m.groups = append(m.groups, shareGroup{share: (1 - m.New) * float64(n) / float64(total), users: users})
	}
	slices.SortFunc(m.groups, func(a, b shareGroup) int { return cmp.Compare(b.share, a.share) })
	return m
}

// Demand is the refreshes a second rate entries a second need when an
// entry waits wait seconds for its claim: a user with r entries a second is
// refreshed once per 1/r + wait, r / (1 + r·wait) a second; unseen users'
// entries each cost a refresh.
func (m Mix) Demand(rate, wait float64) float64 {
	d := rate * m.New
	for _, g := range m.groups {
		r := rate * g.share
		d += float64(g.users) * r / (1 + r*wait)
	}
	return d
}

// SustainableRate is the highest arrival rate whose demand at wait stays
// within capacity; +Inf: none is too high (no unseen users, and all are
// refreshed within wait anyway).
func (m Mix) SustainableRate(capacity, wait float64) float64 {
	if capacity <= 0 {
		return 0
	}
	if m.New == 0 && float64(m.Users)/math.Max(wait, 1e-9) <= capacity {
		return math.Inf(1)
	}
	lo, _ := bisect(capacity, 1e12, func(r float64) bool { return m.Demand(r, wait) <= capacity })
	return lo
}

// SettledWait is the wait at which rate's demand matches capacity: 0 when
// the fleet keeps up without a queue; +Inf when unseen users alone need more.
func (m Mix) SettledWait(rate, capacity float64) float64 {
	if m.Demand(rate, 0) <= capacity {
		return 0
	}
	if rate*m.New >= capacity {
		return math.Inf(1)
	}
	_, hi := bisect(1, 1e9, func(w float64) bool { return m.Demand(rate, w) > capacity })
	return hi
}

// bisect finds where below turns false (true at 0): it doubles hi from
// start (both +Inf past limit), then halves [lo, hi] a hundred times.
func bisect(start, limit float64, below func(float64) bool) (lo, hi float64) {
	hi = start
	for below(hi) {
		lo, hi = hi, hi*2
		if hi > limit {
			return math.Inf(1), math.Inf(1)
		}
	}
	for range 100 {
		if mid := (lo + hi) / 2; below(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, hi
}
