//go:build !oldrelease

package bench

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
)

// checkBatchedAndSlowdown is TestSmoke's part for the batched and slowdown
// scenarios: structure only, never speed.
func checkBatchedAndSlowdown(t *testing.T, rep *Report, dir string) {
	t.Helper()
	for _, f := range []string{"batched-diverse.svg", "batched-wedge.svg", "batched-recovery.svg", "batched-far.svg", "slowdown.svg", "rules-nomax.yaml", "rules-count12.yaml"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	x := rep.Batched
	if x == nil {
		t.Fatal("batched scenario missing")
	}
	if len(x.Calibrations) == 0 || len(x.Diverse) < 2 || len(x.Far) == 0 || len(x.Wedge) == 0 || len(x.Recovery) != len(x.Wedge) {
		t.Fatalf("batched: %d calibrations, %d drains, %d far drains, %d wedge runs, %d recovery runs", len(x.Calibrations), len(x.Diverse), len(x.Far), len(x.Wedge), len(x.Recovery))
	}
	for _, c := range x.Calibrations {
		if c.RoundTrips < 14 || c.Capacity <= 0 {
			t.Errorf("batch calibration %+v", c)
		}
	}
	batchedSeen := false
	for _, runs := range [][]batchRun{x.Diverse, x.Far, x.Wedge, x.Recovery} {
		for _, r := range runs {
			if r.Run.Acked <= 0 || r.CommandsPerAcked <= 0 || r.UsersPerBatch < 1 || r.CPU.Process <= 0 {
				t.Errorf("%s %s: acked %v, commands/entry %v, users/batch %v, CPU %v", r.Run.Scenario, r.Config.Label, r.Run.Acked, r.CommandsPerAcked, r.UsersPerBatch, r.CPU.Process)
			}
			batchedSeen = batchedSeen || r.UsersPerBatch > 1
		}
	}
	if !batchedSeen {
		t.Error("no run refreshed more than one user per batch")
	}
	if ones := x.oneSlotOf(rulesCount12); len(ones) != 1 || ones[0].Run.Concurrency != 1 || ones[0].Saturated.Rate <= 0 || ones[0].Saturated.Estimate <= 0 {
		t.Errorf("count12 one-slot drains: %+v", ones)
	}
	s := rep.Slowdown
	if s == nil || s.Run == nil {
		t.Fatal("slowdown scenario missing")
	}
	if s.Run.Acked <= 0 || s.Run.Events == nil || len(s.Run.Events) != 2 {
		t.Errorf("slowdown: acked %v, events %v", s.Run.Acked, s.Run.Events)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"## Batched recompute", "## Slowdown", "| per-user, in flight 64 |", "Against one slot, count12 rules", "| per-user, in flight 64, 1 slot | 1 | 1 | 64 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

// TestProfileSharesFindsLabelledWork profiles a labelled busy goroutine and
// an unlabelled one, and checks that the split sees both. Not parallel: the
// CPU profiler is one per process.
func TestProfileSharesFindsLabelledWork(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skipf("profiler busy: %v", err)
	}
	defer pprof.StopCPUProfile() // a no-op once stopped
	// Burn until the profile has samples of both; a sample is taken every
	// 10 ms of CPU, so a few rounds suffice even on a loaded machine.
	var got shares
	for range 50 {
		done := make(chan struct{})
		var labelled float64
		withConsumerLabel(context.Background(), func() {
			go func() { defer close(done); labelled = burn() }()
		})
		unlabelled := burn()
		<-done
		if labelled != unlabelled {
			t.Fatal("burn is not deterministic") // and keeps the work from being optimised away
		}
		pprof.StopCPUProfile()
		var err error
		if got, err = profileShares(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatal(err)
		}
		if got.consumer > 0 && got.total > got.consumer {
			break
		}
		buf.Reset()
		if err := pprof.StartCPUProfile(&buf); err != nil {
			t.Fatal(err)
		}
	}
	if got.consumer <= 0 || got.total <= got.consumer || got.samples == 0 {
		t.Fatalf("shares %+v: want labelled and unlabelled CPU", got)
	}
}

func burn() float64 {
	x := 1.0
	for i := range 20_000_000 {
		x = x*1.0000001 + float64(i&7)
	}
	return x
}

func TestProfileSharesRejectsGarbage(t *testing.T) {
	t.Parallel()
	if _, err := profileShares(strings.NewReader("not a profile")); err == nil {
		t.Error("no error for a non-gzip input")
	}
	if _, err := parseProfile([]byte{0x12, 0x05, 0x01}); err == nil {
		t.Error("no error for a truncated field")
	}
}

func TestProcStatFieldsOfSelf(t *testing.T) {
	t.Parallel()
	f, ok := procStatFields(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	if f.pgrp <= 0 {
		t.Errorf("pgrp %d", f.pgrp)
	}
	if pgCPU(0) != 0 {
		t.Error("pgCPU without a PostgreSQL is not 0")
	}
}

func TestFailureCounter(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	counts := &failureCounts{}
	h := &failureCounter{next: slog.NewJSONHandler(&out, nil), keep: 2, mu: new(sync.Mutex), n: counts}
	log := slog.New(h).With("component", "consumer")
	log.Warn("refresh failed", "transient", false, "charged", true, "err", "refresh timed out after 10s: x")
	log.Warn("refresh failed", "transient", true, "charged", false, "err", "context deadline exceeded")
	log.Warn("refresh failed", "transient", false, "charged", false, "err", "refresh timed out after 10s: y")
	log.Warn("something else")
	want := failureCounts{Failed: 3, Charged: 1, Transient: 1, Spared: 1, TimedOut: 2, Logged: 2}
	if *counts != want {
		t.Errorf("counts %+v, want %+v", *counts, want)
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Errorf("%d lines logged, want 2 failures and the other line:\n%s", n, out.String())
	}
}

func TestParseConfigs(t *testing.T) {
	t.Parallel()
	cs, err := parseConfigs("1, 16,64x1024", rulesBench)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 || cs[0].BatchSize != 1 || cs[0].MaxUsersInFlight != 64 || !cs[0].perUser() ||
		cs[1].BatchSize != 16 || cs[2].BatchSize != 64 || cs[2].MaxUsersInFlight != 1024 {
		t.Errorf("parsed %+v", cs)
	}
	for _, bad := range []string{"-1", "x", "16x", "16x0", "a16", "1c0", "1c", "c1", "16c4x64", "1c1c1"} {
		if _, err := parseConfigs(bad, rulesBench); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestParseConfigsSlotsAndDefault: c sets REFRESH_CONCURRENCY, 0 leaves
// REFRESH_BATCH_SIZE unset for the service's default.
func TestParseConfigsSlotsAndDefault(t *testing.T) {
	t.Parallel()
	cs, err := parseConfigs("1c1,0,16x64c16", rulesCount12)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 {
		t.Fatalf("parsed %+v", cs)
	}
	one, auto, forced := cs[0], cs[1], cs[2]
	if !one.oneSlot() || one.slots(16) != 1 || one.Label != "per-user, in flight 64, 1 slot" || configTag(one) != "b1-f64-c1" {
		t.Errorf("1c1: %+v (tag %s)", one, configTag(one))
	}
	if auto.BatchSize != 0 || auto.Concurrency != 0 || auto.slots(16) != 16 || auto.oneSlot() || auto.perUser() {
		t.Errorf("0: %+v", auto)
	}
	for _, v := range auto.env() {
		if strings.HasPrefix(v, "REFRESH_BATCH_SIZE=") {
			t.Errorf("0 sets %s, want it unset", v)
		}
	}
	if forced.BatchSize != 16 || forced.MaxUsersInFlight != 64 || forced.Concurrency != 16 || !slices.Contains(forced.env(), "REFRESH_BATCH_SIZE=16") {
		t.Errorf("16x64c16: %+v, env %v", forced, forced.env())
	}
}

// TestSaturatedDrain: the stretch ends at the last sample with more than
// twice MAX_USERS_IN_FLIGHT queued, and the estimate is planner.DrainRate
// over the snapshots inside it.
func TestSaturatedDrain(t *testing.T) {
	t.Parallel()
	run := &runResult{Seconds: 50}
	for i := range 51 {
		depth := max(0, 1000-25*i) // > 128 until t=34
		run.Timeline = append(run.Timeline, sample{T: float64(i), Depth: int64(depth), Progress: float64(25 * i)})
	}
	var snaps []capacitySnap
	for i := range 51 {
		// 2 users per batch of 0.5 s, 1 entry each; the gauge set at 15 and 30.
		snaps = append(snaps, capacitySnap{T: float64(i), Batches: float64(10 * i), BatchSecs: float64(5 * i), Users: float64(20 * i), OK: float64(20 * i), Acked: float64(20 * i),
			Gauge: map[bool]float64{true: 64}[i >= 15] + map[bool]float64{true: 1}[i >= 30]})
	}
	s := saturatedDrain(run, snaps, 64, 16)
	if s.From != 5 || s.To != 34 || s.Rate != 25 {
		t.Errorf("stretch %v..%v at %v/s, want 5..34 at 25/s", s.From, s.To, s.Rate)
	}
	if s.UsersPerBatch != 2 || s.BatchMs != 500 || s.EntriesPerUser != 1 || s.Estimate != 64 {
		t.Errorf("estimate inputs %+v, want 2 users per 500 ms batch, 64/s with 16 slots", s)
	}
	if s.Gauge != 65 || s.GaugeAt != 34 {
		t.Errorf("gauge %v at %v, want the last value within the stretch", s.Gauge, s.GaugeAt)
	}
	if short := saturatedDrain(&runResult{Seconds: 2, Timeline: []sample{{T: 0, Depth: 10}, {T: 2, Depth: 0, Progress: 10}}}, nil, 64, 16); short.From != 0 || short.To != 2 || short.Rate != 5 {
		t.Errorf("a shallow run is not taken whole: %+v", short)
	}
}

func TestDrainedAfter(t *testing.T) {
	t.Parallel()
	s := []sample{
		{T: 1, Depth: 5, OldestAge: 1}, {T: 2, Depth: 8, OldestAge: 2}, // before: depth ≤ 8, age ≤ 2
		{T: 3, Depth: 100, OldestAge: 30}, {T: 10, Depth: 50, OldestAge: 20}, // restore at 10
		{T: 12, Depth: 7, OldestAge: 5}, {T: 14, Depth: 6, OldestAge: 1.5},
	}
	if got := drainedAfter(s, 0, 3, 10); got != 4 {
		t.Errorf("drainedAfter = %v, want 4 (depth and age both back at t=14)", got)
	}
	if got := recoveredAfter(s, 0, 3, 10); got != 4 {
		t.Errorf("recoveredAfter = %v, want 4", got)
	}
	if got := drainedAfter(s[:4], 0, 3, 10); got != -1 {
		t.Errorf("drainedAfter without recovery = %v, want -1", got)
	}
}
