package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
)

// startHTTPScorer starts examples/httpscorer (built into the run's scratch
// folder once) on db, directly: the scorer sits by its database; and a
// proxy in front of it with round trip rtt, as the database has. It returns
// the SCORER_URL to give the service.
func (b *Bench) startHTTPScorer(ctx context.Context, db string, rtt time.Duration) (scorerURL string, stop func(), err error) {
	bin := filepath.Join(b.tmp, "httpscorer")
	if _, err := os.Stat(bin); err != nil {
		gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
		if err != nil || strings.TrimSpace(string(gomod)) == "" {
			return "", nil, fmt.Errorf("finding the module to build examples/httpscorer in: %v", err)
		}
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/httpscorer")
		build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		if out, err := build.CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("go build ./examples/httpscorer: %v: %s", err, out)
		}
	}
	// Killed with the run; a scorer that fails exits, which ends the read
	// of where it listens (it says so once it accepts requests).
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "MONGODB_URI="+b.srv.URI, "MONGODB_DATABASE="+db, "SCORER_TOKEN=bench", "PORT=0")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(exited) }()
	kill := func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-exited }
	out := bufio.NewReader(pr)
	line, err := out.ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, out) }()
	u, perr := url.Parse(strings.TrimSpace(strings.TrimPrefix(line, "listening on ")))
	if err != nil || perr != nil || u.Host == "" {
		kill()
		return "", nil, fmt.Errorf("the scorer did not say where it listens (%q): %v", line, errors.Join(err, perr))
	}
	proxy, err := faultproxy.Start(context.Background(), faultproxy.Config{Target: u.Host})
	if err != nil {
		kill()
		return "", nil, err
	}
	proxy.SetDelay(rtt/2, rtt/2)
	return "http://" + proxy.Addr() + "/score", func() { proxy.Close(); kill() }, nil
}
