package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// previousRelease is the release this code must run beside on one queue
// during a rollout or a rollback (docs/compatibility.md). After tagging a
// release, point it at that release (docs/releasing.md). The commit stands
// in for the tag in clones that fetched no tags.
var previousRelease = struct{ Tag, Commit string }{
	Tag:    "v0.2.0",
	Commit: "ddd7a30ac9d4085e5baaf3f24605067ea199a98d",
}

// mixedVersionCommand is the command the release checklist runs.
const mixedVersionCommand = "go test ./cmd/scorerefresh -run TestMixedVersion -v"

// previousReleaseEnv names any other git revision to run beside instead
// (an older release, to judge a skipped upgrade).
const previousReleaseEnv = "SCOREREFRESH_PREVIOUS_RELEASE"

// TestMixedVersion drains one queue with the previous release and this code
// side by side while a producer keeps writing, through a rolling update
// (old → new, one replica at a time, the new one working beside the old
// ones before an old one is stopped, as the Deployment's maxSurge 1 /
// maxUnavailable 0 does) and then a rollback (new → old). In each direction
// the last replica of the outgoing version crashes (SIGKILL) instead of
// stopping, so the incoming version must take over leases the other one
// wrote. Every score must come out exact, every entry acknowledged, nothing
// dead-lettered, and no replica of either version may see a failed claim
// round, ack flush, refresh or lost lease, nor log an error.
func TestMixedVersion(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds two releases and runs four processes; run " + mixedVersionCommand)
	}
	rev, label := resolvePreviousRelease(t)
	top, dir := repoTop(t), t.TempDir()
	var oldBin string
	var oldErr error
	built := make(chan struct{})
	go func() { // both builds at once
		defer close(built)
		oldBin, oldErr = buildRelease(t.Context(), top, rev, label, dir)
	}()
	newBin := buildBinary(t)
	<-built
	if oldErr != nil {
		t.Fatalf("building the previous release %s: %v", label, oldErr)
	}
	if out, err := exec.Command(oldBin, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), label) {
		t.Fatalf("the previous release's binary says %q (%v), want version %s", out, err, label)
	}

	w := newWorld(t, mongotest.URI(t))
	// A short lease so a crashed replica's users are rescued within seconds;
	// adaptive concurrency so the old release's baseline documents in the
	// claims collection are left beside the new one's leases too.
	f := &mixedFleet{w: w, env: append([]string{"LEASE_DURATION=8s", "ADAPTIVE_CONCURRENCY=true", "REFRESH_CONCURRENCY=4", "MAX_USERS_IN_FLIGHT=16"}, w.env...)}
	old := release{name: label, bin: oldBin}
	cur := release{name: "current", bin: newBin}

	running := []*proc{f.start(old), f.start(old)}
	prod := startProducer(t, w, 40, 20*time.Millisecond)
	for _, p := range running {
		f.awaitAcks(p, 0)
	}
	running = f.roll(running, cur)
	running = f.roll(running, old) // the rollback
	produced := prod.stop()
	w.waitFor("the queue to drain", func() bool { return w.count("score_events") == 0 })
	for _, p := range running {
		f.retire(p)
	}
	t.Logf("%d entries produced during the rollout and the rollback; acknowledged per replica: %s", produced, strings.Join(f.acked, ", "))
	if produced == 0 {
		t.Fatal("the producer wrote nothing: the test proves nothing")
	}
	w.verify()
	if n := f.leasesLeft(); n != 0 {
		t.Errorf("%d leases left after every replica stopped gracefully", n)
	}
}

// release is one build of scorerefresh.
type release struct{ name, bin string }

// mixedFleet starts, replaces and retires the replicas of one queue.
type mixedFleet struct {
	w     *world
	env   []string
	seq   int
	acked []string // "name: n" of each retired replica
}

func (f *mixedFleet) start(r release) *proc {
	f.w.t.Helper()
	f.seq++
	p := startProcOf(f.w.t, r.bin, fmt.Sprintf("%s-%d", r.name, f.seq), f.env...)
	f.w.waitFor(p.name+" to be ready", func() bool { return p.status("/readyz") == http.StatusOK })
	return p
}

