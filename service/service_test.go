package service

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// TestOwnScorerRefusesRulesAndScorerURL: a binary with its own scorer
// stops at boot when SCORING_RULES or SCORER_URL would compete with it,
// and answers --help without starting.
func TestOwnScorerRefusesRulesAndScorerURL(t *testing.T) {
	t.Parallel()
	own := Options{Name: "mine", Scorer: func(*mongo.Database) scoring.Scorer { return nil }}
	var out, errOut bytes.Buffer
	if code := Run(nil, []string{"SCORER_URL=http://127.0.0.1:1/score"}, &out, &errOut, own); code != 2 || !strings.Contains(errOut.String(), "brings its own scorer") {
		t.Errorf("exit %d, stderr %q: want 2 and why", code, errOut.String())
	}
	out.Reset()
	if code := Run([]string{"--help"}, []string{"MONGODB_URI=mongodb://127.0.0.1:1"}, &out, &errOut, own); code != 0 || !strings.Contains(out.String(), "usage: mine run") || !strings.Contains(out.String(), "SCORER_TIMEOUT=10s") {
		t.Errorf("--help: exit %d, stdout %q", code, out.String())
	}
}

// TestGoScorerExampleDrains builds examples/goscorer, a module of its own
// that imports only this module's public packages, runs it on a seeded
// queue and checks every score is the one its scorer computes.
func TestGoScorerExampleDrains(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "goscorer")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "examples", "goscorer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	db := mongotest.Database(t, mongotest.Options{})
	now := time.Now().Add(-time.Minute)
	var activity, entries []any
	want := map[string]float64{"ann": 0, "bob": 0, "cy": 0}
	for i, u := range []string{"ann", "ann", "bob", "ann", "bob"} {
		activity = append(activity, bson.D{{Key: "username", Value: u}, {Key: "points", Value: i + 1}, {Key: "at", Value: now}})
		want[u] += 2 + float64(i+1)
	}
	for u := range want {
		entries = append(entries, bson.D{{Key: "username", Value: u}, {Key: "createdAt", Value: time.Now()}})
	}
	if _, err := db.Collection("user_activity").InsertMany(t.Context(), activity); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("score_events").InsertMany(t.Context(), entries); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "MONGODB_URI="+mongotest.URI(t), "MONGODB_DATABASE="+db.Name(), "METRICS_ADDR=127.0.0.1:0", "POLL_INTERVAL=50ms")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := db.Collection("score_events").CountDocuments(t.Context(), bson.D{})
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the example left %d entries (%v); its log:\n%s", n, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the example exited with %v; its log:\n%s", err, stderr.String())
	}
	for u, w := range want {
		var doc struct {
			Score float64 `bson:"score"`
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := db.Collection("user_scores").FindOne(ctx, bson.D{{Key: "_id", Value: u}}).Decode(&doc)
		cancel()
		if err != nil || doc.Score != w {
			t.Errorf("%s: score %v (%v), want %v", u, doc.Score, err, w)
		}
	}
}
