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

// The HTTP scorer row: examples/httpscorer, built once per run, started per
// row on the row's database (directly: the scorer sits by its database),
// and reached by the service through a proxy of its own with the row's
// round trip, as the database is.

// httpScorerBinary builds examples/httpscorer into a temporary folder
// (once; setUp removes it) and returns its path.
func (b *Bench) httpScorerBinary(ctx context.Context) (string, error) {
	bin := filepath.Join(b.tmp, "httpscorer")
	if b.builtScorer {
		return bin, nil
	}
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		return "", fmt.Errorf("finding the module to build examples/httpscorer in: %v", err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/httpscorer")
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./examples/httpscorer: %v: %s", err, out)
	}
	b.builtScorer = true
	return bin, nil
}

// startHTTPScorer starts the scorer on db and a proxy in front of it with
// round trip rtt; it returns the SCORER_URL to give the service.
func (b *Bench) startHTTPScorer(ctx context.Context, db string, rtt time.Duration) (scorerURL string, stop func(), err error) {
	bin, err := b.httpScorerBinary(ctx)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "MONGODB_URI="+b.srv.URI, "MONGODB_DATABASE="+db, "SCORER_TOKEN=bench", "PORT=0")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	// The scorer says where it listens once it accepts requests; a scorer
	// that fails exits, which ends the read.
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, out) }()
	u, perr := url.Parse(strings.TrimSpace(strings.TrimPrefix(line, "listening on ")))
	if err != nil || perr != nil || u.Host == "" {
		kill()
		return "", nil, fmt.Errorf("the scorer did not say where it listens (%q): %v", line, errors.Join(err, perr))
	}
	addr := u.Host
	proxy, err := faultproxy.Start(context.Background(), faultproxy.Config{Target: addr})
	if err != nil {
		kill()
		return "", nil, err
	}
	proxy.SetDelay(rtt/2, rtt/2)
	return "http://" + proxy.Addr() + "/score", func() { proxy.Close(); kill() }, nil
}
