//go:build !oldrelease

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmoke runs the whole suite in -short mode, so the bench cannot rot. It
// asserts structure only (a report exists, both consumers acknowledged
// entries, every number is finite), never speed: CI machines are noisy and
// the smoke sizes are too small to mean anything.
func TestSmoke(t *testing.T) {
	t.Parallel()
	dir := runBench(t, "-short")
	for _, f := range []string{"report.md", "results.json", "index.html", "rules.yaml", "diverse.svg", "firehose.svg", "wedge.svg", "recovery.svg", "overload.svg"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if rep.Calibration.RoundTrips < 13 || rep.Calibration.QPS <= 0 || rep.Calibration.ProxyRTTms <= 0 {
		t.Errorf("calibration: %+v", rep.Calibration)
	}
	for _, p := range []struct {
		name string
		d    *drainResult
	}{{"diverse", rep.Diverse}, {"firehose", rep.Firehose}} {
		if p.d == nil || p.d.Reference == nil || p.d.Scorerefresh == nil {
			t.Fatalf("%s: missing runs", p.name)
		}
		if p.d.Reference.Progress <= 0 || p.d.Scorerefresh.Acked <= 0 {
			t.Errorf("%s: reference did %v entries, scorerefresh acknowledged %v", p.name, p.d.Reference.Progress, p.d.Scorerefresh.Acked)
		}
		if !p.d.Scorerefresh.Drained {
			t.Errorf("%s: scorerefresh did not drain the backlog", p.name)
		}
	}
	if rep.Wedge == nil || rep.Recovery == nil || len(rep.Overload) != 4 || rep.Scale == nil {
		t.Fatalf("missing scenarios: wedge %v recovery %v overload %d scale %v", rep.Wedge != nil, rep.Recovery != nil, len(rep.Overload), rep.Scale != nil)
	}
	for _, r := range []*runResult{rep.Wedge.Scorerefresh, rep.Recovery.Scorerefresh, rep.Scale.One, rep.Scale.Three} {
		if r.Acked <= 0 {
			t.Errorf("%s %s: nothing acknowledged", r.Scenario, r.Consumer)
		}
		if len(r.Timeline) == 0 {
			t.Errorf("%s %s: no timeline", r.Scenario, r.Consumer)
		}
	}
	checkFleetAndStorm(t, &rep)
	if len(rep.Targets) < 9 {
		t.Errorf("%d targets reported, want every one of the issue's", len(rep.Targets))
	}
	// Every number finite: NaN and Inf cannot be in JSON, and sanitize
	// turns them into -1, which only ratios of nothing may be.
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
	_ = json.Unmarshal(data, &generic)
	walk("results", generic)
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"## Calibration", "## Results", "## Targets", "| diverse | reference", "| diverse | scorerefresh", "## Fleet", "## Backoff storm"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	checkBatchedAndSlowdown(t, &rep, dir)
}

// runBench runs the bench with args into a fresh results folder, which it
// returns.
func runBench(t *testing.T, args ...string) (dir string) {
	t.Helper()
	dir = t.TempDir()
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
	if _, err := b.Run(context.Background()); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	return dir
}

func TestDepthSlope(t *testing.T) {
	t.Parallel()
	var s []sample
	for i := range 20 {
		s = append(s, sample{T: float64(i), Depth: int64(100 + 3*i)})
	}
	if got := depthSlope(s, 0, 19); math.Abs(got-3) > 1e-9 {
		t.Errorf("slope %v, want 3", got)
	}
}
