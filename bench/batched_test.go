//go:build !oldrelease

package bench

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
)

// checkBatchedAndSlowdown is TestSmoke's part for the batched and slowdown
// scenarios: structure only, never speed.
func checkBatchedAndSlowdown(t *testing.T, rep *Report, dir string) {
	t.Helper()
	for _, f := range []string{"batched-diverse.svg", "batched-wedge.svg", "batched-recovery.svg", "batched-far.svg", "slowdown.svg", "rules-nomax.yaml"} {
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
	s := rep.Slowdown
	if s == nil || s.Run == nil {
		t.Fatal("slowdown scenario missing")
	}
	if s.Run.Acked <= 0 || s.Run.Events == nil || len(s.Run.Events) != 2 {
		t.Errorf("slowdown: acked %v, events %v", s.Run.Acked, s.Run.Events)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"## Batched recompute", "## Slowdown", "| per-user, in flight 64 |"} {
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
	for _, bad := range []string{"0", "x", "16x", "16x0", "a16"} {
		if _, err := parseConfigs(bad, rulesBench); err == nil {
			t.Errorf("%q: no error", bad)
		}
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
