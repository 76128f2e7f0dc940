// Package examplescorer runs the example HTTP scorers of examples/ for the demo and the bench: a
// process that prints "listening on URL" once it accepts requests, stopped as a deployment stops it.
package examplescorer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BuildGo builds examples/httpscorer (by import path: from anywhere in the module) into dir, returning its path.
func BuildGo(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "httpscorer")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/scorerefresh/scorerefresh/examples/httpscorer").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building examples/httpscorer: %w\n%s", err, out)
	}
	return bin, nil
}

// Process is a running example scorer; Done is closed once it has exited, Err then saying how.
type Process struct {
	URL  string // where it listens, as it said
	Done chan struct{}
	Err  error
	cmd  *exec.Cmd
}

// Start runs cmd with env added to this process's environment and its stderr on stderr, and
// returns once it says where it listens. A scorer that fails exits, which ends the wait; so does ctx.
func Start(ctx context.Context, cmd *exec.Cmd, env []string, stderr io.Writer) (*Process, error) {
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, Done: make(chan struct{})}
	go func() { p.Err = cmd.Wait(); pw.Close(); close(p.Done) }()
	line := make(chan string, 1)
	go func() {
		// The first line is the address; the rest is read and dropped so the
		// scorer never blocks on its output. No line: closed at its exit.
		out := bufio.NewReader(pr)
		if l, err := out.ReadString('\n'); err == nil {
			line <- strings.TrimSpace(l)
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			<-p.Done
			return nil, fmt.Errorf("%s exited before it listened: %v", cmd.Path, p.Err)
		}
		if p.URL, ok = strings.CutPrefix(l, "listening on "); !ok || p.URL == "" {
			p.Stop()
			return nil, fmt.Errorf("%s printed %q, not where it listens", cmd.Path, l)
		}
		return p, nil
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

// Stop asks the scorer to stop (SIGTERM) and kills it if it has not within ten seconds.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.Done
	}
}
