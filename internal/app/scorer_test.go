package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// lettersScorer is an external scorer on loopback: a user's score is the
// number of letters of its name, component "letters" likewise. fail, if
// set, decides per request: a status other than 200 for the whole request,
// or per-user errors.
type lettersScorer struct {
	fail     func(users []string) (status int, errs map[string]string)
	requests atomic.Int64
	maxUsers atomic.Int64
}

func (s *lettersScorer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Users []string `json:"users"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Authorization") != "Bearer t0ken" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	s.requests.Add(1)
	for {
		m := s.maxUsers.Load()
		if int64(len(req.Users)) <= m || s.maxUsers.CompareAndSwap(m, int64(len(req.Users))) {
			break
		}
	}
	errs := map[string]string{}
	if s.fail != nil {
		status, e := s.fail(req.Users)
		if status != http.StatusOK {
			http.Error(w, "scorer is failing", status)
			return
		}
		errs = e
	}
	scores := map[string]any{}
	for _, u := range req.Users {
		if _, failed := errs[u]; !failed {
			n := float64(len(u))
			scores[u] = map[string]any{"score": n, "components": map[string]float64{"letters": n}}
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"scores": scores, "errors": errs})
}

// scorerService runs the service on db with SCORER_URL pointing at scorer.
func scorerService(t *testing.T, db *mongo.Database, scorer http.Handler, more ...string) *Service {
	t.Helper()
	srv := httptest.NewServer(scorer)
	t.Cleanup(srv.Close)
	cfg, err := config.Parse(append([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(), "METRICS_ADDR=127.0.0.1:0",
		"POLL_INTERVAL=50ms", "SCORER_URL=" + srv.URL, "SCORER_TOKEN=t0ken", "SCORER_TIMEOUT=2s",
	}, more...))
	if err != nil {
		t.Fatal(err)
	}
	return newService(t, cfg, Options{})
}

func enqueueUsers(t *testing.T, db *mongo.Database, users ...string) {
	t.Helper()
	var docs []any
	for _, u := range users {
		docs = append(docs, bson.D{{Key: "username", Value: u}, {Key: "createdAt", Value: time.Now()}})
	}
	if _, err := db.Collection("score_events").InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
}

// drainedOrDead waits until the queue is empty, every entry acknowledged or
// dead-lettered.
func drainedOrDead(t *testing.T, db *mongo.Database) {
	t.Helper()
	waitEmpty(t, db.Collection("score_events"), 3*time.Minute)
}

// deadUsers lists the dead-lettered users with their reasons' texts.
func deadUsers(t *testing.T, db *mongo.Database) map[string]string {
	t.Helper()
	cur, err := db.Collection("score_events_dead").Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.Raw
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range docs {
		user, _ := d.Lookup("username").StringValueOK()
		out[user] = d.Lookup("deadLetter").String()
	}
	return out
}

// checkLetterScores checks every user of want has the letters score, with
// the scorer's components, and nobody else has one.
func checkLetterScores(t *testing.T, db *mongo.Database, want []string) {
	t.Helper()
	cur, err := db.Collection("user_scores").Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		ID         string             `bson:"_id"`
		Score      float64            `bson:"score"`
		Components map[string]float64 `bson:"components"`
	}
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range docs {
		got = append(got, d.ID)
		if n := float64(len(d.ID)); d.Score != n || d.Components["letters"] != n {
			t.Errorf("%s: score %v, components %v, want what the scorer returned (%v)", d.ID, d.Score, d.Components, n)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("score documents for %v, want %v", got, want)
	}
}

// TestExternalScorerFailuresAreChargedToTheirUsers drains through an
// external scorer that fails some users: per-user errors charge only those
// users (dead-lettered with the scorer's reason), and a scorer that fails
// every request holding one user (a 500) dead-letters that user alone,
// its batch-mates refreshed once they go alone. Every score written is
// what the scorer returned.
func TestExternalScorerFailuresAreChargedToTheirUsers(t *testing.T) {
	t.Parallel()
	users := []string{"ann", "bob", "cyd", "dee", "eve", "fay", "gus", "hal"}
	for _, tc := range []struct {
		name   string
		fail   func([]string) (int, map[string]string)
		victim string
		reason string
	}{
		{"per-user errors", func(us []string) (int, map[string]string) {
			if slices.Contains(us, "eve") {
				return 200, map[string]string{"eve": "eve has no account upstream"}
			}
			return 200, nil
		}, "eve", "eve has no account upstream"},
		{"a 500 for every request holding one user", func(us []string) (int, map[string]string) {
			if slices.Contains(us, "gus") {
				return 500, nil
			}
			return 200, nil
		}, "gus", "500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := mongotest.Database(t, mongotest.Options{})
			enqueueUsers(t, db, users...)
			scorer := &lettersScorer{fail: tc.fail}
			// Batches forced: the 500 fails batch-mates too, who must not
			// be charged for it.
			svc := scorerService(t, db, scorer, "MAX_ATTEMPTS=2", "REFRESH_BATCH_SIZE=4", "REFRESH_CONCURRENCY=2", "MAX_USERS_IN_FLIGHT=8")
			stop := run(t, svc)
			drainedOrDead(t, db)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			dead := deadUsers(t, db)
			if len(dead) != 1 || !strings.Contains(dead[tc.victim], "max_attempts") || !strings.Contains(dead[tc.victim], tc.reason) {
				t.Errorf("dead letters %v, want %s alone, max_attempts, with %q", dead, tc.victim, tc.reason)
			}
			checkLetterScores(t, db, slices.DeleteFunc(slices.Clone(users), func(u string) bool { return u == tc.victim }))
			if scorer.maxUsers.Load() > 4 {
				t.Errorf("a request carried %d users, REFRESH_BATCH_SIZE 4", scorer.maxUsers.Load())
			}
			if n := metrics.Read(svc.Metrics.ScorerRequests.WithLabelValues("ok")); n == 0 {
				t.Error("no request counted ok")
			}
		})
	}
}

// TestExternalScorerDownDeadLettersNobody: a scorer refusing every request
// for a while charges nobody (the failure is everyone's), and the backlog
// drains once it is back.
func TestExternalScorerDownDeadLettersNobody(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	users := []string{"ann", "bob", "cyd", "dee", "eve", "fay", "gus", "hal", "ike", "jo"}
	enqueueUsers(t, db, users...)
	var down atomic.Bool
	down.Store(true)
	scorer := &lettersScorer{fail: func([]string) (int, map[string]string) {
		if down.Load() {
			return http.StatusServiceUnavailable, nil
		}
		return 200, nil
	}}
	svc := scorerService(t, db, scorer, "MAX_ATTEMPTS=2")
	stop := run(t, svc)
	// Down for three times as many requests as users: with MAX_ATTEMPTS 2,
	// each user failed more than enough to be dead-lettered, had it been
	// charged.
	deadline := time.Now().Add(2 * time.Minute)
	for scorer.requests.Load() < int64(3*len(users)) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests reached the scorer", scorer.requests.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	down.Store(false)
	drainedOrDead(t, db)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if dead := deadUsers(t, db); len(dead) != 0 {
		t.Errorf("dead letters %v while the scorer was down for everyone, want none", dead)
	}
	checkLetterScores(t, db, users)
	if n := metrics.Read(svc.Metrics.ScorerRequests.WithLabelValues("error")); n < float64(3*len(users)) {
		t.Errorf("%v requests counted as errors, want at least %d", n, 3*len(users))
	}
}

// TestNodeScorerExampleDrains runs examples/nodescorer, an external scorer
// in Node.js (node:http and the official MongoDB driver, pinned by its
// lockfile), and drains the demo's shape of data through it: every score
// is what that scorer computes. It needs node and npm (CI installs them).
func TestNodeScorerExampleDrains(t *testing.T) {
	t.Parallel()
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		if os.Getenv("CI") == "" {
			t.Skip("needs node and npm (Debian's nodejs and npm packages); CI runs this test")
		}
		t.Fatalf("node or npm not on PATH in CI: %v, %v", errNode, errNPM)
	}
	dir := filepath.Join("..", "..", "examples", "nodescorer")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "mongodb")); err != nil {
		install := exec.CommandContext(t.Context(), npm, "ci", "--no-audit", "--no-fund")
		install.Dir = dir
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	srv := exec.Command(node, "server.js")
	srv.Dir = dir
	drainThroughExampleScorer(t, srv)
}

// TestGoHTTPScorerExampleDrains builds examples/httpscorer, the Go
// counterpart of the Node example (the standard library and the MongoDB
// driver only), and drains the same data through it.
func TestGoHTTPScorerExampleDrains(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "httpscorer")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../../examples/httpscorer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	drainThroughExampleScorer(t, exec.Command(bin))
}

// drainThroughExampleScorer starts srv, an example scorer of examples/, on
// a database of its own with SCORER_TOKEN and PORT=0, as a user would, and
// waits for its "listening on" line. It checks the scorer refuses what the
// protocol rules out, then drains the demo's shape of data through it with
// the service: every score is two points per activity document plus their
// points, nobody is dead-lettered.
func drainThroughExampleScorer(t *testing.T, srv *exec.Cmd) {
	t.Helper()
	db := mongotest.Database(t, mongotest.Options{})
	srv.Env = append(os.Environ(), "MONGODB_URI="+mongotest.URI(t), "MONGODB_DATABASE="+db.Name(), "SCORER_TOKEN=t0ken", "PORT=0")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false // by SIGTERM at the end, which waits for it
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Process.Kill()
			_ = srv.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on http://127.0.0.1:")
	if err != nil || !ok {
		t.Fatalf("the scorer did not start (%q, %v):\n%s", line, err, stderr.String())
	}
	url = "http://127.0.0.1:" + url
	refusesOutOfProtocol(t, url+"/score")

	now := time.Now().Add(-time.Minute)
	want := map[string]float64{"ann": 0, "bob": 0, "cy": 0}
	var activity []any
	for i, u := range []string{"ann", "ann", "bob", "ann", "bob"} {
		activity = append(activity, bson.D{{Key: "username", Value: u}, {Key: "points", Value: i + 1}, {Key: "at", Value: now}})
		want[u] += 2 + float64(i+1)
	}
	if _, err := db.Collection("user_activity").InsertMany(t.Context(), activity); err != nil {
		t.Fatal(err)
	}
	enqueueUsers(t, db, "ann", "bob", "cy", "ann")
	cfg, err := config.Parse([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(), "METRICS_ADDR=127.0.0.1:0",
		"POLL_INTERVAL=50ms", "SCORER_URL=" + url + "/score", "SCORER_TOKEN=t0ken",
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, newService(t, cfg, Options{}))
	drainedOrDead(t, db)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if dead := deadUsers(t, db); len(dead) != 0 {
		t.Fatalf("dead letters %v; the scorer's log:\n%s", dead, stderr.String())
	}
	for u, w := range want {
		var doc struct {
			Score float64 `bson:"score"`
		}
		if err := db.Collection("user_scores").FindOne(t.Context(), bson.D{{Key: "_id", Value: u}}).Decode(&doc); err != nil || doc.Score != w {
			t.Errorf("%s: score %v (%v), want %v", u, doc.Score, err, w)
		}
	}
	// A deployment stops it with SIGTERM: it must stop by itself, cleanly.
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the scorer after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Errorf("the scorer still runs a minute after SIGTERM")
		_ = srv.Process.Kill()
		<-exited
	}
	stopped = true
}

// refusesOutOfProtocol checks an example scorer at url answers 401 without
// the token, 400 to a body that is not the protocol's request and 405 to
// another method.
func refusesOutOfProtocol(t *testing.T, url string) {
	t.Helper()
	for _, tc := range []struct {
		method, auth, body string
		want               int
	}{
		{http.MethodPost, "", `{"users": ["ann"], "asOf": "2026-12-01T10:00:00.000Z"}`, http.StatusUnauthorized},
		{http.MethodPost, "Bearer wrong", `{"users": ["ann"], "asOf": "2026-12-01T10:00:00.000Z"}`, http.StatusUnauthorized},
		{http.MethodPost, "Bearer t0ken", `{"users": ["ann"`, http.StatusBadRequest},
		{http.MethodPost, "Bearer t0ken", `{"users": [1], "asOf": "2026-12-01T10:00:00.000Z"}`, http.StatusBadRequest},
		{http.MethodPost, "Bearer t0ken", `{"users": ["ann"], "asOf": "yesterday"}`, http.StatusBadRequest},
		{http.MethodPost, "Bearer t0ken", `{"asOf": "2026-12-01T10:00:00.000Z"}`, http.StatusBadRequest},
		{http.MethodGet, "Bearer t0ken", "", http.StatusMethodNotAllowed},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, url, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s with %q: %s, want %d", tc.method, tc.auth, tc.body, resp.Status, tc.want)
		}
	}
}
