package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotToStdout is the runbook's recipe for a pod without a shell:
// `snapshot --out - --gzip` streams the queue to stdout, the summary goes to
// stderr, and what was captured replays into another database.
func TestSnapshotToStdout(t *testing.T) {
	t.Parallel()
	env, _ := replayEnv(t)
	gen := t.TempDir() + "/gen"
	runOK(t, []string{"backlog", "generate", "--shape", "zipf", "--entries", "80", "--users", "20", "--out", gen}, env)
	runOK(t, []string{"replay", "--in", gen}, env)

	var stdout, stderr bytes.Buffer
	if code := run([]string{"snapshot", "--out", "-", "--gzip"}, env, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "-: 80 documents of ") || !strings.Contains(stderr.String(), "consistency:") {
		t.Errorf("stderr lacks the summary:\n%s", stderr.String())
	}
	zr, err := gzip.NewReader(bytes.NewReader(stdout.Bytes()))
	if err != nil {
		t.Fatalf("stdout is not gzip: %v", err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("reading the gzip stream: %v", err)
	}
	if n := bytes.Count(plain, []byte("\n")); n != 80 || !bytes.Contains(plain, []byte(`"createdAt":{"$date":{"$numberLong":"`)) {
		t.Errorf("%d lines of canonical Extended JSON, want 80:\n%.300s", n, plain)
	}

	// Redirected to a file, it is what replay --in takes.
	file := filepath.Join(t.TempDir(), "snap.jsonl.gz")
	if err := os.WriteFile(file, stdout.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	other, dbName := replayEnv(t)
	if out := runOK(t, []string{"replay", "--in", file}, other); !strings.Contains(out, "loaded 80 entries into "+dbName+".score_events") {
		t.Errorf("replay of the captured stream:\n%s", out)
	}

	// Without --gzip the lines themselves.
	stdout.Reset()
	if code := run([]string{"snapshot", "--out", "-"}, env, &stdout, io.Discard); code != 0 || bytes.Count(stdout.Bytes(), []byte("\n")) != 80 {
		t.Errorf("plain stdout: exit %d, %d lines, want 0 and 80", code, bytes.Count(stdout.Bytes(), []byte("\n")))
	}
}

func TestSnapshotToStdoutRefusesSources(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if code := run([]string{"snapshot", "--out", "-", "--with-sources"}, nil, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--with-sources needs a directory") {
		t.Errorf("exit %d, stderr %q: want 2 and why", code, stderr.String())
	}
}
