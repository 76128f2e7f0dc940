package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// These tests run the real binary as separate OS processes against the test
// server, the way a Kubernetes Deployment runs several replicas on one queue.

// world is one test's database and the environment that points processes at it.
type world struct {
	t   *testing.T
	db  *mongo.Database
	env []string
}

func newWorld(t *testing.T, uri string) *world {
	db := mongotest.Database(t, mongotest.Options{})
	return &world{t: t, db: db, env: []string{"MONGODB_URI=" + uri, "MONGODB_DATABASE=" + db.Name(), "POLL_INTERVAL=100ms"}}
}

// through returns the world's environment with MONGODB_URI pointing at
// proxy instead of the test server, plus more variables.
func (w *world) through(proxy *faultproxy.Proxy, extraOptions []string, more ...string) []string {
	w.t.Helper()
	uri, err := proxyURI(mongotest.URI(w.t), proxy.Addr(), extraOptions...)
	if err != nil {
		w.t.Fatal(err)
	}
	env := []string{"MONGODB_URI=" + uri}
	for _, e := range w.env {
		if !strings.HasPrefix(e, "MONGODB_URI=") {
			env = append(env, e)
		}
	}
	return append(env, more...)
}

// produce writes n events over users as an application does: the source
// document first, then the queue entry announcing it.
func (w *world) produce(n, users int, seed uint64) {
	w.t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	ctx := w.t.Context()
	for range n {
		user := fmt.Sprintf("user %03d", rnd.IntN(users))
		now := time.Now()
		if _, err := w.db.Collection("user_activity").InsertOne(ctx, bson.D{{Key: "username", Value: user}, {Key: "points", Value: 1 + rnd.IntN(9)}, {Key: "at", Value: now}}); err != nil {
			w.t.Errorf("producing: %v", err)
			return
		}
		if _, err := w.db.Collection("score_events").InsertOne(ctx, bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: now}}); err != nil {
			w.t.Errorf("producing: %v", err)
			return
		}
	}
}

// seed writes n events over users in two bulk inserts.
func (w *world) seed(n, users int) {
	w.t.Helper()
	var activity, entries []any
	for i := range n {
		user := fmt.Sprintf("user %03d", i%users)
		now := time.Now()
		activity = append(activity, bson.D{{Key: "username", Value: user}, {Key: "points", Value: 1 + i%7}, {Key: "at", Value: now}})
		entries = append(entries, bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: now}})
	}
	if _, err := w.db.Collection("user_activity").InsertMany(w.t.Context(), activity); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.db.Collection("score_events").InsertMany(w.t.Context(), entries); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) count(coll string) int {
	n, err := w.db.Collection(coll).CountDocuments(w.t.Context(), bson.D{})
	if err != nil {
		return -1
	}
	return int(n)
}

