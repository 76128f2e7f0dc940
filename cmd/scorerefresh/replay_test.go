package main

import (
	"bytes"
	"encoding/csv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/replay"
)

// replayEnv points a command at a fresh database of the test server.
func replayEnv(t *testing.T) ([]string, string) {
	t.Helper()
	db := mongotest.Database(t, mongotest.Options{})
	return []string{"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(), "POLL_INTERVAL=50ms"}, db.Name()
}

func runOK(t *testing.T, args, env []string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, env, &stdout, &stderr); code != 0 {
		t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func TestReplayEmbeddedPointsToTheDemoBuild(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := run([]string{"replay", "--embedded", "--in", "snap/", "--drain"}, nil, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "go run ./cmd/scorerefresh-demo replay --embedded snap/") {
		t.Errorf("exit %d, stderr %q: want 2 and a pointer to scorerefresh-demo replay", code, stderr.String())
	}
}

func TestReplayFlagsAreChecked(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := run([]string{"replay", "--arrival", "sometimes", "--speed", "0"}, nil, io.Discard, &stderr)
	for _, want := range []string{"--in is required", `--arrival "sometimes"`, "--speed 0"} {
		if code != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, stderr.String())
		}
	}
}

// TestGeneratedBacklogReplaysDrainsAndReports is the whole path an operator
// takes: generate a backlog, replay it with the real consumer, read the
// report, compare two.
func TestGeneratedBacklogReplaysDrainsAndReports(t *testing.T) {
	t.Parallel()
	env, dbName := replayEnv(t)
	dir, reports := t.TempDir()+"/backlog", t.TempDir()
	runOK(t, []string{"backlog", "generate", "--shape", "mixed", "--entries", "300", "--users", "40", "--out", dir}, env)
	// A line a hand edit broke: refused, then skipped and listed.
	f, err := os.OpenFile(filepath.Join(dir, "score_events.json"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"username": "late", "createdAt": {"$date": "tomorrow"}}` + "\n")
	f.Close()
	var stderr bytes.Buffer
	if code := run([]string{"replay", "--in", dir, "--drain"}, env, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "score_events.json:301:") {
		t.Errorf("exit %d, stderr %s: want 1 and the bad line named", code, stderr.String())
	}
	out := runOK(t, []string{"replay", "--in", dir, "--drain", "--skip-bad", "--shift-to-now", "--report", reports, "--sample-interval", "200ms"}, env)
	r, err := replay.ReadReport(reports)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Drained || r.Entries != 300 || r.Acked != 300 || r.FinalDepth != 0 || r.DeadLetters != 0 || r.Samples == 0 ||
		r.CoalescingFactor < 1 || r.MaxDepth <= 0 || r.Settings.Database != dbName || r.Settings.RefreshConcurrency != 16 ||
		r.SkippedLines != 1 || r.Skipped[0].Line != 301 {
		t.Errorf("report %+v\nstdout:\n%s", r, out)
	}
	if !strings.Contains(out, "drained: 300 entries of ") || !strings.Contains(out, "report: "+filepath.Join(reports, "report.json")) {
		t.Errorf("stdout:\n%s", out)
	}
	tl, err := os.Open(filepath.Join(reports, replay.TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	if rows, err := csv.NewReader(tl).ReadAll(); err != nil || len(rows) != r.Samples+1 {
		t.Errorf("timeline: %d rows (%v), want %d samples and a header", len(rows), err, r.Samples)
	}
	if b, err := os.ReadFile(filepath.Join(reports, replay.ChartFile)); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("%s: %v", replay.ChartFile, err)
	}
	// Every user the backlog named has its score.
	db := mongotest.Client(t, mongotest.Options{}).Database(dbName)
	if n, err := db.Collection("user_scores").CountDocuments(t.Context(), bson.D{}); err != nil || n != int64(r.DistinctUsers) {
		t.Errorf("%d score documents (%v), want %d", n, err, r.DistinctUsers)
	}
	cmp := runOK(t, []string{"replay", "compare", reports, filepath.Join(reports, "report.json")}, nil)
	if !strings.Contains(cmp, "entries/s") || !strings.Contains(cmp, "REFRESH_CONCURRENCY") {
		t.Errorf("compare:\n%s", cmp)
	}
}

func TestSnapshotCommandWritesWhatReplayLoads(t *testing.T) {
	t.Parallel()
	env, dbName := replayEnv(t)
	gen := t.TempDir() + "/gen"
	runOK(t, []string{"backlog", "generate", "--shape", "zipf", "--entries", "120", "--users", "30", "--out", gen}, env)
	// Without --drain, replay only loads (the running service would drain).
	out := runOK(t, []string{"replay", "--in", gen}, env)
	if !strings.Contains(out, "loaded 120 entries into "+dbName+".score_events") {
		t.Errorf("stdout:\n%s", out)
	}
	snap := t.TempDir() + "/snap"
	out = runOK(t, []string{"snapshot", "--out", snap, "--with-sources", "--gzip"}, env)
	if !strings.Contains(out, "consistency:") {
		t.Errorf("stdout:\n%s", out)
	}
	want, _ := replay.ReadManifest(gen)
	got, err := replay.ReadManifest(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 2 || got.Files[0].File != "score_events.json.gz" || got.Files[0].Documents != 120 ||
		got.Files[1].Documents != want.Files[1].Documents || got.Database != dbName {
		t.Errorf("snapshot manifest %+v, generated %+v", got, want)
	}
	// The queue alone into one file, relaxed, as plain mongoexport would.
	file := filepath.Join(t.TempDir(), "queue.json")
	runOK(t, []string{"snapshot", "--out", file, "--json-format", "relaxed"}, env)
	b, err := os.ReadFile(file)
	if err != nil || bytes.Count(b, []byte("\n")) != 120 || !bytes.Contains(b, []byte(`"createdAt":{"$date":"`)) {
		t.Errorf("queue file (%v):\n%.300s", err, b)
	}
}
