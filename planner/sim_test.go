package planner

import (
	"math"
	"testing"
)

// slow is a server where a round trip takes exactly one second, so the
// pipeline's steps can be counted by hand: a claim round is 4 s, a refresh
// of one component 3 s, the ack flush 2 s after its 50 ms wait.
var slow = Server{RTT: 1}

func oneSlot(window int) Config {
	return Config{Components: 1, Concurrency: 1, MaxUsersInFlight: 1, ClaimWindow: window, Replicas: 1, Batch: 1, PollInterval: 60, ChangeStreams: true}
}

func backlogOf(users ...int32) []Entry {
	var es []Entry
	for _, u := range users {
		es = append(es, Entry{User: u, Created: -1})
	}
	return es
}

func drain(t *testing.T, c Config, s Server, tr Transient, entries []Entry, users int) *Run {
	t.Helper()
	r := Simulate(c, s, tr, entries, users, SimOptions{Horizon: 10_000, SampleEvery: 1, UntilDrained: true})
	if !r.Drained {
		t.Fatalf("not drained by %gs: %+v", r.EndSeconds, r.End)
	}
	return r
}

func TestOneUserTakesAClaimARefreshAndAFlush(t *testing.T) {
	r := drain(t, oneSlot(10), slow, Transient{}, backlogOf(0), 1)
	near(t, "drain", r.DrainSeconds, 4+3+0.05+2, 1e-9)
	if r.Refreshes != 1 || r.Acked != 1 {
		t.Errorf("refreshes %d, acked %d; want 1, 1", r.Refreshes, r.Acked)
	}
}

func TestOneRefreshAcknowledgesAllOfItsUsersEntries(t *testing.T) {
	r := drain(t, oneSlot(10), slow, Transient{}, backlogOf(0, 0, 0), 1)
	near(t, "drain", r.DrainSeconds, 9.05, 1e-9)
	if r.Refreshes != 1 || r.Acked != 3 {
		t.Errorf("refreshes %d, acked %d; want 1 refresh acknowledging 3", r.Refreshes, r.Acked)
	}
}

func TestAUserHeldToTheCapWaitsForTheFlush(t *testing.T) {
	// MAX_USERS_IN_FLIGHT 1: the second user is claimed only once the
	// first one's flush has released it, then costs the same again.
	r := drain(t, oneSlot(10), slow, Transient{}, backlogOf(0, 1), 2)
	near(t, "drain", r.DrainSeconds, 2*9.05, 1e-9)
}

func TestSlotsRefreshInParallel(t *testing.T) {
	c := oneSlot(10)
	c.Concurrency, c.MaxUsersInFlight = 2, 8
	// Both users in one claim round, refreshed side by side, acknowledged
	// in one flush.
	r := drain(t, c, slow, Transient{}, backlogOf(0, 1), 2)
	near(t, "drain", r.DrainSeconds, 9.05, 1e-9)
	// A server of one command a second makes two commands in flight take
	// two seconds each: the refreshes take 6 s, the rest is alone.
	capped := slow
	capped.Capacity = 1
	r = drain(t, c, capped, Transient{}, backlogOf(0, 1), 2)
	near(t, "drain at capacity", r.DrainSeconds, 4+6+0.05+2, 1e-9)
	near(t, "refresh at capacity", r.MeanRefreshSeconds, 6, 1e-9)
}

func TestTheClaimWindowLimitsUsersPerRound(t *testing.T) {
	c := oneSlot(2)
	c.Concurrency, c.MaxUsersInFlight = 2, 8
	// A window of 2 sees only user 0's two entries: user 1 needs a second
	// round, which starts at once because the window was full (4-8 s),
	// and its refresh (8-11 s) and flush (11.05-13.05 s) come after.
	r := drain(t, c, slow, Transient{}, backlogOf(0, 0, 1), 2)
	near(t, "window of 2", r.DrainSeconds, 13.05, 1e-9)
	c.ClaimWindow = 3
	r = drain(t, c, slow, Transient{}, backlogOf(0, 0, 1), 2)
	near(t, "window of 3", r.DrainSeconds, 9.05, 1e-9)
}

func TestSlowerRoundTripsStretchEveryStep(t *testing.T) {
	r := drain(t, oneSlot(10), slow, Transient{At: 0, For: 100, RTTFactor: 2}, backlogOf(0), 1)
	near(t, "drain", r.DrainSeconds, 2*(4+3+2)+0.05, 1e-9)
}

