package planner

import (
	"strings"
	"testing"
)

// arrivals is a backlog of n distinct users enqueued at rate a second over
// the time before the snapshot.
func arrivals(n int, rate float64) *Backlog {
	b := &Backlog{Users: n}
	for i := range n {
		b.Entries = append(b.Entries, Entry{User: int32(i), Created: float64(i-n) / rate})
	}
	return b
}

func kneeInput(rate float64) Input {
	return Input{
		Backlog: arrivals(int(rate*90), rate), Arrival: Arrival{Mode: ArrivalOriginal, Speed: 1},
		Config: Config{Components: 12, Concurrency: 16, MaxUsersInFlight: 64, ClaimWindow: 500, Replicas: 1, Batch: 1, PollInterval: 1},
		Server: Server{RTT: 0.020, Cost: 0.0005, Knee: 6, Slope: 0.015}, MaxReplicas: 1, TargetAge: 300,
		Transient: Transient{At: 15, For: 15, RTTFactor: 10},
	}
}

// The bench's knee (no delay up to 6 commands in flight, 15 ms more for
// each past them): at 8/s a backlog makes every slot busy, which slows the
// round trips until the fleet does 6.3/s: it never catches up again. At 5/s
// the same transient passes.
func TestTransientWedgesAMetastableLoadAndNotAStableOne(t *testing.T) {
	p, err := Make(kneeInput(8))
	if err != nil {
		t.Fatal(err)
	}
	if sp := p.Stability; sp.Assessment.Class != ClassMetastable || sp.Recovered || !strings.Contains(sp.Verdict, "NOT") {
		t.Errorf("8/s: %s, recovered %t (%s); want metastable and not recovered", sp.Assessment.Class, sp.Recovered, sp.Verdict)
	}
	if sp := p.Stability; sp.Baseline.PeakOldestAge > 2 {
		t.Errorf("8/s without the transient: peak oldest age %gs, want the steady ~1s", sp.Baseline.PeakOldestAge)
	}
	p, err = Make(kneeInput(5))
	if err != nil {
		t.Fatal(err)
	}
	if sp := p.Stability; sp.Assessment.Class != ClassStable || !sp.Recovered || sp.RecoverySeconds <= 0 {
		t.Errorf("5/s: %s, recovered %t after %gs (%s); want stable and recovered", sp.Assessment.Class, sp.Recovered, sp.RecoverySeconds, sp.Verdict)
	}
}

func TestReplicasForTheTarget(t *testing.T) {
	// 100 users, one slot and one held user per replica, round trips of
	// 10 ms: each user costs a claim (4 round trips), a refresh (3), the
	// flush's wait (50 ms) and its round trips (2), 0.14 s: one replica
	// takes 14 s, two take 7 s.
	in := Input{
		Backlog: arrivals(100, 100), Arrival: Arrival{Mode: ArrivalMax},
		Config: Config{Components: 1, Concurrency: 1, MaxUsersInFlight: 1, ClaimWindow: 500, Replicas: 1, Batch: 1, PollInterval: 1, ChangeStreams: true},
		Server: Server{RTT: 0.010}, MaxReplicas: 3, TargetAge: 10,
	}
	p, err := Make(in)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "one replica", p.Rows[0].Run.DrainSeconds, 100*0.14, 1e-6)
	near(t, "two replicas", p.Rows[1].Run.DrainSeconds, 50*0.14, 1e-6)
	if p.ReplicasForTarget != 2 || p.Rows[0].MeetsTarget || !p.Rows[1].MeetsTarget {
		t.Errorf("replicas for a 10 s wait: %d (rows meet %t %t), want 2", p.ReplicasForTarget, p.Rows[0].MeetsTarget, p.Rows[1].MeetsTarget)
	}
	if p.Stability.Assessment.Class != ClassNoLoad {
		t.Errorf("a static backlog: %s, want %s", p.Stability.Assessment.Class, ClassNoLoad)
	}
}

func TestSequentialConsumerSlowsWithDistinctUsers(t *testing.T) {
	c := Config{Components: 12, Concurrency: 16, MaxUsersInFlight: 64, ClaimWindow: 500, Replicas: 1, Batch: 1, PollInterval: 1}
	s := Server{RTT: 0.010}
	// 400 entries of two users: each 200-entry window is two refreshes.
	two := &Backlog{Users: 2}
	for i := range 400 {
		two.Entries = append(two.Entries, Entry{User: int32(i % 2), Created: float64(i)})
	}
	q := sequential(two, c, s, 0)
	near(t, "two users", q.EntriesPerSecond, 200/(2*14*0.010+2*0.010), 1e-9)
	// 400 distinct users: 200 refreshes per window, about 90 times slower.
	q = sequential(arrivals(400, 1), c, s, 10)
	near(t, "diverse", q.EntriesPerSecond, 200/(200*14*0.010+2*0.010), 1e-9)
	if q.KeepsUp {
		t.Errorf("%.2f entries/s keeps up with 10/s", q.EntriesPerSecond)
	}
}

func TestWriteTextNamesEveryPart(t *testing.T) {
	p, err := Make(kneeInput(8))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := p.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"720 entries of 720 users", "14 round trips", "+15ms per command in flight past 6",
		"replicas  bound/s", "replicas for an oldest age within 5m00s", "one-at-a-time consumer", "METASTABLE", "does NOT recover"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

func TestInvalidInputListsEveryProblem(t *testing.T) {
	_, err := Make(Input{Config: Config{Components: 0, Concurrency: 32, MaxUsersInFlight: 16}, Arrival: Arrival{Mode: "fast"}})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"components", "REFRESH_CONCURRENCY 32 is above MAX_USERS_IN_FLIGHT 16", "round trip", `unknown arrival "fast"`, "no backlog", "target age"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 20000: "20,000", 1234567: "1,234,567",
		-1: "-1", -999: "-999", -1000: "-1,000", -1234567: "-1,234,567",
	} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Thousands(20000); got != "20,000" {
		t.Errorf("Thousands(int 20000) = %q", got)
	}
}