// overlap is how many entries the incoming and the outgoing replica must
// each acknowledge while they run side by side: several claim rounds each.
const overlap = 15

// roll replaces every running replica with one of r, one at a time: the new
// replica and the old one must both acknowledge entries side by side before
// the old one goes. The last old one crashes, and roll waits until the
// leases it held have been taken over by the new version.
func (f *mixedFleet) roll(running []*proc, r release) []*proc {
	f.w.t.Helper()
	next := make([]*proc, 0, len(running))
	for i, old := range running {
		before := f.counter(old, "scorerefresh_entries_acked_total", "")
		p := f.start(r)
		f.awaitAcks(p, overlap)
		f.awaitAcks(old, before+overlap)
		next = append(next, p)
		if i < len(running)-1 {
			f.retire(old)
			continue
		}
		f.checkCounters(old)
		f.crash(old, r)
	}
	return next
}

// crash kills p with SIGKILL while it holds leases, then waits until the
// replicas of r have taken them over. To be sure p holds some, it is frozen
// (SIGSTOP) and its leases read, thawed and tried again until they are
// there; a frozen process cannot release them behind the test's back.
func (f *mixedFleet) crash(p *proc, r release) {
	t := f.w.t
	t.Helper()
	owner := f.ownerOf(p)
	var held map[string]bool
	for try := 0; try < 50 && len(held) == 0; try++ {
		f.signal(p, syscall.SIGSTOP)
		if held = f.heldLeases(owner); len(held) == 0 {
			f.signal(p, syscall.SIGCONT)
			f.awaitAcks(p, f.counter(p, "scorerefresh_entries_acked_total", ""))
		}
	}
	p.kill9()
	if len(held) == 0 {
		t.Logf("%s held no lease in 50 looks (owner %q): its crash tests no takeover", p.name, owner)
		return
	}
	t.Logf("%s crashed holding the leases of %d users; the %s replicas must take them over", p.name, len(held), r.name)
	f.w.waitFor(fmt.Sprintf("the %d leases %s held when it crashed to be taken over by %s", len(held), p.name, r.name), func() bool {
		now := f.heldLeases("")
		for k := range held {
			if now[k] {
				return false
			}
		}
		return true
	})
}

// ownerOf is the owner p writes on its leases: hostname:pid.
func (f *mixedFleet) ownerOf(p *proc) string {
	host, err := os.Hostname()
	if err != nil {
		f.w.t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", host, p.cmd.Process.Pid)
}

func (f *mixedFleet) signal(p *proc, sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		f.w.t.Fatalf("%v to %s: %v", sig, p.name, err)
	}
}

// awaitAcks waits until p has acknowledged more than n entries.
func (f *mixedFleet) awaitAcks(p *proc, n float64) {
	f.w.t.Helper()
	f.w.waitFor(fmt.Sprintf("%s to acknowledge more than %v entries", p.name, n), func() bool {
		return f.counter(p, "scorerefresh_entries_acked_total", "") > n
	})
}

// retire checks p's error counters, stops it with SIGTERM as Kubernetes
// does, and then checks its whole log for errors (shutdown included).
func (f *mixedFleet) retire(p *proc) {
	t := f.w.t
	t.Helper()
	f.checkCounters(p)
	p.stop()
	for _, line := range strings.Split(p.logText(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("%s logged an error: %s", p.name, line)
		}
	}
}

