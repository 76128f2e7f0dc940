package planner

import (
	"math"
	"slices"
	"sort"

	"github.com/scorerefresh/scorerefresh/consumer"
)

// Sample is the queue at one moment of a drain, simulated or measured (a
// replay's timeline): one type, so both are judged (RecoveredAt) alike.
type Sample struct {
	T           float64 `json:"t"` // seconds since the plan (or the drain) began
	Depth       int     `json:"depth"`
	OldestAge   float64 `json:"oldestAge"` // now − the oldest entry's enqueue time; 0 when empty, -1 when not measured
	Wait        float64 `json:"wait"`      // now − max(the oldest entry's enqueue time, 0), simulated only: the part of the age replicas decide
	Acked       float64 `json:"acked"`     // entries acknowledged since the start
	Refreshes   float64 `json:"refreshes"` // successful user refreshes since the start
	RTTFactor   float64 `json:"rttFactor,omitempty"`
	DeadLetters float64 `json:"deadLetters,omitempty"`    // entries dead-lettered since the start
	Measured    bool    `json:"measured,omitempty"`       // a replay's: Depth and OldestAge queried now (else Depth from the counters)
	AckedPerSec float64 `json:"ackedPerSecond,omitempty"` // a replay's, since the previous sample
	Arrived     int64   `json:"arrived,omitempty"`        // a replay's: the entries it inserted
}

// SimOptions bound a simulation.
type SimOptions struct {
	Horizon      float64 // stop here at the latest (seconds)
	SampleEvery  float64 // timeline resolution (seconds); 0 or less: 1
	UntilDrained bool    // stop once every entry is acknowledged
}

// Run is one simulation's outcome.
type Run struct {
	Replicas           int      `json:"replicas"`
	Timeline           []Sample `json:"timeline,omitempty"`
	Drained            bool     `json:"drained"` // every entry acknowledged, by DrainSeconds (the last flush; -1: not)
	DrainSeconds       float64  `json:"drainSeconds"`
	ClearSeconds       float64  `json:"clearSeconds"` // when every entry present at the start was; -1: not
	PeakDepth          int      `json:"peakDepth"`
	PeakOldestAge      float64  `json:"peakOldestAge"`
	PeakWait           float64  `json:"peakWait"`
	Refreshes          int      `json:"refreshes"`
	MeanRefreshSeconds float64  `json:"meanRefreshSeconds"` // the refresh_duration histogram's mean
	Acked              int      `json:"acked"`
	Entries            int      `json:"entries"`
	EndSeconds         float64  `json:"endSeconds"`
	End                Sample   `json:"end"`
}

// Simulate runs c.Replicas replicas over entries as Backlog.Schedule lays
// them out, naming users below users.
func Simulate(c Config, s Server, tr Transient, entries []Entry, users int, o SimOptions) *Run {
	m := &sim{c: c, s: s, e: entries, rttFactor: 1,
		pending: newSkipList(len(entries)), live: newSkipList(len(entries)),
		userPending: make([][]int32, users), leased: make([]bool, users), mark: make([]int32, users)}
	for _, e := range entries {
		if e.Arrive <= 0 {
			m.initialLeft, m.clearAt = m.initialLeft+1, -1 // until flushDone sees them all acknowledged
		}
	}
	for range c.Replicas {
		r := &replica{}
		m.reps = append(m.reps, r)
		m.every(c.PollInterval, func() { m.wake(r) })
	}
	if tr.RTTFactor > 1 && tr.For > 0 {
		m.at(tr.At, func() { m.rttFactor = tr.RTTFactor })
		m.at(tr.At+tr.For, func() { m.rttFactor = 1 })
	}
	m.arrive()
	m.sample()
	if o.SampleEvery <= 0 {
		o.SampleEvery = 1
	}
	m.every(o.SampleEvery, m.sample)
	for _, r := range m.reps {
		m.tryClaim(r)
	}
	m.loop(o)
	run := &Run{Replicas: len(m.reps), Timeline: m.timeline, Refreshes: m.refreshes, Acked: m.deleted,
		Entries: len(m.e), EndSeconds: m.now, ClearSeconds: m.clearAt, DrainSeconds: -1, End: m.timeline[len(m.timeline)-1]}
	if m.drained() {
		run.Drained, run.DrainSeconds = true, m.lastFlush
	}
	if m.refreshOps > 0 {
		run.MeanRefreshSeconds = m.refreshTime / float64(m.refreshOps)
	}
	pk := peak(m.timeline, math.Inf(-1), math.Inf(1))
	run.PeakDepth, run.PeakOldestAge, run.PeakWait = pk.Depth, pk.OldestAge, pk.Wait
	return run
}

