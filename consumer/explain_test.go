package consumer

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// The hot queries of the claim path, recorded as the driver sends them while
// the real code runs over a queue and a claims collection built so that a
// wrong plan costs visibly more than the right one. docs/query-plans.md
// explains each plan and bound.
//
// Queue, oldest first (explainWindow = 40, room 8):
//
//	3 malformed entries (username missing, a number, "")
//	100 entries of "held", a user this replica holds (the window's $nin)
//	60 entries of u00…u29, two rounds
//	600 entries: every third of u00…u29, the rest of x000…x199
//
// Claims: 500 live leases and 200 backoffs of users not in the window (what a
// wrongly planned lease read would scan), u00…u04 held by another replica,
// u05…u07 expired (u05 while running).
const (
	explainWindow = 40
	explainRoom   = 8
	// explainHead is K, the queue entries the window's index scan passes
	// before its explainWindow-th match: the malformed ones, "held"'s and
	// the window itself.
	explainHead = 3 + 100 + explainWindow
	// explainWindowUsers is how many users those explainWindow entries hold.
	explainWindowUsers = 30
)

type hotScenario struct {
	b   *testBundle
	rec *queryplan.Recorder
	c   *Consumer
}

func newHotScenario(t *testing.T) *hotScenario {
	t.Helper()
	rec := &queryplan.Recorder{}
	db := mongotest.Database(t, mongotest.Options{Monitor: rec.Monitor()})
	b := &testBundle{db: db, cmds: &mongotest.Commands{}, colls: Collections{
		Queue: db.Collection("score_events"), Claims: db.Collection("score_claims"), DeadLetter: db.Collection("score_events_dead"),
	}}
	if _, err := EnsureIndexes(t.Context(), b.colls, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	var queue []any
	add := func(username any) {
		doc := bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "createdAt", Value: base.Add(time.Duration(len(queue)) * time.Millisecond)}}
		if username != nil {
			doc = append(doc, bson.E{Key: "username", Value: username})
		}
		queue = append(queue, doc)
	}
	for _, u := range []any{nil, 42, ""} {
		add(u)
	}
	for range 100 {
		add("held")
	}
	for i := range 60 {
		add(fmt.Sprintf("u%02d", i%30))
	}
	for i := range 600 {
		if i%3 == 0 {
			add(fmt.Sprintf("u%02d", i/3%30))
		} else {
			add(fmt.Sprintf("x%03d", i%200))
		}
	}
	now := time.Now()
	var claims []any
	for i := range 500 {
		claims = append(claims, leaseDoc{User: fmt.Sprintf("busy-%03d", i), Token: ptr("t-busy"), Owner: "other", LeaseUntil: now.Add(time.Hour)})
	}
	for i := range 200 {
		claims = append(claims, leaseDoc{User: fmt.Sprintf("retry-%03d", i), LeaseUntil: now.Add(time.Hour), Attempts: 1})
	}
	for i := range 5 {
		claims = append(claims, leaseDoc{User: fmt.Sprintf("u%02d", i), Token: ptr("t-other"), Owner: "other", LeaseUntil: now.Add(time.Hour)})
	}
	for i := 5; i < 8; i++ {
		d := leaseDoc{User: fmt.Sprintf("u%02d", i), Token: ptr("t-old"), Owner: "gone", LeaseUntil: now.Add(-time.Minute)}
		if i == 5 {
			d.Running = ptr("t-old") // its refresh was running: the takeover charges it
		}
		claims = append(claims, d)
	}
	if _, err := b.colls.Queue.InsertMany(t.Context(), queue); err != nil {
		t.Fatal(err)
	}
	if _, err := b.colls.Claims.InsertMany(t.Context(), claims); err != nil {
		t.Fatal(err)
	}
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: explainWindow, Owner: "explained"}})
	if err := c.claimer.detect(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The MongoDB path (usernames filtered by length, the malformed scan) on
	// every server, so CI checks its shapes on FerretDB too.
	filter := true
	c.claimer.filter = &filter
	rec.Take()
	return &hotScenario{b: b, rec: rec, c: c}
}

