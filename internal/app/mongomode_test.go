package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// The tests of this file run the service in its MongoDB mode on whatever
// server the suite has, the embedded FerretDB included: the traits are
// forced to MongoDB's (Options.Traits), so the paths production takes run
// end to end here, wherever the embedded server can answer them: the
// claim window's username regex, the malformed-entry scan, batched
// recompute with $in, score writes as bulk upserts, single-document
// (updateOne) lease statements. Each test checks that those paths ran.
//
// Batches are kept small: with MongoDB's traits every update statement is
// single-document, and on the embedded server each such statement holds
// one of its 100 SQLite connections until its command ends
// (servertraits.SingleUpdatesHoldConnections), so a command of ~100 of
// them jams it, and so do several commands of a few dozen each at once.
// REFRESH_BATCH_SIZE=8 and MAX_USERS_IN_FLIGHT=16 keep every command's
// statements well under that, and the tests do not run in parallel: the
// package's parallel tests (six replicas in TestFleetDrainsAndClosesEveryCursor)
// share the embedded server and its connections, and together with these
// statements they may take every one of them (one run beside them, under
// load, timed out).

// mongoModeEnv is the configuration of these tests besides the server.
var mongoModeEnv = []string{
	"REFRESH_BATCH_SIZE=8", "MAX_USERS_IN_FLIGHT=16", "REFRESH_CONCURRENCY=2",
	"POLL_INTERVAL=100ms", "SLI_INTERVAL=1s", "METRICS_ADDR=127.0.0.1:0",
}

// mongoRules reads user_activity with each op, so the batched shape of
// every op is sent; the embedded server refuses $max, which the scorer
// learns into the shared traits.
const mongoRules = `components:
  - {name: points, collection: user_activity, userField: username, op: sum, field: points, weight: 1}
  - {name: events, collection: user_activity, userField: username, op: count, weight: 0.5}
  - {name: best, collection: user_activity, userField: username, op: max, field: points, weight: 2}
  - {name: kinds, collection: user_activity, userField: username, op: distinct, field: kind, weight: 3}
`

// mongoService builds a service with MongoDB's traits forced, its commands
// watched by paths; wrap, if set, wraps its scorer.
func mongoService(t *testing.T, db *mongo.Database, paths *mongoPaths, wrap func(consumer.Refresher) consumer.Refresher, env ...string) *Service {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(mongoRules), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(append(append([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(), "SCORING_RULES=" + rules,
	}, mongoModeEnv...), env...))
	if err != nil {
		t.Fatal(err)
	}
	svc := newService(t, cfg, Options{
		Traits: servertraits.Fixed(servertraits.Info{Version: "7.0.0"}), Monitor: paths.monitor(), WrapRefresher: wrap,
	})
	if !svc.Traits.FiltersUsernamesCheaply() || svc.Traits.SingleUpdatesHoldConnections() {
		t.Fatalf("Options.Traits not used: the service takes the server for %+v", svc.Traits.Info())
	}
	return svc
}

// mongoPaths records the commands a MongoDB-mode service sends, to tell the
// paths only MongoDB mode takes and to read the scorer's commands (on the
// source and score collections) whole.
type mongoPaths struct{ mongotest.Commands }

const (
	pathRegexWindow   = "claim window filtering usernames by $regex"
	pathMalformedScan = "malformed-entry scan ($not $regex)"
	pathBatchedIn     = "batched recompute ($in over a batch of users)"
	pathBulkUpsert    = "score writes as upserts"
	pathUpdateOne     = "single-document lease statements (updateOne)"
)

func (p *mongoPaths) monitor() *event.CommandMonitor { return p.Monitor(nil) }

// seen counts the MongoDB-mode paths among the commands sent so far.
func (p *mongoPaths) seen() map[string]int {
	seen := map[string]int{}
	for _, c := range p.All() {
		switch {
		case c.Name == "find" && c.Collection == "score_events":
			filter, _ := c.Body.Lookup("filter").DocumentOK()
			if _, err := filter.LookupErr("username", "$not", "$regex"); err == nil {
				seen[pathMalformedScan]++
			} else if strings.Contains(filter.String(), `"$regex"`) {
				seen[pathRegexWindow]++
			}
		case c.Name == "aggregate" && c.Collection == "user_activity":
			if strings.Contains(c.Body.Lookup("pipeline").String(), `"$in"`) {
				seen[pathBatchedIn]++
			}
		case c.Name == "update":
			vals, _ := c.Body.Lookup("updates").Array().Values()
			for _, v := range vals {
				st, _ := v.DocumentOK()
				multi, _ := st.Lookup("multi").BooleanOK()
				upsert, _ := st.Lookup("upsert").BooleanOK()
				switch {
				case c.Collection == "user_scores" && upsert:
					seen[pathBulkUpsert]++
				case c.Collection == "score_claims" && !multi:
					seen[pathUpdateOne]++
				}
			}
		}
	}
	return seen
}

