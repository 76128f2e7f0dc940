package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildBinary builds the production binary once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "scorerefresh-bin-*")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "scorerefresh")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// proc is one `scorerefresh run` process.
type proc struct {
	t           *testing.T
	name        string
	cmd         *exec.Cmd
	metricsAddr string
	done        chan error

	mu   sync.Mutex
	logs bytes.Buffer
}

// startProc runs the binary with env and waits until it serves metrics.
func startProc(t *testing.T, name string, env ...string) *proc {
	t.Helper()
	return startProcOf(t, buildBinary(t), name, env...)
}

// startProcOf is startProc for any build of scorerefresh, such as a previous
// release's (upgrade_test.go).
func startProcOf(t *testing.T, bin, name string, env ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "run")
	p.cmd.Env = append(os.Environ(), append([]string{"METRICS_ADDR=127.0.0.1:0", "LOG_LEVEL=info"}, env...)...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.Write(sc.Bytes())
			p.logs.WriteByte('\n')
			p.mu.Unlock()
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving metrics and health" {
				addr <- line.Addr
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, p.logText())
		}
	})
	select {
	case p.metricsAddr = <-addr:
	case err := <-p.done:
		t.Fatalf("%s exited before serving metrics: %v\n%s", name, err, p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not serve metrics within 60s\n%s", name, p.logText())
	}
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// status GETs a health path; 0 when the process does not answer.
func (p *proc) status(path string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.metricsAddr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Errorf("%s exited with %v after SIGTERM\n%s", p.name, err, p.logText())
		}
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s did not exit within 60s of SIGTERM", p.name)
	}
}

// kill9 kills the process without letting it release anything.
func (p *proc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
}
