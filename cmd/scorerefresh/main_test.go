package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

func TestBadConfigurationStopsAtBootListingEveryProblem(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := run([]string{"run"}, []string{
		"MONGODB_URI=mongodb://app:hunter2@db:27017/", "CLAIM_WINDOW=-5", "POLL_INTERVAL=fast", "REFRESH_CONCURRENCY=100",
	}, io.Discard, &stderr)
	if code == 0 {
		t.Fatal("exit code 0 for a bad configuration")
	}
	for _, want := range []string{"CLAIM_WINDOW=-5", "POLL_INTERVAL=\"fast\"", "REFRESH_CONCURRENCY=100: must not exceed MAX_USERS_IN_FLIGHT=64"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "hunter2") {
		t.Errorf("password on stderr:\n%s", stderr.String())
	}
}

func TestInvalidRulesFileStopsAtBootNamingIt(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("components:\n  - name: a\n    collection: c\n    op: avg\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run([]string{"run"}, []string{"SCORING_RULES=" + path, "METRICS_ADDR=127.0.0.1:0"}, io.Discard, &stderr)
	if code == 0 {
		t.Fatal("exit code 0 for an invalid rules file")
	}
	if !strings.Contains(stderr.String(), path) || !strings.Contains(stderr.String(), `"avg"`) {
		t.Errorf("stderr should name the file and the bad op:\n%s", stderr.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if code := run([]string{"drain"}, nil, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
		t.Errorf("code %d, stderr %q", code, stderr.String())
	}
}

// TestBinaryDrainsQueueAndStopsCleanlyOnSIGTERM runs the real binary as its
// own process against the test server, the way Kubernetes runs it.
func TestBinaryDrainsQueueAndStopsCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	db := mongotest.Database(t, mongotest.Options{})
	ctx := t.Context()
	var entries, activity []any
	for i := range 40 {
		user := []string{"ann", "bo", "cy", "dee"}[i%4]
		activity = append(activity, bson.D{{Key: "username", Value: user}, {Key: "points", Value: 2}, {Key: "at", Value: time.Now()}})
		entries = append(entries, bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: time.Now()}})
	}
	if _, err := db.Collection("user_activity").InsertMany(ctx, activity); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("score_events").InsertMany(ctx, entries); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "run")
	cmd.Env = append(os.Environ(),
		"MONGODB_URI="+mongotest.URI(t), "MONGODB_DATABASE="+db.Name(),
		"METRICS_ADDR=127.0.0.1:0", "POLL_INTERVAL=50ms", "LOG_LEVEL=debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	logs := make(chan map[string]any, 1000)
	go func() {
		defer close(logs)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				t.Errorf("a log line is not JSON: %s", sc.Text())
				continue
			}
			logs <- line
		}
	}()

	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := db.Collection("score_events").CountDocuments(ctx, bson.D{})
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not drained (%d left, err %v)", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-waitCtx.Done():
		t.Fatal("no exit within 30s of SIGTERM")
	}
	var stopped bool
	for line := range logs {
		if line["msg"] == "consumer stopped" {
			stopped = true
		}
	}
	if !stopped {
		t.Error("no \"consumer stopped\" log line")
	}
	var score struct {
		Score   float64 `bson:"score"`
		Version int64   `bson:"version"`
	}
	if err := db.Collection("user_scores").FindOne(ctx, bson.D{{Key: "_id", Value: "ann"}}).Decode(&score); err != nil {
		t.Fatal(err)
	}
	if score.Score != 20 {
		t.Errorf("ann's score = %v, want 20 (10 activities × 2 points)", score.Score)
	}
}

// run is runWith with nobody to answer a confirmation prompt.
func run(args, environ []string, stdout, stderr io.Writer) int {
	return runWith(args, environ, strings.NewReader(""), stdout, stderr)
}
