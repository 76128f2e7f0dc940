package replay

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/planner"
)

// testReport is a drain of 1,000 entries of 100 users in 10 seconds.
func testReport() *Report {
	start := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	d := &DrainResult{Start: start, End: start.Add(10 * time.Second), Reason: StopDrained}
	for i := 0; i <= 10; i++ {
		s := planner.Sample{T: float64(i), Depth: 1000 - 100*i, Measured: true, OldestAge: float64(60 + i), Acked: float64(100 * i), AckedPerSec: 100,
			Refreshes: float64(20 * i), Arrived: 1000}
		if i == 4 {
			s.Measured, s.OldestAge = false, -1 // the query budget skipped it: depth derived
		}
		d.Timeline = append(d.Timeline, s)
	}
	d.Final = d.Timeline[10]
	r := NewReport(&Plan{Entries: 1000, DistinctUsers: 100, SkippedTotal: 1, Skipped: []SkippedLine{{File: "q.json", Line: 3, Error: "bad <date>"}}}, d)
	r.Input, r.Arrival, r.Speed = "snap/", ArrivalMax, 1
	r.Settings = Settings{Server: "embedded", RefreshConcurrency: 16, MaxUsersInFlight: 64, ClaimWindow: 500, Rules: "built-in", Components: 1}
	return r
}

func TestReportFigures(t *testing.T) {
	t.Parallel()
	r := testReport()
	if r.DurationSeconds != 10 || r.EntriesPerSecond != 100 || r.UsersPerSecond != 20 || r.CoalescingFactor != 5 ||
		r.MaxDepth != 1000 || r.MaxOldestAgeSeconds != 70 || !r.Drained || r.FinalDepth != 0 || r.Samples != 11 || r.MeasuredSamples != 10 {
		t.Errorf("%+v", r)
	}
	var out bytes.Buffer
	r.WriteSummary(&out)
	for _, want := range []string{"drained: 1,000 entries of 100 distinct users in 10.0s", "100.0 entries/s, 20.0 users/s, coalescing factor 5.0", "max depth 1,000", "1 bad lines skipped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

func TestReportFilesReadBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := testReport()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.EntriesPerSecond != 100 || back.Settings.RefreshConcurrency != 16 || len(back.Skipped) != 1 {
		t.Errorf("read back %+v", back)
	}
	f, _ := os.Open(filepath.Join(dir, TimelineFile))
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 || rows[0][1] != "depth" || rows[2][1] != "900" || rows[5][1] != "600" || rows[5][2] != "" || rows[5][8] != "0" || rows[6][8] != "1" {
		t.Errorf("timeline rows %v", rows)
	}
	if _, err := ReadReport(filepath.Join(dir, TimelineFile)); err == nil {
		t.Error("a CSV read as a report")
	}
}

func TestChartIsWellFormedSVG(t *testing.T) {
	t.Parallel()
	r := testReport()
	r.Input = `<script>alert("x")</script>`
	var svg bytes.Buffer
	if err := r.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	lines := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg.String())
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 4 || strings.Contains(svg.String(), "<script>") {
		t.Errorf("%d series drawn (want depth, age, acked/s, refreshes/s), or the input name unescaped", lines)
	}
}

func TestCompareSetsTwoReportsSideBySide(t *testing.T) {
	t.Parallel()
	a, b := testReport(), testReport()
	b.DurationSeconds, b.EntriesPerSecond, b.MaxDepth, b.Settings.RefreshConcurrency = 5, 200, 1000, 32
	var out bytes.Buffer
	if err := Compare(&out, a, b, "before", "after"); err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	table := map[string]bool{}
	for _, l := range strings.Split(out.String(), "\n") {
		table[norm(l)] = true
	}
	for _, want := range []string{"before after change", "duration 10.0s 5.0s -50.0% better", "entries/s 100.0 200.0 +100.0% better",
		"max depth 1,000 1,000 =", "REFRESH_CONCURRENCY 16 32 changed", "dead letters 0 0 ="} {
		if !table[want] {
			t.Errorf("no row %q in\n%s", want, out.String())
		}
	}
}
