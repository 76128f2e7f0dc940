package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestScorerExampleFlag: --scorer-example alone is the Node scorer, and its
// value may follow as the next argument, the flags after it still parsed;
// anything but node or go is refused.
func TestScorerExampleFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		want    scorerExample
		entries int
	}{
		{nil, "", 3000},
		{[]string{"--scorer-example"}, exampleNode, 3000},
		{[]string{"--scorer-example", "-entries", "7"}, exampleNode, 7},
		{[]string{"--scorer-example", "go", "-entries", "7"}, exampleGo, 7},
		{[]string{"--scorer-example", "node", "-entries", "7"}, exampleNode, 7},
		{[]string{"--scorer-example=go", "-entries", "7"}, exampleGo, 7},
		{[]string{"-entries", "7", "--scorer-example=node"}, exampleNode, 7},
	} {
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var e scorerExample
		entries := fs.Int("entries", 3000, "")
		fs.Var(&e, "scorer-example", "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if err := takeScorerExampleArg(fs, &e); err != nil || e != tc.want || *entries != tc.entries || fs.NArg() != 0 {
			t.Errorf("%q: %q, -entries %d, %d arguments left (%v), want %q and %d", tc.args, e, *entries, fs.NArg(), err, tc.want, tc.entries)
		}
	}
	var stderr bytes.Buffer
	if code := run([]string{"--scorer-example=python"}, nil, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "want node or go") {
		t.Errorf("--scorer-example=python: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"--scorer-example=go"}, []string{"SCORING_RULES=rules.json"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "unset SCORING_RULES") {
		t.Errorf("--scorer-example with SCORING_RULES: exit %d, %q", code, stderr.String())
	}
}

// TestDemoDrainsThroughTheGoScorerExample runs the demo with the Go example
// scorer: it builds examples/httpscorer, drains the backlog through it and
// verifies every score is the scorer's (two points per activity document
// plus their points, which the rules' score is not).
func TestDemoDrainsThroughTheGoScorerExample(t *testing.T) {
	t.Parallel()
	demoThroughScorerExample(t, "go")
}

// TestDemoDrainsThroughTheNodeScorerExample is the same with the default,
// Node, example scorer. It needs node and npm (CI installs them).
func TestDemoDrainsThroughTheNodeScorerExample(t *testing.T) {
	t.Parallel()
	_, errNode := exec.LookPath("node")
	_, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		if os.Getenv("CI") == "" {
			t.Skip("needs node and npm (Debian's nodejs and npm packages); CI runs this test")
		}
		t.Fatalf("node or npm not on PATH in CI: %v, %v", errNode, errNPM)
	}
	demoThroughScorerExample(t)
}

// demoThroughScorerExample runs the demo with --scorer-example and value,
// if any, on a small backlog, and checks it verified every score.
func demoThroughScorerExample(t *testing.T, value ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := append(append([]string{"--scorer-example"}, value...), "-entries", "200", "-users", "30")
	if code := run(args, []string{"POLL_INTERVAL=50ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "example scorer at http://127.0.0.1:") || !strings.Contains(stdout.String(), "scores equal the example scorer's") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

// TestScorerExampleSaysWhatIsMissing: without node, npm or go on PATH, the
// example scorers say which tool they need. Not parallel: it empties PATH.
func TestScorerExampleSaysWhatIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := nodeScorer(t.Context(), t.TempDir(), io.Discard); err == nil || !strings.Contains(err.Error(), "needs node (20 or later) and npm on PATH") {
		t.Errorf("node missing: %v", err)
	}
	if _, err := goScorer(t.Context(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "needs go on PATH") {
		t.Errorf("go missing: %v", err)
	}
}