// scorer is the commands sent on the source and score collections.
func (p *mongoPaths) scorer() []mongotest.Command {
	var out []mongotest.Command
	for _, c := range p.All() {
		if c.Collection == "user_activity" || c.Collection == "user_scores" {
			out = append(out, c)
		}
	}
	return out
}

// require fails t unless each of paths was sent.
func (p *mongoPaths) require(t *testing.T, paths ...string) {
	t.Helper()
	seen := p.seen()
	for _, path := range paths {
		if seen[path] == 0 {
			t.Errorf("MongoDB mode did not run: no %s (seen: %v)", path, seen)
		}
	}
}

// seedMixed writes n events over users with points and kinds, and returns
// each user's expected score under mongoRules.
func seedMixed(t *testing.T, db *mongo.Database, n, users int, prefix string) map[string]float64 {
	t.Helper()
	type totals struct{ sum, count, best float64 }
	per := map[string]*totals{}
	kinds := map[string]map[string]bool{}
	var activity, entries []any
	now := time.Now()
	for i := range n {
		user := fmt.Sprintf("%s%03d", prefix, i%users)
		points := 1 + i%7
		kind := fmt.Sprintf("k%d", i%3)
		activity = append(activity, bson.D{{Key: "username", Value: user}, {Key: "points", Value: points}, {Key: "kind", Value: kind}, {Key: "at", Value: now}})
		entries = append(entries, bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: now}})
		if per[user] == nil {
			per[user], kinds[user] = &totals{}, map[string]bool{}
		}
		tot := per[user]
		tot.sum += float64(points)
		tot.count++
		tot.best = max(tot.best, float64(points))
		kinds[user][kind] = true
	}
	if _, err := db.Collection("user_activity").InsertMany(t.Context(), activity); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("score_events").InsertMany(t.Context(), entries); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for u, tot := range per {
		want[u] = tot.sum + 0.5*tot.count + 2*tot.best + 3*float64(len(kinds[u]))
	}
	return want
}

// serverLacksMax reports whether the suite's server lacks $group's $max
// (the embedded FerretDB does; a MongoDB behind TEST_MONGODB_URI does not).
func serverLacksMax(t *testing.T, db *mongo.Database) bool {
	t.Helper()
	info, err := servertraits.Ask(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	return info.FerretDB != ""
}

// TestMongoModeDrainsWithExactScores drains a backlog with MongoDB's
// traits forced: every MongoDB-only path of a drain runs, every score comes
// out exact, and what the server refused ($max on the embedded server) is
// learnt into the traits the whole service shares.
func TestMongoModeDrainsWithExactScores(t *testing.T) {
	db := mongotest.Database(t, mongotest.Options{})
	want := seedMixed(t, db, 240, 60, "user ")
	paths := &mongoPaths{}
	svc := mongoService(t, db, paths, nil)
	stop := run(t, svc)
	waitEmpty(t, db.Collection("score_events"), 3*time.Minute)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	checkScores(t, db, want)
	paths.require(t, pathRegexWindow, pathBatchedIn, pathBulkUpsert, pathUpdateOne)
	if lacks := serverLacksMax(t, db); svc.Traits.Lacks(servertraits.AccumulatorMax) != lacks {
		t.Errorf("the service's traits say $max lacking: %v; the server lacks it: %v (lacking: %v)", !lacks, lacks, svc.Traits.Lacking())
	}
}

// TestMongoModeRescuesACrashedReplicasUsers: a replica stops without
// releasing its leases (its client gone while it holds users mid-refresh,
// as a crash leaves them), and another, started after, takes those users
// over once LEASE_DURATION has passed, with single-document takeover
// statements; every score comes out exact.
func TestMongoModeRescuesACrashedReplicasUsers(t *testing.T) {
	db := mongotest.Database(t, mongotest.Options{})
	want := seedMixed(t, db, 120, 40, "user ")
	env := []string{"LEASE_DURATION=3s", "SHUTDOWN_TIMEOUT=100ms"}

	// The doomed replica's refreshes never finish: it holds its users
	// until its client is gone.
	stuck := func(consumer.Refresher) consumer.Refresher { return hangingRefresher{} }
	doomed := mongoService(t, db, &mongoPaths{}, stuck, env...)
	stopDoomed := run(t, doomed)
	claims := db.Collection("score_claims")
	deadline := time.Now().Add(time.Minute)
	for countRunning(t, claims) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the doomed replica never held a user mid-refresh")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := doomed.Client.Disconnect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := stopDoomed(); err == nil {
		t.Error("the doomed replica's final flush succeeded without a client: its leases were released, not left")
	}
	left := countRunning(t, claims)
	if left == 0 {
		t.Fatal("the doomed replica left no lease: the rescue tests nothing")
	}

	paths := &mongoPaths{}
	rescuer := mongoService(t, db, paths, nil, env...)
	stop := run(t, rescuer)
	waitEmpty(t, db.Collection("score_events"), 3*time.Minute)
	if err := stop(); err != nil {
		t.Errorf("rescuer: %v", err)
	}
	checkScores(t, db, want)
	paths.require(t, pathRegexWindow, pathUpdateOne)
	if n, err := claims.CountDocuments(t.Context(), bson.D{}); err != nil || n != 0 {
		t.Errorf("%d leases left after the rescuer stopped (%v); the doomed replica left %d", n, err, left)
	}
}