func TestWithoutChangeStreamsArrivalsWaitForThePoll(t *testing.T) {
	fast := Server{RTT: 0.001}
	c := oneSlot(10)
	c.PollInterval = 1
	arrival := []Entry{{User: 0, Created: 0.3, Arrive: 0.3}}
	// With change streams the arrival wakes the idle replica at 0.3 s.
	r := drain(t, c, fast, Transient{}, arrival, 1)
	near(t, "change streams", r.DrainSeconds, 0.3+0.009+0.05, 1e-9)
	// Polling, it waits for the tick at 1 s.
	c.ChangeStreams = false
	r = drain(t, c, fast, Transient{}, arrival, 1)
	near(t, "polling", r.DrainSeconds, 1+0.009+0.05, 1e-9)
}

func TestReplicasShareTheQueue(t *testing.T) {
	c := oneSlot(10)
	entries := backlogOf(0, 1, 2, 3)
	one := drain(t, c, slow, Transient{}, entries, 4)
	near(t, "one replica", one.DrainSeconds, 4*9.05, 1e-9)
	c.Replicas = 2
	// Each replica claims a different user: two rounds of two in parallel.
	two := drain(t, c, slow, Transient{}, entries, 4)
	near(t, "two replicas", two.DrainSeconds, 2*9.05, 1e-9)
}

func TestOldestAgeAndDepthOverTime(t *testing.T) {
	r := drain(t, oneSlot(10), slow, Transient{}, backlogOf(0, 1), 2)
	// Sampled every second: the first entry (created at -1) is in the
	// queue until its flush at 9.05, the second until 18.1.
	for _, s := range r.Timeline {
		wantDepth, wantAge := 2, s.T+1
		switch {
		case s.T >= 18.1:
			wantDepth, wantAge = 0, 0
		case s.T >= 9.05:
			wantDepth = 1
		}
		if s.Depth != wantDepth || math.Abs(s.OldestAge-wantAge) > 1e-9 {
			t.Errorf("t=%g: depth %d, oldest age %g; want %d, %g", s.T, s.Depth, s.OldestAge, wantDepth, wantAge)
		}
		if s.Wait > s.T+1e-9 {
			t.Errorf("t=%g: wait %g counts time before the start", s.T, s.Wait)
		}
	}
	if r.PeakDepth != 2 || r.PeakOldestAge < 18 {
		t.Errorf("peaks: depth %d, age %g; want 2 and above 18", r.PeakDepth, r.PeakOldestAge)
	}
}

func TestAFlushWaitsForItsDeletes(t *testing.T) {
	s := slow
	s.EntryCost = 0.5
	// Three entries of one user: the flush deletes them for 1.5 s more.
	r := drain(t, oneSlot(10), s, Transient{}, backlogOf(0, 0, 0), 1)
	near(t, "drain", r.DrainSeconds, 9.05+1.5, 1e-9)
}

func TestClaimRoundsPayForScanningTheQueue(t *testing.T) {
	s := slow
	s.ScanCost = 0.25
	// Two entries in the queue, read twice by the claim round: 1 s more.
	r := drain(t, oneSlot(10), s, Transient{}, backlogOf(0, 0), 1)
	near(t, "drain", r.DrainSeconds, 9.05+1, 1e-9)
}

func TestBatchesSpreadOverTheFreeSlots(t *testing.T) {
	c := oneSlot(10)
	c.Concurrency, c.MaxUsersInFlight, c.Batch = 4, 8, 16
	// Eight users claimed at once on four free slots run as four batches
	// of two, as the consumer's batcher spreads them, not one batch of
	// eight: on a server of one command a second the four batches in
	// flight make each round trip take 4 s.
	capped := slow
	capped.Capacity = 1
	r := drain(t, c, capped, Transient{}, backlogOf(0, 1, 2, 3, 4, 5, 6, 7), 8)
	near(t, "refresh", r.MeanRefreshSeconds, 12, 1e-9)
	near(t, "drain", r.DrainSeconds, 4+12+0.05+2, 1e-9)
	if r.Refreshes != 8 {
		t.Errorf("refreshes %d, want 8 users refreshed", r.Refreshes)
	}
}

func TestASampleIntervalOfZeroIsASecond(t *testing.T) {
	for _, every := range []float64{0, -1} {
		r := Simulate(oneSlot(10), slow, Transient{}, backlogOf(0), 1, SimOptions{Horizon: 100, SampleEvery: every, UntilDrained: true})
		if !r.Drained || len(r.Timeline) < 2 || r.Timeline[1].T != 1 {
			t.Errorf("SampleEvery %g: drained %t, %d samples; want a drain sampled every second", every, r.Drained, len(r.Timeline))
		}
	}
}
