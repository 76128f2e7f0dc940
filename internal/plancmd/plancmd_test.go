package plancmd

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/replay"
)

func runPlan(t *testing.T, environ []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(args, environ, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestHelpExplainsEveryInput(t *testing.T) {
	code, out, _ := runPlan(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help exits %d", code)
	}
	for _, want := range []string{"the backlog", "the rules", "the round trip", "the fleet", "the load", "a transient",
		"per component plus 2", "median of --pings pings", "read-only", "REFRESH_CONCURRENCY, MAX_USERS_IN_FLIGHT, CLAIM_WINDOW", "REFRESH_BATCH_SIZE", "spread over the free slots", "--server-kind"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	cfg, _ := config.Parse(nil)
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var o planOptions
	o.register(fs, cfg)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out, "  -"+f.Name) || !strings.Contains(out, f.Usage[:min(len(f.Usage), 40)]) {
			t.Errorf("help does not explain -%s", f.Name)
		}
	})
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args    []string
		environ []string
		want    string
	}{
		{nil, nil, "give the backlog"},
		{[]string{"--in", dir, "--from-queue", "--rtt", "1ms"}, nil, "give the backlog"},
		{[]string{"--in", dir}, nil, "give the round trip: --rtt D or --measure"},
		{[]string{"--in", dir, "--rtt", "1ms", "--measure"}, nil, "exclude each other"},
		{[]string{"--in", dir, "--rtt", "1ms", "--transient-rtt", "0.5"}, nil, "--transient-rtt 0.5"},
		{[]string{"--in", dir, "--rtt", "1ms", "--pings", "0"}, nil, "--pings"},
		{[]string{"--in", dir, "--measure", "--measure-capacity", "1s", "--rtt-slope", "1ms"}, nil, "use one or the other"},
		{[]string{"--in", dir, "--rtt", "1ms", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"--in", dir, "--rtt", "soon"}, nil, "invalid value"},
		{[]string{"--in", dir, "--rtt", "1ms"}, []string{"REFRESH_CONCURRENCY=lots"}, "REFRESH_CONCURRENCY"},
	} {
		code, _, stderr := runPlan(t, tc.environ, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

func generate(t *testing.T, shape replay.Shape, entries, users int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "backlog")
	if _, err := replay.Generate(replay.GenerateConfig{Shape: shape, Entries: entries, Users: users, Seed: 3, Out: dir}); err != nil {
		t.Fatal(err)
	}
	return dir
}

type jsonOut struct {
	Format string `json:"format"`
	planner.Plan
}

func TestPlansAGeneratedBacklogWithTheEnvironmentsConfiguration(t *testing.T) {
	dir := generate(t, replay.ShapeMixed, 600, 100)
	code, out, stderr := runPlan(t, []string{"REFRESH_CONCURRENCY=8", "CLAIM_WINDOW=200"}, "--in", dir, "--rtt", "5ms", "--json", "--max-replicas", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p jsonOut
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Format != "scorerefresh-plan/1" || p.Entries != 600 || p.Config.Concurrency != 8 || p.Config.ClaimWindow != 200 || len(p.Rows) != 2 {
		t.Errorf("plan %s: %d entries, concurrency %d, window %d, %d rows; want 600, 8 (environment), 200, 2",
			p.Format, p.Entries, p.Config.Concurrency, p.Config.ClaimWindow, len(p.Rows))
	}
	if !p.Rows[0].Run.Drained || len(p.Rows[0].Run.Timeline) == 0 || p.RoundTrips != 3 {
		t.Errorf("row 1: drained %t, %d samples, %d round trips; want a drained timeline of the built-in rules (3)",
			p.Rows[0].Run.Drained, len(p.Rows[0].Run.Timeline), p.RoundTrips)
	}

	svg := filepath.Join(t.TempDir(), "plan.svg")
	code, out, stderr = runPlan(t, []string{"REFRESH_CONCURRENCY=8"}, "--in", dir, "--rtt", "5ms", "--concurrency", "4", "--components", "12",
		"--arrival", "original", "--speed", "10", "--transient-rtt", "10", "--transient-for", "10s", "--transient-at", "5s", "--svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"REFRESH_CONCURRENCY 4", "12 components + 2 = 14 round trips", "arrival: original ×10", "transient (round trips ×10 for 10.0s at 5.0s)", "chart: " + svg} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	chart, err := os.ReadFile(svg)
	if err != nil || !bytes.Contains(chart, []byte("<svg")) || !bytes.Contains(chart, []byte("Transient at 1 replica(s)")) {
		t.Errorf("chart %s: %v, transient panel missing", svg, err)
	}
}

// TestTheDefaultBatchIsTheServicesForTheServer: REFRESH_BATCH_SIZE unset
// is resolved as the consumer resolves it on the server named; the
// environment and --batch force it.
func TestTheDefaultBatchIsTheServicesForTheServer(t *testing.T) {
	dir := generate(t, replay.ShapeDiverse, 200, 200)
	for _, tc := range []struct {
		environ []string
		args    []string
		want    int
	}{
		{nil, nil, 16},
		{nil, []string{"--server-kind", "ferretdb-sqlite"}, 16},
		{nil, []string{"--server-kind", "ferretdb-postgresql"}, 1},
		{[]string{"REFRESH_BATCH_SIZE=8"}, []string{"--server-kind", "ferretdb-postgresql"}, 8},
		{nil, []string{"--batch", "2"}, 2},
	} {
		args := append([]string{"--in", dir, "--rtt", "5ms", "--json", "--max-replicas", "1"}, tc.args...)
		code, out, stderr := runPlan(t, tc.environ, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", tc.args, code, stderr)
		}
		var p jsonOut
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		if p.Config.Batch != tc.want {
			t.Errorf("%q %q: batch %d, want %d", tc.environ, tc.args, p.Config.Batch, tc.want)
		}
	}
	if code, _, stderr := runPlan(t, nil, "--in", dir, "--rtt", "5ms", "--server-kind", "oracle"); code != 2 || !strings.Contains(stderr, "--server-kind") {
		t.Errorf("--server-kind oracle: exit %d, %q; want a usage error", code, stderr)
	}
}

// The live queue and --measure, against the test server: the plan reads the
// queue without changing it.
func TestMeasuresAndReadsTheLiveQueueReadOnly(t *testing.T) {
	db := mongotest.Database(t, mongotest.Options{})
	ctx := context.Background()
	queue := db.Collection("score_events")
	now := time.Now()
	var docs []any
	for i := range 50 {
		docs = append(docs, bson.D{{Key: "username", Value: []string{"ann", "bob", "cy"}[i%3]}, {Key: "createdAt", Value: now.Add(time.Duration(i-60) * time.Second)}})
	}
	docs = append(docs, bson.D{{Key: "createdAt", Value: now}}) // malformed: no username
	if _, err := queue.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	environ := []string{"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name()}
	code, out, stderr := runPlan(t, environ, "--from-queue", "--measure", "--pings", "5", "--measure-capacity", "200ms", "--concurrency", "2", "--json", "--max-replicas", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p jsonOut
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Entries != 50 || p.Users != 3 || p.Server.RTT <= 0 || p.Server.Capacity <= 0 || p.Config.ChangeStreams || p.Config.Batch != 16 {
		t.Errorf("%d entries of %d users, RTT %gs, capacity %g/s, change streams %t, batch %d; want 50 of 3, a measured RTT and capacity, none on FerretDB, its default batch on SQLite (16)",
			p.Entries, p.Users, p.Server.RTT, p.Server.Capacity, p.Config.ChangeStreams, p.Config.Batch)
	}
	for _, want := range []string{"read the oldest 51 of about 51 entries", "1 malformed", "measured", "median of 5 pings", "queries/s with 2 refreshes' queries at once", "server: ferretdb-sqlite"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if n, err := queue.CountDocuments(ctx, bson.D{}); err != nil || n != 51 {
		t.Errorf("queue holds %d entries after the plan (%v), want the 51 it had", n, err)
	}
	// The oldest entry was enqueued 60 s ago: the plan counts ages from now.
	if s := p.Rows[0].Run.Timeline[0]; s.T != 0 || s.Depth != 50 || s.OldestAge < 60 || s.OldestAge > 120 {
		t.Errorf("first sample %+v, want the 50 entries at t=0, the oldest 60 s old and the time since", s)
	}
}

func TestMeasureTimesTheClaimWindowOnADeepQueue(t *testing.T) {
	db := mongotest.Database(t, mongotest.Options{})
	now := time.Now()
	docs := make([]any, 1200)
	for i := range docs {
		docs[i] = bson.D{{Key: "username", Value: "u" + string(rune('a'+i%20))}, {Key: "createdAt", Value: now.Add(time.Duration(i) * time.Millisecond)}}
	}
	if _, err := db.Collection("score_events").InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	environ := []string{"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name()}
	code, out, stderr := runPlan(t, environ, "--from-queue", "--measure", "--pings", "3", "--json", "--max-replicas", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p jsonOut
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Server.ScanCost <= 0 || !strings.Contains(stderr, "claim window") {
		t.Errorf("scan cost %g s per entry, stderr %q: want the claim window timed on 1,200 entries", p.Server.ScanCost, stderr)
	}
}

// TestHelpAnswersWhateverTheEnvironment: the help is what an operator asks
// for when the configuration is wrong.
func TestHelpAnswersWhateverTheEnvironment(t *testing.T) {
	code, out, _ := runPlan(t, []string{"REFRESH_CONCURRENCY=lots"}, "--in", "x", "--help")
	if code != 0 || !strings.Contains(out, "usage: scorerefresh plan") {
		t.Errorf("--help with a bad environment: exit %d, stdout %q", code, out)
	}
}