// checkCounters scrapes p and reports every error it counted.
func (f *mixedFleet) checkCounters(p *proc) {
	t := f.w.t
	t.Helper()
	body, err := scrape(p)
	if err != nil {
		t.Fatalf("scraping %s: %v", p.name, err)
	}
	// A lost lease is counted when two replicas both took over the same
	// expired lease: harmless (a second refresh of that user), and on the
	// embedded server possible whatever the versions, because its updateOne
	// finds and then overwrites rather than matching atomically, so two
	// fenced takeovers racing after a crash can both apply. On MongoDB
	// (TEST_MONGODB_URI) the fence is atomic and none may be lost.
	if v := sampleSum(body, "scorerefresh_leases_lost_total", ""); v != 0 {
		if os.Getenv(mongotest.EnvURI) != "" {
			t.Errorf("%s: scorerefresh_leases_lost_total = %v, want 0", p.name, v)
		} else {
			t.Logf("%s: scorerefresh_leases_lost_total = %v (racing takeovers on the embedded server, see above)", p.name, v)
		}
	}
	for _, c := range []struct{ name, labels string }{
		{"scorerefresh_claim_errors_total", ""},
		{"scorerefresh_ack_flush_errors_total", ""},
		{"scorerefresh_refreshes_total", `outcome="error"`},
		{"scorerefresh_entries_deadlettered_total", ""},
	} {
		if v := sampleSum(body, c.name, c.labels); v != 0 {
			t.Errorf("%s: %s{%s} = %v, want 0", p.name, c.name, c.labels, v)
		}
	}
	f.acked = append(f.acked, fmt.Sprintf("%s: %v", p.name, sampleSum(body, "scorerefresh_entries_acked_total", "")))
}

// counter reads one series sum from p's /metrics; -1 when it cannot.
func (f *mixedFleet) counter(p *proc, name, labels string) float64 {
	body, err := scrape(p)
	if err != nil {
		return -1
	}
	return sampleSum(body, name, labels)
}

// leases reads the lease documents (a username as _id) of the claims
// collection; other documents there (0.2.0's adaptive baselines, which
// later releases ignore) have a subdocument _id and stay by design.
func (f *mixedFleet) leases() []bson.Raw {
	t := f.w.t
	t.Helper()
	cur, err := f.w.db.Collection("score_claims").Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatalf("reading the claims collection: %v", err)
	}
	var docs []bson.Raw
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatalf("reading the claims collection: %v", err)
	}
	var leases []bson.Raw
	for _, d := range docs {
		if d.Lookup("_id").Type == bson.TypeString {
			leases = append(leases, d)
		}
	}
	return leases
}

func (f *mixedFleet) leasesLeft() int { return len(f.leases()) }

// heldLeases is the set of "user/token" of the leases held now, by owner
// (anyone when owner is "").
func (f *mixedFleet) heldLeases(owner string) map[string]bool {
	held := map[string]bool{}
	for _, d := range f.leases() {
		if o, _ := d.Lookup("owner").StringValueOK(); owner != "" && o != owner {
			continue
		}
		if tok, ok := d.Lookup("token").StringValueOK(); ok {
			held[d.Lookup("_id").StringValue()+"/"+tok] = true
		}
	}
	return held
}

func scrape(p *proc) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), err
}

// sampleSum adds up the samples of name in Prometheus' text format whose
// labels contain labels (all of them when labels is empty). A series never
// created reads as 0, as Prometheus' own absent-is-zero counters do.
func sampleSum(body, name, labels string) float64 {
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metric, lbls, _ := strings.Cut(series, "{")
		if metric != name || !strings.Contains(lbls, labels) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			sum += v
		}
	}
	return sum
}

// producer writes events for users at a steady rate, as applications do:
// the source document first, then the queue entry announcing it.
type producer struct {
	quit    chan struct{}
	done    chan int
	once    sync.Once
	written int
}

func startProducer(t *testing.T, w *world, users int, every time.Duration) *producer {
	p := &producer{quit: make(chan struct{}), done: make(chan int, 1)}
	// Stopped before the test's database is dropped (cleanups run last
	// registered first): the embedded server must not drop a database
	// while inserts into it are under way.
	t.Cleanup(func() { p.stop() })
	go func() {
		rnd := rand.New(rand.NewPCG(18, 1))
		tick := time.NewTicker(every)
		defer tick.Stop()
		n := 0
		defer func() { p.done <- n }()
		for {
			select {
			case <-p.quit:
				return
			case <-tick.C:
			}
			user := fmt.Sprintf("user %03d", rnd.IntN(users))
			now := time.Now()
			if _, err := w.db.Collection("user_activity").InsertOne(t.Context(), bson.D{{Key: "username", Value: user}, {Key: "points", Value: 1 + rnd.IntN(9)}, {Key: "at", Value: now}}); err != nil {
				p.fail(t, err)
				return
			}
			if _, err := w.db.Collection("score_events").InsertOne(t.Context(), bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: now}}); err != nil {
				p.fail(t, err)
				return
			}
			n++
		}
	}()
	return p
}

