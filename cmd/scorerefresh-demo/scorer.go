package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/examplescorer"
)

// scorerExample is --scorer-example: which example scorer of examples/ the
// demo drains through, "" for none (the rules). Bare, it is the Node one.
type scorerExample string

const (
	exampleNode = "node" // examples/nodescorer
	exampleGo   = "go"   // examples/httpscorer
)

func (e *scorerExample) String() string { return string(*e) }

// IsBoolFlag lets --scorer-example stand alone, meaning node.
func (e *scorerExample) IsBoolFlag() bool { return true }

func (e *scorerExample) Set(v string) error {
	x, ok := map[string]scorerExample{"true": exampleNode, exampleNode: exampleNode, exampleGo: exampleGo, "false": ""}[v]
	if !ok {
		return fmt.Errorf("%q: want node or go", v)
	}
	*e = x
	return nil
}

// takeScorerExampleArg reads "--scorer-example go": a boolean-style flag
// leaves its value as the first argument, and the flags after it unparsed.
func takeScorerExampleArg(fs *flag.FlagSet, e *scorerExample) error {
	if *e != exampleNode || fs.NArg() == 0 || (fs.Arg(0) != exampleNode && fs.Arg(0) != exampleGo) {
		return nil
	}
	*e = scorerExample(fs.Arg(0))
	return fs.Parse(fs.Args()[1:])
}

// withScorerExample builds or installs the example scorer which names (none
// when empty), starts it on a free loopback port reading cfg's database at
// uri, and points cfg at it once it listens. The context returned ends once
// the scorer exits: a demo draining through a dead scorer would wait forever.
func withScorerExample(ctx context.Context, cfg *config.Config, which scorerExample, uri string, stdout, stderr io.Writer) (_ context.Context, stop func(), err error) {
	if which == "" {
		return ctx, func() {}, nil
	}
	root, err := repoRoot()
	if err != nil {
		return nil, nil, err
	}
	var cmd *exec.Cmd
	tmp := "" // the Go scorer's binary's folder
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	switch which {
	case exampleNode:
		cmd, err = nodeScorer(ctx, filepath.Join(root, "examples", "nodescorer"), stderr)
	case exampleGo:
		if tmp, err = os.MkdirTemp("", "scorerefresh-demo-"); err == nil {
			cmd, err = goScorer(ctx, tmp)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	token := rand.Text()
	p, err := examplescorer.Start(ctx, cmd, []string{"MONGODB_URI=" + uri, "MONGODB_DATABASE=" + cfg.Database,
		"SCORER_TOKEN=" + token, "PORT=0", "LISTEN=127.0.0.1"}, stderr)
	if err != nil {
		return nil, nil, fmt.Errorf("the %s example scorer: %w (its log is above)", which, err)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	go func() {
		<-p.Done
		cancel(scorerExitError{fmt.Errorf("the %s example scorer exited (%v); its log is above", which, p.Err)})
	}()
	cfg.ScorerURL, cfg.ScorerToken = p.URL+"/score", token
	fmt.Fprintf(stdout, "the %s example scorer at %s computes the scores\n", which, cfg.ScorerURL)
	return runCtx, func() { p.Stop(); _ = os.RemoveAll(tmp) }, nil
}

// scorerExitError ends the context of withScorerExample: the example
// scorer exited (not an interrupt).
type scorerExitError struct{ error }

// nodeScorer is `node server.js`, after `npm ci` if its driver is not
// installed yet.
func nodeScorer(ctx context.Context, dir string, stderr io.Writer) (*exec.Cmd, error) {
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		return nil, errors.New("--scorer-example node needs node (20 or later) and npm on PATH (Debian: apt-get install nodejs npm); --scorer-example=go needs only Go")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "mongodb")); err != nil {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		install.Dir, install.Stdout, install.Stderr = dir, stderr, stderr
		if err := install.Run(); err != nil {
			return nil, fmt.Errorf("npm ci in %s: %w", dir, err)
		}
	}
	cmd := exec.Command(node, "server.js")
	cmd.Dir = dir
	return cmd, nil
}

// goScorer builds examples/httpscorer into dir.
func goScorer(ctx context.Context, dir string) (*exec.Cmd, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return nil, errors.New("--scorer-example go builds examples/httpscorer: it needs go on PATH")
	}
	bin, err := examplescorer.BuildGo(ctx, dir)
	return exec.Command(bin), err
}

// repoRoot is the repository holding examples/: the working directory or
// one of its parents, where `go run ./cmd/scorerefresh-demo` runs.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding examples/: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "examples", "nodescorer", "server.js")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("--scorer-example runs the scorers of examples/: run it inside the repository (not found above %s)", wd)
		}
	}
}
