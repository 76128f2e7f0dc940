package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/scoring"
)

func doctorConfig(c Collections, rules *scoring.Rules) DoctorConfig {
	return DoctorConfig{Colls: c, Rules: rules, Replicas: 2, PoolSize: 21, PerReplica: 23, ClaimWindow: 500, LeaseDuration: time.Minute}
}

// indexedSources creates the default rules' source collection with the
// index it needs.
func indexedSources(t *testing.T, c Collections) {
	t.Helper()
	if _, err := c.DB.Collection("user_activity").Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: bson.D{{Key: "username", Value: 1}, {Key: "at", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
}

func byName(r *DoctorReport) map[string]Check {
	m := map[string]Check{}
	for _, c := range r.Checks {
		m[c.Name] = c
	}
	return m
}

// TestDoctorOnTheEmbeddedServerWarnsAndNeverFails: what FerretDB lacks
// (explain plans, TTL and partial indexes, change streams, privileges,
// connection figures, a replica set) are warnings, everything else passes.
func TestDoctorOnTheEmbeddedServerWarnsAndNeverFails(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	indexedSources(t, c)
	r := Doctor(t.Context(), doctorConfig(c, scoring.DefaultRules()))
	var out bytes.Buffer
	if err := WriteDoctor(&out, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("doctor on the embedded server:\n%s", out.String())
	if r.Failures != 0 {
		t.Fatalf("%d failures on a prepared embedded server", r.Failures)
	}
	checks := byName(r)
	for _, name := range []string{"server version", "topology", "change streams", "plan: claim window", "plan: ack delete by _id", "permissions", "connections",
		"index score_claims {attempts:1}"} {
		if checks[name].Status != Warn {
			t.Errorf("%s: %s (%s), want a warning on FerretDB", name, checks[name].Status, checks[name].Detail)
		}
	}
	for _, name := range []string{"reachable", "clock", "index score_events {createdAt:1, _id:1, username:1}", "source user_activity (activity)"} {
		if checks[name].Status != OK {
			t.Errorf("%s: %s (%s), want ok", name, checks[name].Status, checks[name].Detail)
		}
	}
	if !strings.Contains(out.String(), "fix: ") || !strings.Contains(out.String(), "0 failures") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestDoctorFailsOnMissingIndexesAndUnindexedSources(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	if err := c.Queue.Indexes().DropAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustInsert(t, c, "queue", bson.D{{Key: "username", Value: "a"}}) // the collection exists, unindexed
	if _, err := c.DB.Collection("user_activity").InsertOne(t.Context(), bson.D{{Key: "username", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	rules := &scoring.Rules{Source: "rules.yaml", Components: []scoring.Component{
		{Name: "activity", Collection: "user_activity", UserField: "username", Op: scoring.OpCount, Weight: 1},
		{Name: "posts", Collection: "posts", UserField: "author", Op: scoring.OpCount, Weight: 1},
	}}
	r := Doctor(t.Context(), doctorConfig(c, rules))
	checks := byName(r)
	for _, name := range []string{"index score_events {createdAt:1, _id:1, username:1}", "index score_events {username:1, createdAt:1, _id:1}", "source user_activity (activity)", "source posts (posts)"} {
		if checks[name].Status != Fail || checks[name].Fix == "" {
			t.Errorf("%s: %s (%s), want a failure with a fix", name, checks[name].Status, checks[name].Detail)
		}
	}
	if !strings.Contains(checks["index score_events {username:1, createdAt:1, _id:1}"].Fix, `createIndex({"username": 1, "createdAt": 1, "_id": 1})`) {
		t.Errorf("fix %q: want the createIndex to run", checks["index score_events {username:1, createdAt:1, _id:1}"].Fix)
	}
	if r.Failures != 4 {
		t.Errorf("%d failures, want 4", r.Failures)
	}
	raw, _ := json.Marshal(r)
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil || doc["schemaVersion"] != float64(1) || doc["kind"] != "doctor" || doc["failures"] != float64(4) {
		t.Errorf("json: %s", raw)
	}
}

func TestDoctorReportsAnUnreachableServer(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := Doctor(ctx, doctorConfig(c, scoring.DefaultRules()))
	if r.Failures != 1 || len(r.Checks) != 1 || r.Checks[0].Name != "reachable" {
		t.Errorf("report %+v: want one failed reachability check", r)
	}
}

func mustRaw(t testing.TB, extJSON string) bson.Raw {
	t.Helper()
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(extJSON), false, &raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestGrants(t *testing.T) {
	t.Parallel()
	s := func(v string) *string { return &v }
	priv := func(db, coll *string, actions ...string) privilege {
		var p privilege
		p.Resource.DB, p.Resource.Collection, p.Actions = db, coll, actions
		return p
	}
	cluster := privilege{Actions: []string{"serverStatus"}}
	cluster.Resource.Cluster = true
	privs := []privilege{
		priv(s("app"), s(""), "find", "insert"),           // readWrite-like on app
		priv(s(""), s("score_claims"), "remove"),          // one collection in every database
		priv(s("other"), s(""), "update"),                 // another database
		priv(s("app"), s("score_events"), "changeStream"), // one collection
		cluster,
	}
	for n, want := range map[need]bool{
		{"score_events", "find"}:         true,
		{"anything", "insert"}:           true,
		{"score_claims", "remove"}:       true,
		{"score_events", "remove"}:       false,
		{"score_claims", "update"}:       false,
		{"score_events", "changeStream"}: true,
		{"score_claims", "changeStream"}: false,
		{"cluster", "serverStatus"}:      true,
		{"", "listCollections"}:          false,
	} {
		if got := grants(privs, "app", n); got != want {
			t.Errorf("%v: %v, want %v", n, got, want)
		}
	}
	var any privilege
	any.Resource.AnyResource, any.Actions = true, []string{"anyAction"}
	if !grants([]privilege{any}, "app", need{"x", "remove"}) {
		t.Error("anyAction on anyResource does not grant remove")
	}
}

func TestClockAndConnectionVerdicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		skew, rtt time.Duration
		want      string
	}{
		{300 * time.Millisecond, 10 * time.Millisecond, OK},
		{-5 * time.Second, 10 * time.Millisecond, Warn},
		{2500 * time.Millisecond, 2 * time.Second, OK}, // within the measurement's slack
		{45 * time.Second, 10 * time.Millisecond, Fail},
	} {
		if st, detail, _ := clockVerdict(tc.skew, tc.rtt, time.Minute); st != tc.want {
			t.Errorf("skew %v rtt %v: %s (%s), want %s", tc.skew, tc.rtt, st, detail, tc.want)
		}
	}
	cfg := DoctorConfig{Replicas: 4, PoolSize: 21, PerReplica: 23}
	for _, tc := range []struct {
		current, available int64
		want               string
	}{{10, 500, OK}, {400, 100, Warn}, {50, 50, Fail}} {
		if st, detail, _ := connectionVerdict(5*23, cfg, tc.current, tc.available); st != tc.want {
			t.Errorf("%d in use, %d free: %s (%s), want %s", tc.current, tc.available, st, detail, tc.want)
		}
	}
}

// TestCollationVerdict: on a collection whose default collation is not
// simple, only an index built with the simple collation serves the
// service's queries (which use it to compare usernames exactly).
func TestCollationVerdict(t *testing.T) {
	t.Parallel()
	comp := scoring.Component{Collection: "posts", UserField: "author"}
	inherited := []indexInfo{{Name: "author_1", Keys: []string{"author:1"}, Collation: "en"}}
	st, detail, fix := collationVerdict(comp, inherited, "en", OK, "author_1 serves {author}", "")
	if st != Warn || !strings.Contains(detail, "default collation is en") || !strings.Contains(fix, `{collation: {locale: "simple"}}`) {
		t.Errorf("an index with the collection's collation: %s (%s; %s), want a warning and the index to build", st, detail, fix)
	}
	simple := append(inherited, indexInfo{Name: "author_simple", Keys: []string{"author:1"}, Collation: "simple"})
	if st, detail, _ := collationVerdict(comp, simple, "en", OK, "author_1 serves {author}", ""); st != OK || !strings.Contains(detail, "author_simple has the simple collation") {
		t.Errorf("with a simple-collation index: %s (%s), want OK naming it", st, detail)
	}
}

func TestSourceVerdict(t *testing.T) {
	t.Parallel()
	windowed := scoring.Component{Collection: "a", UserField: "user", TimeField: "at", Window: time.Hour}
	plain := scoring.Component{Collection: "b", UserField: "user"}
	both := []indexInfo{{Name: "_id_", Keys: []string{"_id:1"}}, {Name: "u_at", Keys: []string{"user:1", "at:-1"}}}
	userOnly := []indexInfo{{Name: "u", Keys: []string{"user:hashed"}}}
	for _, tc := range []struct {
		c       scoring.Component
		indexes []indexInfo
		want    string
	}{{windowed, both, OK}, {windowed, userOnly, Warn}, {plain, userOnly, OK}, {plain, both[:1], Fail}} {
		if st, detail, _ := sourceVerdict(tc.c, tc.indexes); st != tc.want {
			t.Errorf("%s with %v: %s (%s), want %s", tc.c.Collection, tc.indexes, st, detail, tc.want)
		}
	}

	// A filter's equality fields come between the user and the time field.
	rules, err := scoring.ParseRules("rules.yaml", []byte(`components:
  - {name: f, collection: a, userField: user, op: count, window: 1h, filter: {status: published, kind: {$in: [a, b]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	filtered := rules.Components[0]
	full := append(both, indexInfo{Name: "u_s_at", Keys: []string{"user:1", "status:1", "at:1"}})
	if st, detail, _ := sourceVerdict(filtered, full); st != OK || !strings.Contains(detail, "u_s_at serves {user, status, at}") {
		t.Errorf("filtered with %v: %s (%s), want OK by u_s_at", full, st, detail)
	}
	st, detail, fix := sourceVerdict(filtered, both)
	if st != Warn || !strings.Contains(detail, "serves {user} but not {status, at}") || !strings.Contains(fix, `{"user": 1, "status": 1, "at": 1}`) {
		t.Errorf("filtered with %v: %s (%s; %s), want a warning naming status then at, and the index to build", both, st, detail, fix)
	}
}

// TestDoctorNamesTheIndexAnEarlierReleaseLeft: 0.2.0's absorb index is
// unused once every replica runs this release; doctor says so, with the
// drop to run, and says nothing where the index is not there.
func TestDoctorNamesTheIndexAnEarlierReleaseLeft(t *testing.T) {
	t.Parallel()
	const name = "index score_events {username:1, createdAt:1}"
	c := testColls(t, nil)
	indexedSources(t, c)
	if _, ok := byName(Doctor(t.Context(), doctorConfig(c, scoring.DefaultRules())))[name]; ok {
		t.Fatalf("%s reported where it does not exist", name)
	}
	if _, err := c.Queue.Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: bson.D{{Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	r := Doctor(t.Context(), doctorConfig(c, scoring.DefaultRules()))
	got := byName(r)[name]
	if got.Status != Warn || !strings.Contains(got.Detail, "0.2.0") || !strings.Contains(got.Fix, `dropIndex("username_1_createdAt_1")`) {
		t.Errorf("%s: %+v, want a warning naming 0.2.0 and the drop", name, got)
	}
	if r.Failures != 0 {
		t.Errorf("%d failures: a left-over index is not one", r.Failures)
	}

	// Without its replacement, the old index is absorb's fallback: no drop.
	if err := c.Queue.Indexes().DropOne(t.Context(), "username_1_createdAt_1__id_1"); err != nil {
		t.Fatal(err)
	}
	got = byName(Doctor(t.Context(), doctorConfig(c, scoring.DefaultRules())))[name]
	if got.Status != Warn || strings.Contains(got.Fix, "dropIndex") || !strings.Contains(got.Detail, "falls back") {
		t.Errorf("%s with its replacement missing: %+v, want a warning not to drop it", name, got)
	}
}