// fail reports a failed insert, unless the test is already ending.
func (p *producer) fail(t *testing.T, err error) {
	if t.Context().Err() == nil {
		t.Errorf("producing: %v", err)
	}
}

// stop ends the producer and returns how many events it wrote.
func (p *producer) stop() int {
	p.once.Do(func() {
		close(p.quit)
		p.written = <-p.done
	})
	return p.written
}

// resolvePreviousRelease finds the previous release in this clone: by tag,
// else by commit; it skips the test when the clone's history has neither.
func resolvePreviousRelease(t *testing.T) (rev, label string) {
	t.Helper()
	top := repoTop(t)
	if r := os.Getenv(previousReleaseEnv); r != "" {
		c, err := gitCommit(top, r)
		if err != nil {
			t.Fatalf("%s=%s: %v", previousReleaseEnv, r, err)
		}
		return c, r
	}
	pr := previousRelease
	if c, err := gitCommit(top, pr.Tag); err == nil {
		if c != pr.Commit {
			t.Fatalf("tag %s is commit %s, but previousRelease names %s: update previousRelease in upgrade_test.go", pr.Tag, c, pr.Commit)
		}
		return c, pr.Tag
	}
	if c, err := gitCommit(top, pr.Commit); err == nil {
		return c, pr.Tag
	}
	t.Skipf("the previous release %s (commit %.7s) is not in this clone's history (shallow clone or tags not fetched): "+
		"run `git fetch --tags --unshallow` (or fetch that commit), then `%s`", pr.Tag, pr.Commit, mixedVersionCommand)
	return "", ""
}

// repoTop is the root of the git work tree this test runs in; the test
// skips outside one (a source archive has no history to build from).
func repoTop(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git is not installed: the previous release cannot be built; install git and run `%s`", mixedVersionCommand)
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree: the previous release cannot be built; run `%s` in a clone", mixedVersionCommand)
	}
	return strings.TrimSpace(string(out))
}

// gitCommit resolves rev to a full commit hash present in the clone.
func gitCommit(top, rev string) (string, error) {
	out, err := exec.Command("git", "-C", top, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("no commit %s in this clone", rev)
	}
	return strings.TrimSpace(string(out)), nil
}

// buildRelease extracts commit's tree into dir (git archive, so the
// repository and its work trees are left alone) and builds its
// cmd/scorerefresh as a release is built, with version baked in.
// Modules come from the shared module cache.
func buildRelease(ctx context.Context, top, commit, version, dir string) (string, error) {
	src := filepath.Join(dir, "src")
	archive := exec.CommandContext(ctx, "git", "-C", top, "archive", "--format=tar", commit)
	var stderr strings.Builder
	archive.Stderr = &stderr
	out, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := archive.Start(); err != nil {
		return "", fmt.Errorf("git archive %s: %w", commit, err)
	}
	extractErr := untar(out, src)
	_, _ = io.Copy(io.Discard, out)
	if err := errors.Join(archive.Wait(), extractErr); err != nil {
		return "", fmt.Errorf("extracting %s: %w\n%s", commit, err, stderr.String())
	}
	bin := filepath.Join(dir, "scorerefresh")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-X main.version="+version+" -X main.revision="+commit,
		"-o", bin, "./cmd/scorerefresh")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", src, err, b)
	}
	return bin, nil
}

// untar writes the directories and regular files of a tar stream under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			err = writeFile(name, tr, h.FileInfo().Mode().Perm())
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(name string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}
