package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSmoke runs every preset in -short form, so the bench cannot rot. It
// asserts structure (a report, every row ran and did work, the scorers'
// scores verified, every number finite), never speed: the machines are
// noisy and the smoke sizes too small to mean anything.
func TestSmoke(t *testing.T) {
	t.Parallel()
	dir, rep := runBench(t, "-short")
	for _, f := range []string{"report.md", "results.json", "rules.yaml", "rules-activity.yaml"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	if rep.Calibration.RoundTrips < 13 || rep.Calibration.QPS <= 0 || rep.Calibration.Bounds.Lower <= 0 {
		t.Errorf("calibration: %+v", rep.Calibration)
	}
	rows, err := selectRows(presetNames(), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(rows) {
		t.Fatalf("%d results, want one per row (%d)", len(rep.Results), len(rows))
	}
	for _, p := range presetNames() {
		if !slices.ContainsFunc(rep.Results, func(r *Result) bool { return r.Preset == p }) {
			t.Errorf("preset %s did not run", p)
		}
	}
	for _, r := range rep.Results {
		if len(r.Samples) == 0 {
			t.Errorf("%s/%s: no samples", r.Name, r.Consumer)
		}
		if r.Backlog.Entries+int(r.Produced) > 0 && (r.Done <= 0 || sum(r.Commands) <= 0) {
			t.Errorf("%s/%s: %v entries done, %v commands", r.Name, r.Consumer, r.Done, sum(r.Commands))
		}
		// A smoke row of scorerefresh runs until it has drained its work.
		if r.Consumer == consumerScorerefresh && !r.Drained {
			t.Errorf("%s: did not drain (%v of %d entries done)", r.Name, r.Done, int64(r.Backlog.Entries)+r.Produced)
		}
	}
	for _, name := range []string{"diverse", "firehose"} {
		ours, ref := rep.find(name, name, consumerScorerefresh), rep.find(name, name, consumerReference)
		if ours == nil || ref == nil || !ours.Drained || ours.Ratio <= 0 {
			t.Errorf("%s: want the reference and a drained scorerefresh with a ratio: %+v, %+v", name, ours, ref)
		}
	}
	for _, name := range []string{"scorer-rules", "scorer-http"} {
		if r := rep.find("scorer", name, consumerScorerefresh); r == nil || !r.Drained || r.Verified != r.Users || r.Verified == 0 || r.Wrong != 0 {
			t.Errorf("%s: want every user's score verified after a drain: %+v", name, r)
		}
	}
	if r := rep.find("storm", "storm", consumerScorerefresh); r == nil || r.DeadLettered != 0 || !r.Drained {
		t.Errorf("storm: want a drain with nobody dead-lettered: %+v", r)
	}
	checkReport(t, dir)
}

// checkReport checks the files of a run: every number of results.json
// finite (NaN and Inf cannot be in JSON), every section in report.md.
func checkReport(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Errorf("%s = %v", path, x)
			}
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		}
	}
	var generic any
	if err := json.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	walk("results", generic)
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"## Calibration", "## Results", "## Faults and commands", "## Targets"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

func sum(m map[string]float64) (t float64) {
	for _, v := range m {
		t += v
	}
	return t
}

// runBench runs the bench with args into a fresh results folder and
// returns the folder and the report.
func runBench(t *testing.T, args ...string) (string, *Report) {
	t.Helper()
	dir := t.TempDir()
	cfg, err := ParseArgs(append(args, "-out", dir), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cfg.Log = &out
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.Run(context.Background())
	if err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	return dir, rep
}

func TestRowsByName(t *testing.T) {
	t.Parallel()
	rows, err := selectRows([]string{"plan"}, []string{"knee-wedge", "diverse-c4"}, false)
	if err != nil || len(rows) != 2 || rows[0].Name != "diverse-c4" || rows[1].Name != "knee-wedge" {
		t.Fatalf("rows %+v, %v; want diverse-c4 and knee-wedge, in the table's order", rows, err)
	}
	if _, err := selectRows([]string{"plan"}, []string{"nope"}, false); err == nil || !strings.Contains(err.Error(), "knee-wedge") {
		t.Errorf("an unknown row: %v; want the error to list the rows", err)
	}
	for _, short := range []bool{false, true} {
		all, err := selectRows(presetNames(), nil, short)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, r := range all {
			if seen[r.Preset+"/"+r.Name+"/"+r.Consumer] {
				t.Errorf("row %s/%s (%s) twice", r.Preset, r.Name, r.Consumer)
			}
			seen[r.Preset+"/"+r.Name+"/"+r.Consumer] = true
			if r.Max <= 0 {
				t.Errorf("row %s has no cap", r.Name)
			}
			if r.Consumer == consumerReference && r.Scorer == scorerHTTP {
				t.Errorf("row %s: the reference computes rules only, not an HTTP scorer", r.Name)
			}
			if r.Rate > 0 && r.For <= 0 {
				t.Errorf("row %s has a producer and no For: it would stop at once", r.Name)
			}
		}
	}
}

func TestRecovered(t *testing.T) {
	t.Parallel()
	var s []sample
	for i := range 40 {
		age := 1.0
		if i >= 10 && i < 25 {
			age = float64(i)
		}
		s = append(s, sample{T: float64(i), OldestAge: age})
	}
	if pre, back := recovered(s, 10, 20); pre != 1 || back != 5 {
		t.Errorf("recovered = %v, %v; want 1, 5", pre, back)
	}
	if _, back := recovered(s[:24], 10, 20); back != -1 {
		t.Errorf("never back: %v, want -1", back)
	}
}
