package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/replay"
)

func TestReplayEmbeddedDrainsAGeneratedBacklogAndReports(t *testing.T) {
	t.Parallel()
	dir, reports := t.TempDir(), t.TempDir()
	if _, err := replay.Generate(replay.GenerateConfig{Shape: replay.ShapeFirehose, Entries: 200, Users: 30, Out: dir, End: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"replay", "--embedded", "--in", dir, "--drain", "--arrival", "original", "--speed", "120", "--shift-to-now",
		"--report", reports, "--sample-interval", "200ms"}, []string{"POLL_INTERVAL=50ms"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	r, err := replay.ReadReport(reports)
	if err != nil {
		t.Fatal(err)
	}
	// Ten minutes of arrivals at ×120 take five seconds: the drain cannot
	// end before the last one arrived.
	if !r.Drained || r.Acked != 200 || r.Arrival != replay.ArrivalOriginal || r.Speed != 120 ||
		r.DurationSeconds < 4.5 || r.Settings.Server != "embedded FerretDB (SQLite)" {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(stdout.String(), "embedded MongoDB-compatible server") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	var cmp bytes.Buffer
	if code := run([]string{"replay", "compare", reports, reports}, nil, &cmp, &stderr); code != 0 || !strings.Contains(cmp.String(), "users/s") {
		t.Errorf("compare: exit %d\n%s%s", code, cmp.String(), stderr.String())
	}
}