// event is do at t: a time, or for round-trip work (a claim round, a
// refresh, a flush) the virtual round trip it ends at.
type event struct {
	t  float64
	do func()
}

type work struct {
	user    int32
	entries []int32
}

// replica is one consumer's pipeline state.
type replica struct {
	held, running                int
	waiting, outcomes            []work // claimed, waiting for a slot; refreshed, waiting for the ack flush
	idle, wakePending, backlog   bool
	flushing, armed, kickPending bool
	gen                          int // the ack timer's arming
}

// sim is the discrete-event simulation. Round-trip work progresses in
// "virtual round trips": every command in flight takes the same latency,
// which changes only at events, so v (round trips any command has done
// since the start) advances by dt/latency and a piece of work of k round
// trips started at v0 ends when v reaches v0+k.
type sim struct {
	c      Config
	s      Server
	e      []Entry
	now, v float64

	arrived, deleted, initialLeft int
	pending, live                 skipList
	userPending                   [][]int32
	leased                        []bool // by user: claimed, not yet acknowledged
	mark                          []int32
	stamp                         int32

	inFlight, refreshes, refreshOps int
	rttFactor, lastFlush, clearAt   float64
	refreshTime                     float64 // summed over refresh ops (batches)
	ops, timers                     []event
	reps                            []*replica
	wakeScheduled, stopped          bool
	timeline                        []Sample
}

// push schedules do at t in q, kept in time order, ties in the order scheduled.
func push(q *[]event, t float64, do func()) {
	i := sort.Search(len(*q), func(i int) bool { return (*q)[i].t > t })
	*q = slices.Insert(*q, i, event{t, do})
}

func (m *sim) at(t float64, do func()) { push(&m.timers, t, do) }

// every runs do every dt from now on.
func (m *sim) every(dt float64, do func()) {
	var tick func()
	tick = func() {
		do()
		m.at(m.now+dt, tick)
	}
	m.at(m.now+dt, tick)
}

// loop advances time event by event until the horizon or, when asked, drained.
func (m *sim) loop(o SimOptions) {
	m.at(o.Horizon, func() { m.stopped = true })
	for {
		lat := m.s.Latency(float64(m.inFlight), m.rttFactor)
		q, t := &m.timers, m.timers[0].t // a timer first at a tie
		if len(m.ops) > 0 {
			if tOp := m.now + (m.ops[0].t-m.v)*lat; tOp < t {
				q, t = &m.ops, tOp
				m.inFlight--
			}
		}
		m.advance(t, lat)
		do := (*q)[0].do
		*q = (*q)[1:]
		do()
		if m.stopped || (o.UntilDrained && m.drained()) {
			if q == &m.ops {
				m.sample() // the drain's last moment
			}
			return
		}
	}
}

func (m *sim) advance(t, lat float64) {
	if t > m.now {
		m.v, m.now = m.v+(t-m.now)/lat, t
	}
	m.arrive()
}

// arrive moves entries whose time has come into the queue.
func (m *sim) arrive() {
	for m.arrived < len(m.e) && m.e[m.arrived].Arrive <= m.now {
		u := m.e[m.arrived].User
		m.userPending[u] = append(m.userPending[u], int32(m.arrived))
		m.arrived++
	}
}