func ptr[T any](v T) *T { return &v }

// leaseDoc is a lease document in the types the service writes, for tests
// to seed the claims collection with and to read it back.
type leaseDoc struct {
	User       string    `bson:"_id"`
	Token      *string   `bson:"token"`
	Owner      string    `bson:"owner,omitempty"`
	LeaseUntil time.Time `bson:"leaseUntil"`
	Attempts   int       `bson:"attempts"`
	LastError  string    `bson:"lastError,omitempty"`
	ClaimedAt  time.Time `bson:"claimedAt,omitempty"`
	Running    *string   `bson:"running"`
	Solo       bool      `bson:"solo,omitempty"`
}

// hotRound is what one run of the claim path sent, phase by phase.
type hotRound struct {
	round, takeover, hold, settle, targeted []queryplan.Command
	res                                     *claimResult
	absorbed                                int // entries of the users won (E_won)
}

// run drives the claim path once: a claim round, a takeover of the expired
// leases, renewal and running marks, a flush that acknowledges all but one
// user (backed off) and dead-letters the malformed entries, and acks that
// name their users, as through a mongos. inspect, if set, sees each phase's
// commands before the next phase changes the data they ran on.
func (s *hotScenario) run(t *testing.T, inspect func(r *hotRound, cmds []queryplan.Command)) hotRound {
	t.Helper()
	if inspect == nil {
		inspect = func(*hotRound, []queryplan.Command) {}
	}
	ctx := t.Context()
	c := s.c
	var r hotRound
	res, err := c.claimer.round(ctx, explainRoom, AbsorbLimit, []string{"held"})
	if err != nil || len(res.works) != explainRoom {
		t.Fatalf("claim round: %v, %d users won, want %d", err, len(res.works), explainRoom)
	}
	r.res, r.round = res, s.rec.Take()
	for _, w := range res.works {
		r.absorbed += len(w.entries)
	}
	inspect(&r, r.round)
	if _, err := c.leases.acquire(ctx, []string{"u05", "u06", "u07"}, bson.NewObjectID().Hex(), time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	r.takeover = s.rec.Take()
	inspect(&r, r.takeover)

	held := make([]lease, len(res.works))
	for i, w := range res.works {
		held[i] = w.lease
		c.held[w.lease.User] = w.lease
	}
	if err := c.renewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.leases.mark(ctx, held...); err != nil {
		t.Fatal(err)
	}
	r.hold = s.rec.Take()
	inspect(&r, r.hold)

	for i, w := range res.works {
		var err error
		if i == len(res.works)-1 {
			err = errors.New("source down")
		}
		c.acks.add(outcome{work: w, err: err})
	}
	c.dead.addMalformed(res.malformed)
	if err := c.flushAll(ctx); err != nil {
		t.Fatal(err)
	}
	r.settle = s.rec.Take()
	inspect(&r, r.settle)

	r.targeted = s.targetedAcks(t)
	inspect(&r, r.targeted)
	return r
}

// targetedAcks deletes the entries of x000…x004 with statements that name
// their users, as the acker does through a mongos.
func (s *hotScenario) targetedAcks(t *testing.T) []queryplan.Command {
	t.Helper()
	cur, err := s.b.colls.Queue.Find(t.Context(), bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: bson.A{"x000", "x001", "x002", "x003", "x004"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var entries []rawEntry
	if err := cur.All(t.Context(), &entries); err != nil {
		t.Fatal(err)
	}
	ids, users := make(bson.A, len(entries)), make([]string, len(entries))
	for i, e := range entries {
		ids[i], users[i] = e.ID, e.Username.StringValue()
	}
	s.rec.Take()
	res, err := s.b.colls.Queue.BulkWrite(t.Context(), deleteStatements(ids, users...), options.BulkWrite().SetOrdered(false))
	if err != nil || int(res.DeletedCount) != len(ids) {
		t.Fatalf("deleting %d entries by _id and username: %v, %d deleted", len(ids), err, res.DeletedCount)
	}
	return s.rec.Take()
}

// TestHotQueryShapes checks what the claim path sends, on any server: the
// index hints, the limits, and that every list a command carries is bounded
// by the window, the room or a constant, never by the fleet or the queue.
func TestHotQueryShapes(t *testing.T) {
	if raceEnabled {
		// Its 1,500 seeded documents take the embedded server, running
		// under the detector in this process, past the client's timeouts;
		// the shapes are checked by the run without -race.
		t.Skip("a query-shape test with a large seed: run without -race")
	}
	t.Parallel()
	s := newHotScenario(t)
	r := s.run(t, nil)
	for _, c := range concat(r.round, r.takeover, r.hold, r.settle, r.targeted) {
		if c.Name == "getMore" {
			// A reply that holds the whole batch but leaves the cursor
			// open costs a round trip more per batch.
			t.Errorf("a getMore on %s: some find's batch is not sized to close its cursor", c.Body.Lookup("collection"))
		}
	}

	window := one(t, r.round, "window", isWindow)
	checkHint(t, "window", window, windowIndex)
	checkInt(t, "window limit", window.Body.Lookup("limit"), explainWindow)
	checkInt(t, "window batchSize", window.Body.Lookup("batchSize"), explainWindow+1)
	checkKeys(t, "window projection", window.Body.Lookup("projection"), "_id", "username", "createdAt")
	checkWindowFilter(t, filterOf(window.Body), false)
	for _, b := range list(filterOf(window.Body).Lookup("$or")) {
		nin := list(b.Document().Lookup("username", "$nin"))
		if len(nin) != 1 || nin[0].StringValue() != "held" {
			t.Errorf("window branch %s: $nin %v, want just the held user", b, nin)
		}
	}

	scan := one(t, r.round, "malformed scan", isMalformedScan)
	checkHint(t, "malformed scan", scan, windowIndex)
	checkInt(t, "malformed scan limit", scan.Body.Lookup("limit"), malformedScanLimit)
	checkKeys(t, "malformed scan projection", scan.Body.Lookup("projection"), "_id")
	if _, err := filterOf(scan.Body).LookupErr("createdAt"); err != nil {
		t.Errorf("malformed scan after a full window is not bounded by the window's end: %s", scan.Body)
	}

	leases := one(t, r.round, "lease read", func(c queryplan.Command) bool {
		cond, ok := filterOf(c.Body).Lookup("leaseUntil").DocumentOK()
		if !ok || c.Name != "find" {
			return false
		}
		_, err := cond.LookupErr("$gt")
		return err == nil // not the takeover's read of expired leases ($lte)
	})
	checkHint(t, "lease read", leases, idIndex)
	if n := len(list(filterOf(leases.Body).Lookup("_id", "$in"))); n != explainWindowUsers {
		t.Errorf("lease read asks for %d users, want the window's %d", n, explainWindowUsers)
	}

	absorb := one(t, r.round, "absorb", isAbsorb)
	checkHint(t, "absorb", absorb, absorbIndex)
	checkInt(t, "absorb limit", absorb.Body.Lookup("limit"), AbsorbLimit)
	if n := len(list(filterOf(absorb.Body).Lookup("username", "$in"))); n != explainRoom {
		t.Errorf("absorb asks for %d users, want the %d won", n, explainRoom)
	}

	// Acks: plain {_id} statements, except through a mongos (where the
	// suite may run), where they name their users.
	ackFields := []string{"_id"}
	if s.c.claimer.byUser.Load() {
		ackFields = append(ackFields, "username")
	}
	acks := statementsOf(t, r.settle, "delete", "score_events")
	acked := r.absorbed - len(r.res.works[len(r.res.works)-1].entries)
	if want := acked + len(r.res.malformed); len(acks) != want {
		t.Fatalf("%d delete statements on the queue, want one per acknowledged (%d) and dead-lettered (%d) entry", len(acks), acked, len(r.res.malformed))
	}
	for i, q := range acks {
		if i < len(r.res.malformed) {
			continue // dead letters first: malformed, their users unknown
		}
		checkKeys(t, "ack statement", q, ackFields...)
	}
	targeted := statementsOf(t, r.targeted, "delete", "score_events")
	for _, q := range targeted {
		checkKeys(t, "targeted ack statement", q, "_id", "username")
	}
	for _, c := range r.targeted {
		for _, st := range list(c.Body.Lookup("deletes")) {
			if h, _ := st.Document().Lookup("hint").StringValueOK(); h != IDIndex {
				t.Errorf("targeted ack statement %s does not hint the _id index", st)
			}
		}
	}
}

// TestTargetedDeleteShapes: statements that name their users match one
// entry each by _id and username, hinting _id; past maxIDStatements they are
// $in lists of one user each; entries of unknown users keep plain _id.
func TestTargetedDeleteShapes(t *testing.T) {
	t.Parallel()
	ids := bson.A{1, 2, 3}
	plain := deleteStatements(ids)
	named := deleteStatements(ids, "a", "", "b")
	if len(plain) != 3 || len(named) != 3 {
		t.Fatalf("%d and %d statements for 3 ids", len(plain), len(named))
	}
	wantNamed := []string{`{"_id":1,"username":"a"}`, `{"_id":2}`, `{"_id":3,"username":"b"}`}
	for i, m := range named {
		if got := filterJSON(t, m); got != wantNamed[i] {
			t.Errorf("statement %d: %s, want %s", i, got, wantNamed[i])
		}
	}
	many := make(bson.A, maxIDStatements+1)
	users := make([]string, len(many))
	for i := range many {
		many[i] = i
		users[i] = fmt.Sprintf("u%d", i%3)
	}
	lists := deleteStatements(many, users...)
	if len(lists) != 3 {
		t.Fatalf("%d ids of 3 users: %d statements, want one $in list per user", len(many), len(lists))
	}
	if len(deleteStatements(many)) != 1 {
		t.Errorf("%d ids without users: want one $in list", len(many))
	}
}

// TestTargetedAcksDeleteEveryEntryOnce acknowledges, with statements that
// name their users (as through a mongos), a firehose user's 1,500 entries
// and a few of other users: every entry goes, the ack counts each once.
func TestTargetedAcksDeleteEveryEntryOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names := []string{"a", "b", "c"}
	for range 1500 {
		names = append(names, "firehose")
	}
	b.enqueue(t, names...)
	c, m := b.newConsumer(t, newRecorder(nil), consumerOpts{})
	if err := c.claimer.detect(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.claimer.byUser.Store(true)
	res, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 4 {
		t.Fatalf("claim: %v, %d users", err, len(res.works))
	}
	for _, w := range res.works {
		c.held[w.lease.User] = w.lease
		c.acks.add(outcome{work: w})
	}
	if err := c.flushAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, b.colls.Queue, nil); n != 0 {
		t.Errorf("%d entries left", n)
	}
	if got := metrics.Read(m.EntriesAcked); got != 1503 {
		t.Errorf("acked %v, want 1503", got)
	}
}

// TestHotQueryPlans explains every command the claim path sent (the
// scenario above) on a real MongoDB, and fails when one does not use its
// index, sorts in memory where it should not, or examines more keys or
// documents than its bound.
func TestHotQueryPlans(t *testing.T) {
	t.Parallel()
	mongotest.RequireMongoDBURI(t)
	s := newHotScenario(t)
	mongotest.RequireMongoDB(t, s.b.db)
	checked := 0
	s.run(t, func(r *hotRound, cmds []queryplan.Command) {
		for _, c := range cmds {
			explained, err := queryplan.Explainable(c)
			if errors.Is(err, queryplan.ErrNotExplainable) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, cmd := range explained {
				p, err := queryplan.Explain(t.Context(), s.b.db, cmd)
				if err != nil {
					t.Fatal(err)
				}
				checkHotPlan(t, r, c.Collection, cmd, p)
				checked++
			}
		}
	})
	t.Logf("%d commands explained", checked)
}

// checkHotPlan holds one explained command to its index and bound (see
// docs/query-plans.md).
func checkHotPlan(t *testing.T, r *hotRound, coll string, cmd bson.D, p queryplan.Plan) {
	t.Helper()
	raw, _ := bson.Marshal(cmd)
	f := filterOf(raw)
	switch {
	case hasField(f, "_id"):
		n := int64(max(1, len(list(f.Lookup("_id", "$in")))))
		expectPlan(t, "by _id", raw, p, "_id_", 2*n+1, n, false)
	case coll != "score_events":
		t.Errorf("unexpected command %s", raw)
	case hasField(f, "username", "$not"):
		// The $not $regex is checked on each document: bounded by the
		// window's end, not covered.
		expectPlan(t, "malformed scan", raw, p, servertraits.IndexName(windowIndex), 2*explainHead+2, 2*explainHead+2, false)
	case hasField(f, "username", "$in"):
		// The users' scans merged in (createdAt, _id) order: no sort, no
		// document read, stopped by the limit.
		won := int64(len(r.res.works))
		expectPlan(t, "absorb", raw, p, servertraits.IndexName(absorbIndex), int64(r.absorbed)+2*won+1, 0, false)
		if !p.Covered() {
			t.Errorf("absorb: %v, want covered (no document read)", p)
		}
	default:
		// Three ranges of the index merged in order: every date, answered
		// from the keys, and the undated and non-date entries, whose
		// branches fetch what they hold (none here) and examine at most a
		// key each to find it so.
		expectPlan(t, "window", raw, p, servertraits.IndexName(windowIndex), 2*explainHead+3, 0, false)
		if !p.Has("SORT_MERGE") || p.DocsExamined != 0 {
			t.Errorf("window: %v, want the branches merged in order and no document read", p)
		}
	}
}

// TestWindowPlanWhenUsernameIsAnArray: one entry whose username is an array
// makes the window's index multikey for good. The window still uses it, in
// order, but can no longer be answered from the index alone: each key it
// passes costs a document read, up to the same bound.
func TestWindowPlanWhenUsernameIsAnArray(t *testing.T) {
	t.Parallel()
	mongotest.RequireMongoDBURI(t)
	s := newHotScenario(t)
	mongotest.RequireMongoDB(t, s.b.db)
	if _, err := s.b.colls.Queue.InsertOne(t.Context(), bson.D{{Key: "username", Value: bson.A{"a", "b"}}, {Key: "createdAt", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.claimer.readWindow(t.Context(), time.Now(), []string{"held"}); err != nil {
		t.Fatal(err)
	}
	window := one(t, s.rec.Take(), "window", isWindow)
	cmds, err := queryplan.Explainable(window)
	if err != nil {
		t.Fatal(err)
	}
	p, err := queryplan.Explain(t.Context(), s.b.db, cmds[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("window on a multikey index: %v", p)
	if !p.Uses(servertraits.IndexName(windowIndex)) || p.BlockingSort() || !p.MultiKey {
		t.Errorf("window: %v, want the window's index, multikey, in order", p)
	}
	if p.DocsExamined == 0 || p.DocsExamined > p.KeysExamined || p.KeysExamined > 2*explainHead+3 {
		t.Errorf("window: %v, want a document read per key passed, at most %d keys", p, 2*explainHead+3)
	}
}

func expectPlan(t *testing.T, what string, cmd bson.Raw, p queryplan.Plan, index string, maxKeys, maxDocs int64, sorts bool) {
	t.Helper()
	if !p.Uses(index) || p.CollScan() || p.BlockingSort() != sorts {
		t.Errorf("%s %s:\n  %v\n  want index %s, blocking sort %v", what, cmd, p, index, sorts)
	}
	if p.KeysExamined > maxKeys || p.DocsExamined > maxDocs {
		t.Errorf("%s %s:\n  %v\n  want at most %d keys and %d documents examined", what, cmd, p, maxKeys, maxDocs)
	}
}

func isWindow(c queryplan.Command) bool {
	return c.Name == "find" && c.Collection == "score_events" && !isMalformedScan(c) && !isAbsorb(c) && !hasField(filterOf(c.Body), "_id")
}

func isMalformedScan(c queryplan.Command) bool {
	return c.Name == "find" && hasField(filterOf(c.Body), "username", "$not")
}

func isAbsorb(c queryplan.Command) bool {
	return c.Name == "find" && hasField(filterOf(c.Body), "username", "$in")
}

func one(t *testing.T, cmds []queryplan.Command, what string, match func(queryplan.Command) bool) queryplan.Command {
	t.Helper()
	var found []queryplan.Command
	for _, c := range cmds {
		if match(c) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s commands among %d sent, want 1", len(found), what, len(cmds))
	}
	return found[0]
}

// filterOf is a find's filter or a write statement's q.
func filterOf(cmd bson.Raw) bson.Raw {
	if f, ok := cmd.Lookup("filter").DocumentOK(); ok {
		return f
	}
	for _, key := range []string{"deletes", "updates"} {
		if sts := list(cmd.Lookup(key)); len(sts) == 1 {
			q, _ := sts[0].Document().Lookup("q").DocumentOK()
			return q
		}
	}
	return nil
}

func statementsOf(t *testing.T, cmds []queryplan.Command, name, coll string) []bson.RawValue {
	t.Helper()
	var out []bson.RawValue
	for _, c := range cmds {
		if c.Name != name || c.Collection != coll {
			continue
		}
		for _, st := range list(c.Body.Lookup(name + "s")) {
			out = append(out, st.Document().Lookup("q"))
		}
	}
	return out
}

func hasField(doc bson.Raw, path ...string) bool {
	if doc == nil {
		return false
	}
	_, err := doc.LookupErr(path...)
	return err == nil
}

func list(v bson.RawValue) []bson.RawValue {
	a, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := a.Values()
	return vals
}

// checkHint holds a command to hinting index by its name (see hints).
func checkHint(t *testing.T, what string, c queryplan.Command, index bson.D) {
	t.Helper()
	if name, ok := c.Body.Lookup("hint").StringValueOK(); !ok || name != servertraits.IndexName(index) {
		t.Errorf("%s hint %s, want the name %q", what, c.Body.Lookup("hint"), servertraits.IndexName(index))
	}
}

func checkInt(t *testing.T, what string, v bson.RawValue, want int) {
	t.Helper()
	if n, ok := v.AsInt64OK(); !ok || n != int64(want) {
		t.Errorf("%s = %s, want %d", what, v, want)
	}
}

func checkKeys(t *testing.T, what string, v bson.RawValue, want ...string) {
	t.Helper()
	d, ok := v.DocumentOK()
	elems, _ := d.Elements()
	if !ok || len(elems) != len(want) {
		t.Errorf("%s %s, want the fields %v", what, v, want)
		return
	}
	for i, e := range elems {
		if e.Key() != want[i] {
			t.Errorf("%s %s, want the fields %v", what, v, want)
			return
		}
	}
}

func filterJSON(t *testing.T, m any) string {
	t.Helper()
	var f any
	switch x := m.(type) {
	case *mongo.DeleteOneModel:
		f = x.Filter
	default:
		t.Fatalf("statement %T", m)
	}
	raw, err := bson.MarshalExtJSON(f, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func concat[T any](parts ...[]T) []T {
	var out []T
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
