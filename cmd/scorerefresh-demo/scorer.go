package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/config"
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
	switch v {
	case "true", exampleNode:
		*e = exampleNode
	case exampleGo:
		*e = exampleGo
	case "false":
		*e = ""
	default:
		return fmt.Errorf("%q: want node or go", v)
	}
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

// exampleScorer is a running example scorer.
type exampleScorer struct {
	cmd  *exec.Cmd
	tmp  string        // the Go example's build directory, removed at stop
	done chan struct{} // closed once it exited
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
	s := &exampleScorer{done: make(chan struct{})}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	switch which {
	case exampleNode:
		s.cmd, err = nodeScorer(ctx, filepath.Join(root, "examples", "nodescorer"), stderr)
	case exampleGo:
		s.cmd, s.tmp, err = goScorer(ctx, root)
	}
	if err != nil {
		return nil, nil, err
	}
	token := rand.Text()
	s.cmd.Env = append(os.Environ(), "MONGODB_URI="+uri, "MONGODB_DATABASE="+cfg.Database, "SCORER_TOKEN="+token, "PORT=0", "LISTEN=127.0.0.1")
	// The first line it prints is where it listens; the rest is dropped.
	pr, pw := io.Pipe()
	s.cmd.Stdout, s.cmd.Stderr = pw, stderr
	if err := s.cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the %s example scorer: %w", which, err)
	}
	listening := firstLine(pr)
	runCtx, cancel := context.WithCancelCause(ctx)
	go func() {
		err := s.cmd.Wait()
		pw.Close()
		cancel(scorerExitError{fmt.Errorf("the %s example scorer exited (%v); its log is above", which, err)})
		close(s.done)
	}()
	select {
	case line := <-listening:
		url, ok := strings.CutPrefix(line, "listening on ")
		if !ok {
			return nil, nil, fmt.Errorf("the %s example scorer printed %q, not its address", which, line)
		}
		cfg.ScorerURL, cfg.ScorerToken = url+"/score", token
		fmt.Fprintf(stdout, "the %s example scorer at %s computes the scores\n", which, cfg.ScorerURL)
		return runCtx, s.stop, nil
	case <-s.done:
		return nil, nil, context.Cause(runCtx)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// firstLine sends the first line r yields and discards the rest, so the
// writer never blocks.
func firstLine(r io.Reader) <-chan string {
	line := make(chan string, 1)
	go func() {
		out := bufio.NewReader(r)
		if l, err := out.ReadString('\n'); err == nil {
			line <- strings.TrimSpace(l)
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return line
}

// scorerExitError ends the context of withScorerExample.
type scorerExitError struct{ error }

// scorerExited is why the drain of ctx stopped if the example scorer exited
// under it, nil otherwise (an interrupt, or no example scorer).
func scorerExited(ctx context.Context) error {
	if exited, ok := context.Cause(ctx).(scorerExitError); ok {
		return exited
	}
	return nil
}

// stop asks the scorer to stop as a deployment would (SIGTERM), and kills it
// if it has not within ten seconds.
func (s *exampleScorer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

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

// goScorer builds examples/httpscorer into a temporary directory, tmp.
func goScorer(ctx context.Context, root string) (_ *exec.Cmd, tmp string, _ error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, "", errors.New("--scorer-example go builds examples/httpscorer: it needs go on PATH")
	}
	tmp, err = os.MkdirTemp("", "scorerefresh-demo-")
	if err != nil {
		return nil, "", fmt.Errorf("building examples/httpscorer: %w", err)
	}
	bin := filepath.Join(tmp, "httpscorer")
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin, "./examples/httpscorer")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, tmp, fmt.Errorf("building examples/httpscorer: %w\n%s", err, out)
	}
	return exec.Command(bin), tmp, nil
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