func (m *sim) drained() bool {
	return m.arrived == len(m.e) && m.deleted == len(m.e)
}

func (m *sim) sample() {
	s := Sample{T: m.now, Depth: m.arrived - m.deleted, Acked: float64(m.deleted), Refreshes: float64(m.refreshes)}
	if m.rttFactor != 1 {
		s.RTTFactor = m.rttFactor
	}
	if i := m.live.find(0); i < m.arrived {
		s.OldestAge, s.Wait = m.now-m.e[i].Created, m.now-math.Max(m.e[i].Created, 0)
	}
	m.timeline = append(m.timeline, s)
}

// startOp starts round-trip work, then work seconds at the server past its
// round trips (Server.EntryCost, Server.ScanCost); done runs when both are over.
func (m *sim) startOp(roundTrips int, work float64, done func()) {
	m.inFlight++
	if then := done; work > 0 {
		done = func() {
			// Still at the server, scanning or deleting: its connection stays busy.
			m.inFlight++
			m.at(m.now+work, func() {
				m.inFlight--
				then()
			})
		}
	}
	push(&m.ops, m.v+float64(roundTrips), done)
}

// wantMore is the consumer's low-water mark: room for users, fewer waiting than slots() refresh at once.
func (m *sim) wantMore(r *replica) bool {
	return r.held < m.c.HeldCap() && len(r.waiting) < m.c.slots()
}

// wake is a poll tick, a change-stream event or a freed slot.
func (m *sim) wake(r *replica) {
	if r.idle {
		r.idle = false
		m.tryClaim(r)
		return
	}
	r.wakePending = true
}

// tryClaim starts a claim round when there is room and a reason.
func (m *sim) tryClaim(r *replica) {
	if !m.wantMore(r) {
		m.afterRound(r, false)
		return
	}
	users, more := m.window(m.c.HeldCap() - r.held)
	rt := consumer.ClaimRoundTrips
	if len(users) == 0 {
		rt = consumer.EmptyClaimRoundTrips
	}
	for _, u := range users {
		m.leased[u] = true
	}
	scan, start := 2*float64(m.arrived-m.deleted)*m.s.ScanCost, m.now // the window and absorb read the queue
	m.startOp(rt, scan, func() { m.claimDone(r, users, more, start) })
}

// window reads the CLAIM_WINDOW oldest entries of users nobody holds and
// picks up to room distinct users from it, in order of their oldest entry;
// more: it took room users, or the window was cut at CLAIM_WINDOW.
func (m *sim) window(room int) (users []int32, more bool) {
	m.stamp++
	counted := 0
	for i := m.pending.find(0); i < m.arrived && counted < m.c.ClaimWindow; i = m.pending.find(i + 1) {
		u := m.e[i].User
		if m.leased[u] {
			continue // leased: not in the window at all
		}
		counted++
		if m.mark[u] != m.stamp && len(users) < room {
			m.mark[u] = m.stamp
			users = append(users, u)
		}
	}
	return users, len(users) > 0 && (len(users) == room || counted >= m.c.ClaimWindow)
}

// claimDone takes the users a claim round started at start won.
func (m *sim) claimDone(r *replica, users []int32, more bool, start float64) {
	for _, u := range users {
		ents := m.userPending[u]
		m.userPending[u] = nil
		for _, i := range ents {
			m.pending.remove(int(i))
		}
		r.waiting = append(r.waiting, work{user: u, entries: ents})
	}
	r.held, r.backlog = r.held+len(users), more
	if m.c.ChangeStreams && m.arrived > 0 && m.e[m.arrived-1].Arrive > start {
		r.wakePending = true // the change stream spoke while the round ran
	}
	m.dispatch(r)
	m.afterRound(r, more)
}