// hangingRefresher refreshes nothing: it waits until its refresh is
// cancelled (the shutdown timeout).
type hangingRefresher struct{}

func (hangingRefresher) Refresh(ctx context.Context, _ string, _ time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

// countRunning counts the leases marked running (a refresh under way).
func countRunning(t *testing.T, claims *mongo.Collection) int64 {
	t.Helper()
	n, err := claims.CountDocuments(t.Context(), bson.D{{Key: "running", Value: bson.D{{Key: "$type", Value: "string"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMongoModeDeadLettersAHostileHead: malformed entries at the head of
// the queue are kept out of the window by its regex and found by the
// malformed-entry scan, both MongoDB's paths, and dead-lettered; the users
// behind them are refreshed with exact scores.
func TestMongoModeDeadLettersAHostileHead(t *testing.T) {
	db := mongotest.Database(t, mongotest.Options{})
	head := time.Now().Add(-time.Hour)
	hostile := []any{
		bson.D{{Key: "_id", Value: "no-username"}},
		bson.D{{Key: "_id", Value: "number"}, {Key: "username", Value: 42}},
		bson.D{{Key: "_id", Value: "null"}, {Key: "username", Value: nil}},
		bson.D{{Key: "_id", Value: "array"}, {Key: "username", Value: bson.A{"alice", "bob"}}},
		bson.D{{Key: "_id", Value: "document"}, {Key: "username", Value: bson.D{{Key: "name", Value: "carol"}}}},
		bson.D{{Key: "_id", Value: "empty"}, {Key: "username", Value: ""}},
		bson.D{{Key: "_id", Value: "too-long"}, {Key: "username", Value: strings.Repeat("x", consumer.MaxUsernameBytes+1)}},
	}
	for i, h := range hostile {
		hostile[i] = append(h.(bson.D), bson.E{Key: "createdAt", Value: head.Add(time.Duration(i) * time.Millisecond)})
	}
	if _, err := db.Collection("score_events").InsertMany(t.Context(), hostile); err != nil {
		t.Fatal(err)
	}
	// Valid usernames of the longest length, beside ordinary ones.
	want := seedMixed(t, db, 80, 20, strings.Repeat("u", consumer.MaxUsernameBytes-3))
	for u, v := range seedMixed(t, db, 40, 10, "user ") {
		want[u] = v
	}
	paths := &mongoPaths{}
	svc := mongoService(t, db, paths, nil)
	stop := run(t, svc)
	waitEmpty(t, db.Collection("score_events"), 3*time.Minute)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	checkScores(t, db, want)
	paths.require(t, pathRegexWindow, pathMalformedScan)
	for _, h := range hostile {
		id := h.(bson.D)[0].Value
		var dead struct {
			DeadLetter struct {
				Reason string `bson:"reason"`
			} `bson:"deadLetter"`
		}
		if err := db.Collection("score_events_dead").FindOne(t.Context(), bson.D{{Key: "_id", Value: id}}).Decode(&dead); err != nil {
			t.Errorf("dead letter %v: %v", id, err)
		} else if dead.DeadLetter.Reason != "malformed" {
			t.Errorf("dead letter %v: reason %q, want malformed", id, dead.DeadLetter.Reason)
		}
	}
}

// TestMongoModeTakesOverStrayClaimsDocuments: claims documents no release
// writes (no leaseUntil, one that is not a date, attempts that are not a
// count) are taken over with MongoDB's single-document statements, and
// their users' entries drain with exact scores.
func TestMongoModeTakesOverStrayClaimsDocuments(t *testing.T) {
	db := mongotest.Database(t, mongotest.Options{})
	want := seedMixed(t, db, 60, 12, "user ")
	past := time.Now().Add(-time.Hour)
	strays := []any{
		bson.D{{Key: "_id", Value: "user 000"}},
		bson.D{{Key: "_id", Value: "user 001"}, {Key: "leaseUntil", Value: "tomorrow"}, {Key: "token", Value: "t"}},
		bson.D{{Key: "_id", Value: "user 002"}, {Key: "leaseUntil", Value: nil}},
		bson.D{{Key: "_id", Value: "user 003"}, {Key: "leaseUntil", Value: past}, {Key: "attempts", Value: "two"}, {Key: "solo", Value: "yes"}},
		bson.D{{Key: "_id", Value: "user 004"}, {Key: "leaseUntil", Value: past}, {Key: "attempts", Value: int32(-1_000_000)}},
		bson.D{{Key: "_id", Value: "user 005"}, {Key: "leaseUntil", Value: past}, {Key: "token", Value: "gone"}, {Key: "running", Value: "gone"}},
	}
	if _, err := db.Collection("score_claims").InsertMany(t.Context(), strays); err != nil {
		t.Fatal(err)
	}
	paths := &mongoPaths{}
	svc := mongoService(t, db, paths, nil)
	stop := run(t, svc)
	waitEmpty(t, db.Collection("score_events"), 3*time.Minute)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	checkScores(t, db, want)
	paths.require(t, pathRegexWindow, pathUpdateOne, pathBulkUpsert)
	if n, err := db.Collection("score_claims").CountDocuments(t.Context(), bson.D{}); err != nil || n != 0 {
		t.Errorf("%d claims documents left after a graceful stop (%v)", n, err)
	}
}

// TestMongoModeScorerCommandShapes pins the scorer's commands in MongoDB
// mode: batched recompute and score reads name at most REFRESH_BATCH_SIZE
// users, on the source index's leading field (username) and on _id, in a
// reply sized to close its cursor; score writes are single-document
// upserts (CheapUpserts) fenced by _id and version, one per user of the
// batch. Every statement of every command is checked.
func TestMongoModeScorerCommandShapes(t *testing.T) {
	const batch = 8 // mongoModeEnv's REFRESH_BATCH_SIZE
	db := mongotest.Database(t, mongotest.Options{})
	seedMixed(t, db, 96, 48, "user ")
	paths := &mongoPaths{}
	stop := run(t, mongoService(t, db, paths, nil))
	waitEmpty(t, db.Collection("score_events"), 3*time.Minute)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	users := func(t *testing.T, v bson.RawValue) int {
		t.Helper()
		n := len(valuesOf(v))
		if n == 0 || n > batch {
			t.Errorf("%d users in %s, want 1 to REFRESH_BATCH_SIZE (%d)", n, v, batch)
		}
		return n
	}
	closes := func(t *testing.T, v bson.RawValue, n int) {
		t.Helper()
		if b, ok := v.AsInt64OK(); !ok || b <= int64(n) {
			t.Errorf("batchSize %s for %d users' documents: the cursor may stay open", v, n)
		}
	}
	for _, tc := range []struct {
		name, cmd, coll string
		match           func(bson.Raw) bool
		check           func(t *testing.T, body bson.Raw)
	}{
		{"batched recompute", "aggregate", "user_activity", func(b bson.Raw) bool {
			_, err := b.LookupErr("pipeline", "0", "$match", "username", "$in")
			return err == nil
		}, func(t *testing.T, b bson.Raw) {
			closes(t, b.Lookup("cursor", "batchSize"), users(t, b.Lookup("pipeline", "0", "$match", "username", "$in")))
		}},
		{"score read", "find", "user_scores", nil, func(t *testing.T, b bson.Raw) {
			closes(t, b.Lookup("batchSize"), users(t, b.Lookup("filter", "_id", "$in")))
		}},
		{"score write", "update", "user_scores", nil, func(t *testing.T, b bson.Raw) {
			sts := valuesOf(b.Lookup("updates"))
			if len(sts) == 0 || len(sts) > batch {
				t.Errorf("%d statements in one score write, want 1 to %d", len(sts), batch)
			}
			for _, v := range sts {
				st := v.Document()
				_, id := st.Lookup("q", "_id").StringValueOK()
				_, fenced := st.LookupErr("q", "version")
				multi, _ := st.Lookup("multi").BooleanOK()
				upsert, _ := st.Lookup("upsert").BooleanOK()
				if !id || fenced != nil || multi || !upsert {
					t.Errorf("score write %s: want a single-document upsert by _id and version", st)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := 0
			for _, c := range paths.scorer() {
				if c.Name != tc.cmd || c.Collection != tc.coll || (tc.match != nil && !tc.match(c.Body)) {
					continue
				}
				seen++
				if h, err := c.Body.LookupErr("hint"); err == nil && h.Type != bson.TypeString {
					t.Errorf("%s hints by key pattern: %s", tc.name, c.Body)
				}
				tc.check(t, c.Body)
			}
			if seen == 0 {
				t.Errorf("no %s sent", tc.name)
			}
		})
	}
}

// valuesOf is v's elements, none if it is not an array.
func valuesOf(v bson.RawValue) []bson.RawValue {
	a, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := a.Values()
	return vals
}
