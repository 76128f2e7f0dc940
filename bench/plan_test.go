//go:build !oldrelease

package bench

import (
	"io"
	"strings"
	"testing"

	"github.com/scorerefresh/scorerefresh/planner"
)

func TestPlanIsAScenarioOnlyWhenNamed(t *testing.T) {
	o, err := ParseArgs([]string{"-scenarios", "plan", "-plan-cases", "knee-wedge,recovery"}, io.Discard)
	if err != nil || o.Plan.Cases != "knee-wedge,recovery" {
		t.Fatalf("parse: %v, cases %q", err, o.Plan.Cases)
	}
	for _, s := range allScenarios {
		if s == "plan" {
			t.Error("plan runs by default; it should run only when named")
		}
	}
}

func TestEveryPlanRowReproducesWithoutAServer(t *testing.T) {
	var knee planCase
	for _, c := range planCases() {
		if c.name == "knee-wedge" {
			knee = c
		}
	}
	p := &planner.Plan{Config: planner.Config{Components: 12, Concurrency: 16, MaxUsersInFlight: 64, ClaimWindow: 500, Batch: 1},
		Server: planner.Server{RTT: 0.0215, Cost: 0.0014}}
	args := []string{"--in", "/tmp/x/backlog", "--measure", "--measure-concurrency", "1", "--entry-cost", "173µs", "--max-replicas", "3",
		"--svg", "/tmp/x/plan.svg", "--arrival", "original", "--speed", "1", "--rtt-knee", "6", "--rtt-slope", "15ms"}
	got := reproducible(knee, args, p, 1)
	for _, want := range []string{
		"scorerefresh backlog generate --shape diverse --entries 720 --users 100000 --seed 1 --span 1m30s --out /tmp/plan-knee-wedge && ",
		"scorerefresh plan --in /tmp/plan-knee-wedge --components 12 --entry-cost 173µs",
		"--rtt-knee 6 --rtt-slope 15ms --rtt 21.50ms --server-cost 1.40ms --change-streams=false --concurrency 16",
		// The environment's REFRESH_BATCH_SIZE (16 by default) would
		// otherwise model batches the row did not measure.
		"--claim-window 500 --batch 1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("command lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"--measure", "/tmp/x", "--server-capacity"} {
		if strings.Contains(got, gone) {
			t.Errorf("command still has %q, which needs a server or the bench's files:\n%s", gone, got)
		}
	}
}