// afterRound is the claim loop's decision: go again, or wait.
func (m *sim) afterRound(r *replica, more bool) {
	switch {
	case more && m.wantMore(r):
		m.tryClaim(r)
	case r.wakePending:
		r.wakePending = false
		m.tryClaim(r)
	default:
		r.idle = true
		if m.c.ChangeStreams && !m.wakeScheduled && m.arrived < len(m.e) {
			m.wakeScheduled = true // the next arrival wakes idle replicas (a change stream)
			m.at(m.e[m.arrived].Arrive, func() {
				m.wakeScheduled = false
				for _, r := range m.reps {
					m.wake(r)
				}
			})
		}
	}
}

// dispatch starts refreshes while slots are free, each taking the waiting
// users divided by the free slots, rounded up, at most Batch (as the consumer).
func (m *sim) dispatch(r *replica) {
	for r.running < m.c.Concurrency && len(r.waiting) > 0 {
		free := m.c.Concurrency - r.running
		n := min(m.c.Batch, (len(r.waiting)+free-1)/free)
		batch, start := r.waiting[:n:n], m.now
		r.waiting = r.waiting[n:]
		r.running++
		m.startOp(m.c.RoundTrips(), 0, func() { m.refreshDone(r, batch, start) })
		m.roomWake(r)
	}
}

// roomWake wakes the claim loop when slots run low, if the last round said more was waiting.
func (m *sim) roomWake(r *replica) {
	if r.backlog && m.wantMore(r) {
		m.wake(r)
	}
}

func (m *sim) refreshDone(r *replica, batch []work, start float64) {
	r.running--
	m.refreshes += len(batch)
	m.refreshTime += m.now - start
	m.refreshOps++
	for _, x := range batch {
		r.outcomes = append(r.outcomes, x)
		if n := len(r.outcomes); n == 1 || n >= consumer.AckFlushBatch {
			m.kick(r)
		}
	}
	m.dispatch(r)
}

// kick is the completer's signal: flush now with a full batch, else after
// ackInterval; during a flush, once it is done.
func (m *sim) kick(r *replica) {
	switch {
	case r.flushing:
		r.kickPending = true
	case r.armed || len(r.outcomes) >= consumer.AckFlushBatch:
		r.armed = false
		m.startFlush(r)
	default:
		r.armed, r.gen = true, r.gen+1
		gen := r.gen
		m.at(m.now+ackInterval, func() {
			if r.armed && r.gen == gen {
				r.armed = false
				m.startFlush(r)
			}
		})
	}
}

func (m *sim) startFlush(r *replica) {
	if len(r.outcomes) == 0 {
		return
	}
	outcomes, n := r.outcomes, 0
	for _, x := range outcomes {
		n += len(x.entries)
	}
	r.flushing, r.outcomes = true, nil
	m.startOp(consumer.AckRoundTrips, float64(n)*m.s.EntryCost, func() { m.flushDone(r, outcomes) })
}

func (m *sim) flushDone(r *replica, outcomes []work) {
	r.flushing = false
	for _, x := range outcomes {
		for _, i := range x.entries {
			m.live.remove(int(i))
			m.deleted++
			if m.e[i].Arrive <= 0 {
				if m.initialLeft--; m.initialLeft == 0 {
					m.clearAt = m.now
				}
			}
		}
		m.leased[x.user] = false
	}
	r.held -= len(outcomes)
	m.lastFlush = m.now
	if r.kickPending {
		r.kickPending = false
		m.kick(r)
	}
	m.roomWake(r)
}

// skipList finds the next member at or after i of a set that only loses
// members (union-find with path halving): the queue's head skips absorbed
// and acknowledged entries without visiting them again.
type skipList struct{ next []int32 }

func newSkipList(n int) skipList {
	s := skipList{next: make([]int32, n+1)} // n is the sentinel "past the end"
	for i := range s.next {
		s.next[i] = int32(i)
	}
	return s
}

// find returns the first member at or after i, or n when none is left.
func (s skipList) find(i int) int {
	for int(s.next[i]) != i {
		s.next[i] = s.next[s.next[i]]
		i = int(s.next[i])
	}
	return i
}

func (s skipList) remove(i int) { s.next[i] = int32(i + 1) }
