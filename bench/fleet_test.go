package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// checkFleetAndStorm asserts the smoke run's fleet and storm results are
// complete: every fleet drained and was counted by the command monitors
// (claim rounds included), the storm failed refreshes and then drained.
func checkFleetAndStorm(t *testing.T, rep *Report) {
	t.Helper()
	if rep.Fleet == nil || len(rep.Fleet.Runs) != 2 {
		t.Fatalf("fleet: %+v, want two fleet sizes", rep.Fleet)
	}
	for _, r := range rep.Fleet.Runs {
		p := r.PerEntry
		if !r.Drained || p.Commands <= 0 || p.Sent <= 0 || p.Received <= 0 || p.Docs <= 0 || p.Claim.Commands <= 0 || p.RoundsPerUser <= 0 {
			t.Errorf("fleet of %d: drained %v, per entry %+v", r.Replicas, r.Drained, p)
		}
		// Start-up is counted up to the first claim round: some commands,
		// never all of a drain's.
		if su := r.Drain.StartUpCommands; su <= 0 || su >= r.Drain.total().Commands-r.Drain.Stages[stageClaim].Commands {
			t.Errorf("fleet of %d: %v start-up commands of %v, %v of them claim commands", r.Replicas, su, r.Drain.total().Commands, r.Drain.Stages[stageClaim].Commands)
		}
		if r.IdleSeconds <= 0 || r.IdlePerReplicaSecond.Commands <= 0 {
			t.Errorf("fleet of %d: idle %.1fs, %+v per replica per second", r.Replicas, r.IdleSeconds, r.IdlePerReplicaSecond)
		}
	}
	s := rep.Storm
	if s == nil || s.Baseline == nil || s.Storm == nil {
		t.Fatalf("storm: %+v", s)
	}
	if !s.Baseline.Drained || !s.Storm.Drained || s.Storm.FailedRefreshes == 0 || s.Baseline.FailedRefreshes != 0 {
		t.Errorf("storm: baseline drained %v with %v failures, storm drained %v with %v failures",
			s.Baseline.Drained, s.Baseline.FailedRefreshes, s.Storm.Drained, s.Storm.FailedRefreshes)
	}
	if s.Storm.Commands.MaxRoundSent <= 0 || s.Storm.Commands.MaxReply <= 0 || s.Storm.HealAt <= 0 {
		t.Errorf("storm: largest round %d B, reply %d B, healed at %v", s.Storm.Commands.MaxRoundSent, s.Storm.Commands.MaxReply, s.Storm.HealAt)
	}
}

func TestDuplicateKeysAndBatches(t *testing.T) {
	t.Parallel()
	raw := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	insert := raw(bson.D{{Key: "n", Value: 1}, {Key: "writeErrors", Value: bson.A{
		bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 11000}},
		bson.D{{Key: "index", Value: 2}, {Key: "code", Value: int64(11000)}},
		bson.D{{Key: "index", Value: 3}, {Key: "code", Value: 2}},
	}}, {Key: "ok", Value: 1.0}})
	if got := duplicateKeys(insert); got != 2 {
		t.Errorf("duplicateKeys = %d, want 2", got)
	}
	if got := duplicateKeys(raw(bson.D{{Key: "n", Value: 3}, {Key: "ok", Value: 1.0}})); got != 0 {
		t.Errorf("duplicateKeys of a clean insert = %d", got)
	}
	find := raw(bson.D{{Key: "cursor", Value: bson.D{{Key: "firstBatch", Value: bson.A{bson.D{}, bson.D{}, bson.D{}}}, {Key: "id", Value: int64(0)}}}})
	more := raw(bson.D{{Key: "cursor", Value: bson.D{{Key: "nextBatch", Value: bson.A{bson.D{}}}, {Key: "id", Value: int64(0)}}}})
	if a, b := batchLen(find), batchLen(more); a != 3 || b != 1 {
		t.Errorf("batchLen = %d and %d, want 3 and 1", a, b)
	}
}

// TestCompareSideBySide writes a report with another version's fleet and
// storm under -compare: both versions' rows are in the tables.
func TestCompareSideBySide(t *testing.T) {
	t.Parallel()
	run := func(n int, cmds float64) *fleetRun {
		return &fleetRun{Replicas: n, Drained: true, Acked: 100, PerEntry: fleetFigures{Commands: cmds}, IdlePerReplicaSecond: cmdCount{Commands: 2}}
	}
	storm := func(label string) *stormResult {
		return &stormResult{Label: label, Users: 10, Replicas: 2, Baseline: &stormRun{Drained: true, Rate: 10},
			Storm: &stormRun{Storm: true, Drained: true, Rate: 9, DeadLettered: 3}, RateRatio: 0.9}
	}
	dir := t.TempDir()
	old := &Report{Fleet: &fleetResult{Label: "old", Runs: []*fleetRun{run(1, 15), run(4, 40)}}, Storm: storm("old")}
	if err := old.write(dir); err != nil {
		t.Fatal(err)
	}
	cmp, err := loadCompare(filepath.Join(dir, "results.json"), "v0")
	if err != nil {
		t.Fatal(err)
	}
	cur := &Report{Fleet: &fleetResult{Label: "new", Runs: []*fleetRun{run(1, 15), run(4, 16)}}, Storm: storm("new"), Compare: cmp}
	// This version counted start-up (5 and 8 commands per replica); the
	// old results, from before it was counted, say so rather than 0.
	for i, r := range cur.Fleet.Runs {
		r.Drain.StartUpCommands = float64(5 + 3*i)
		r.Drain.StartUpCommands *= float64(r.Replicas)
		r.PerEntry.StartUp = r.Drain.StartUpCommands / r.Acked
	}
	md := cur.markdown()
	for _, want := range []string{"| commands | v0 | 15.00 | 40.00 | 2.67× |", "| commands | new | 15.00 | 16.00 | 1.07× |", "| v0 | storm", "| new | baseline",
		"| start-up commands per replica | v0 | not counted | not counted | – |", "| start-up commands per replica | new | 5.0 | 8.0 | 1.60× |",
		"| commands per entry, net of start-up | new | 14.95 | 15.68 | 1.05× |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err != nil {
		t.Fatal(err)
	}
}