// waitFor polls cond until it holds, failing after a generous deadline.
func (w *world) waitFor(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verify checks that nothing is pending or dead-lettered and that every
// user's score is the sum of its final source data.
func (w *world) verify() {
	w.t.Helper()
	if n := w.count("score_events"); n != 0 {
		w.t.Errorf("%d entries still queued", n)
	}
	if n := w.count("score_events_dead"); n != 0 {
		w.t.Errorf("%d dead letters, want 0", n)
	}
	w.verifyScores()
}

// verifyScores checks that every user's score is the sum of its final
// source data.
func (w *world) verifyScores() {
	w.t.Helper()
	ctx := w.t.Context()
	cur, err := w.db.Collection("user_activity").Aggregate(ctx, mongo.Pipeline{
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$username"}, {Key: "total", Value: bson.D{{Key: "$sum", Value: "$points"}}}}}},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	var want []struct {
		User  string  `bson:"_id"`
		Total float64 `bson:"total"`
	}
	if err := cur.All(ctx, &want); err != nil {
		w.t.Fatal(err)
	}
	cur, err = w.db.Collection("user_scores").Find(ctx, bson.D{})
	if err != nil {
		w.t.Fatal(err)
	}
	var got []struct {
		User  string  `bson:"_id"`
		Score float64 `bson:"score"`
	}
	if err := cur.All(ctx, &got); err != nil {
		w.t.Fatal(err)
	}
	scores := map[string]float64{}
	for _, g := range got {
		scores[g.User] = g.Score
	}
	var wrong []string
	for _, u := range want {
		if s, ok := scores[u.User]; !ok || s != u.Total {
			wrong = append(wrong, fmt.Sprintf("%s: %v, want %v", u.User, s, u.Total))
		}
	}
	if len(wrong) > 0 || len(want) == 0 {
		w.t.Errorf("%d of %d scores wrong: %s", len(wrong), len(want), strings.Join(wrong[:min(len(wrong), 5)], "; "))
	}
}

func TestThreeProcessesDrainWhileAProducerWrites(t *testing.T) {
	t.Parallel()
	w := newWorld(t, mongotest.URI(t))
	var procs []*proc
	for i := range 3 {
		procs = append(procs, startProc(t, fmt.Sprintf("consumer-%d", i), w.env...))
	}
	w.produce(300, 40, 1)
	w.waitFor("the queue to drain", func() bool { return w.count("score_events") == 0 })
	for _, p := range procs {
		p.stop()
	}
	if n := w.count("score_claims"); n != 0 {
		t.Errorf("%d leases left after every consumer stopped", n)
	}
	w.verify()
}

func TestKilledConsumersWorkIsRescuedAfterItsLease(t *testing.T) {
	t.Parallel()
	// A little latency keeps the first consumer mid-drain long enough to kill.
	proxy := startProxy(t)
	w := newWorld(t, mongotest.URI(t))
	w.seed(400, 200)
	env := w.through(proxy, nil, "LEASE_DURATION=3s", "REFRESH_CONCURRENCY=4", "MAX_USERS_IN_FLIGHT=16")
	doomed := startProc(t, "doomed", env...)
	w.waitFor("the first acknowledgements", func() bool { n := w.count("score_events"); return n >= 0 && n < 400 })
	doomed.kill9()
	if w.count("score_events") == 0 {
		t.Fatal("the queue drained before the kill; the test proves nothing")
	}
	if w.count("score_claims") == 0 {
		t.Log("the kill left no lease behind (it fell between claim rounds)")
	}
	rescuer := startProc(t, "rescuer", env...)
	w.waitFor("the queue to drain", func() bool { return w.count("score_events") == 0 })
	rescuer.stop()
	w.verify()
}

func TestConsumerSurvivesAMongoDBOutage(t *testing.T) {
	t.Parallel()
	proxy := startProxy(t)
	w := newWorld(t, mongotest.URI(t))
	w.seed(400, 200)
	env := w.through(proxy, []string{"serverSelectionTimeoutMS=2000"}, "REFRESH_CONCURRENCY=4", "MAX_USERS_IN_FLIGHT=16", "MAX_ATTEMPTS=2")
	p := startProc(t, "consumer", env...)
	w.waitFor("readiness", func() bool { return p.status("/readyz") == 200 })
	w.waitFor("the first acknowledgements", func() bool { n := w.count("score_events"); return n >= 0 && n < 400 })

	proxy.Refuse(true)
	proxy.Cut()
	w.waitFor("readiness to drop during the outage", func() bool { return p.status("/readyz") == 503 })
	if code := p.status("/healthz"); code != 200 {
		t.Errorf("/healthz = %d during an outage, want 200 (restarting would not help)", code)
	}
	// Keep MongoDB away a little longer: refreshes and claims fail meanwhile.
	outage := time.Now()
	w.waitFor("several seconds of outage", func() bool { return time.Since(outage) > 3*time.Second })
	proxy.Restore()

	w.waitFor("readiness to return", func() bool { return p.status("/readyz") == 200 })
	w.waitFor("the queue to drain", func() bool { return w.count("score_events") == 0 })
	select {
	case err := <-p.done:
		t.Fatalf("the consumer exited during the outage: %v", err)
	default:
	}
	p.stop()
	w.verify()
}

// startProxy puts a fault proxy with 5 ms each way between a consumer and
// the test server (its first host; see proxyTarget).
func startProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	target, err := proxyTarget(mongotest.URI(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(context.Background(), faultproxy.Config{Target: target, Up: 5 * time.Millisecond, Down: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return proxy
}
