package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// testColls is a fresh database with the service's collections and indexes.
func testColls(t *testing.T, mon *event.CommandMonitor) Collections {
	t.Helper()
	db := mongotest.Database(t, mongotest.Options{Monitor: mon})
	cfg, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := Collections{DB: db, Scores: db.Collection(cfg.ScoresCollection), Collections: consumer.Collections{
		Queue: db.Collection(cfg.QueueCollection), Claims: db.Collection(cfg.ClaimsCollection), DeadLetter: db.Collection(cfg.DeadLetterCollection),
	}}
	if _, err := consumer.EnsureIndexes(t.Context(), c.Collections, discardLog()); err != nil {
		t.Fatal(err)
	}
	return c
}

func mustInsert(t *testing.T, c Collections, which string, docs ...any) {
	t.Helper()
	coll := map[string]*mongo.Collection{"queue": c.Queue, "claims": c.Claims, "dead": c.DeadLetter}[which]
	if _, err := coll.InsertMany(t.Context(), docs); err != nil {
		t.Fatalf("inserting into %s: %v", which, err)
	}
}

// populate writes a queue with a firehose user, a few others and garbage; a
// claims collection with held, backing-off and stale leases and a baseline
// document left by a 0.2.0 replica (its _id not a string, its leaseUntil an
// hour before its last write, as that release wrote it); and dead letters
// of two reasons.
func populate(t *testing.T, c Collections, now time.Time) {
	t.Helper()
	var q []any
	for i := range 30 {
		q = append(q, bson.D{{Key: "username", Value: "firehose"}, {Key: "createdAt", Value: now.Add(-time.Hour + time.Duration(i)*time.Second)}})
	}
	for _, u := range []string{"ann", "bo", "bo", "cy"} {
		q = append(q, bson.D{{Key: "username", Value: u}, {Key: "createdAt", Value: now.Add(-30 * time.Minute)}})
	}
	q = append(q,
		bson.D{{Key: "username", Value: 42}, {Key: "createdAt", Value: now.Add(-10 * time.Minute)}},
		bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(now.Add(-2 * time.Hour))}, {Key: "username", Value: "undated"}},
		bson.D{{Key: "username", Value: "fresh"}, {Key: "createdAt", Value: now.Add(-10 * time.Second)}},
	)
	mustInsert(t, c, "queue", q...)
	tok := "t1"
	mustInsert(t, c, "claims",
		bson.D{{Key: "_id", Value: "firehose"}, {Key: "token", Value: tok}, {Key: "owner", Value: "pod-a:1"}, {Key: "leaseUntil", Value: now.Add(20 * time.Minute)}, {Key: "attempts", Value: 0}, {Key: "claimedAt", Value: now.Add(-5 * time.Second)}},
		bson.D{{Key: "_id", Value: "ann"}, {Key: "token", Value: tok}, {Key: "owner", Value: "pod-a:1"}, {Key: "leaseUntil", Value: now.Add(10 * time.Minute)}, {Key: "attempts", Value: 0}, {Key: "claimedAt", Value: now.Add(-2 * time.Second)}},
		bson.D{{Key: "_id", Value: "dee"}, {Key: "token", Value: "t2"}, {Key: "owner", Value: "pod-b:7"}, {Key: "leaseUntil", Value: now.Add(20 * time.Minute)}, {Key: "attempts", Value: 1}, {Key: "claimedAt", Value: now}, {Key: "running", Value: true}},
		bson.D{{Key: "_id", Value: "bo"}, {Key: "token", Value: nil}, {Key: "owner", Value: "pod-b:7"}, {Key: "leaseUntil", Value: now.Add(15 * time.Minute)}, {Key: "attempts", Value: 2}, {Key: "lastError", Value: "scoring posts: timeout"}},
		bson.D{{Key: "_id", Value: "old"}, {Key: "token", Value: nil}, {Key: "owner", Value: "pod-b:7"}, {Key: "leaseUntil", Value: now.Add(-time.Hour)}, {Key: "attempts", Value: 1}},
		bson.D{{Key: "_id", Value: bson.D{{Key: "adaptiveBaseline", Value: "pod-a"}}}, {Key: "baselineSeconds", Value: 0.01}, {Key: "at", Value: now}, {Key: "leaseUntil", Value: now.Add(-time.Hour)}},
	)
	mustInsert(t, c, "dead",
		deadDoc("d1", "ann", "max_attempts", now.Add(-3*time.Hour)),
		deadDoc("d2", "bo", "max_attempts", now.Add(-2*time.Hour)),
		deadDoc("d3", 7, "malformed", now.Add(-time.Hour)),
	)
}

func deadDoc(id any, user any, reason string, at time.Time) bson.D {
	return bson.D{
		{Key: "_id", Value: id}, {Key: "username", Value: user}, {Key: "createdAt", Value: at.Add(-time.Minute)}, {Key: "payload", Value: "x"},
		{Key: "deadLetter", Value: bson.D{{Key: "reason", Value: reason}, {Key: "at", Value: at}, {Key: "attempts", Value: int32(5)}, {Key: "error", Value: "boom"}}},
	}
}

func TestStatusReportsQueueLeasesBackoffsAndDeadLetters(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	now := time.Now()
	populate(t, c, now)
	s, err := GatherStatus(t.Context(), c, StatusOptions{Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	if s.Queue.Depth != 37 || !s.Queue.DepthExact {
		t.Errorf("depth %d exact %v, want 37 exact", s.Queue.Depth, s.Queue.DepthExact)
	}
	if s.Queue.OldestCreatedAt == nil || s.Queue.OldestAgeSeconds < 7000 {
		t.Errorf("oldest %v (age %v): want the undated entry's ObjectId time, 2h ago", s.Queue.OldestCreatedAt, s.Queue.OldestAgeSeconds)
	}
	if s.Queue.PendingLastMinute != 1 {
		t.Errorf("pending last minute %d, want 1", s.Queue.PendingLastMinute)
	}
	top := s.TopUsers
	if !top.WholeQueue || top.Read != 37 || top.Malformed != 1 || len(top.Users) != 3 {
		t.Fatalf("top users %+v", top)
	}
	if u := top.Users[0]; u.Username != "firehose" || u.Entries != 30 || u.State != "held" || u.Owner != "pod-a:1" {
		t.Errorf("first top user %+v, want firehose with 30 entries held by pod-a:1", u)
	}
	if u := top.Users[1]; u.Username != "bo" || u.State != "backing_off" || u.Until == nil {
		t.Errorf("second top user %+v, want bo backing off", u)
	}
	if s.Leases.Held != 3 || len(s.Leases.Owners) != 2 || s.Leases.Owners[0].Owner != "pod-a:1" || s.Leases.Owners[0].Held != 2 {
		t.Errorf("leases %+v, want 3 held: 2 by pod-a:1, 1 by pod-b:7", s.Leases)
	}
	if s.Backoffs.Count != 1 || len(s.Backoffs.Users) != 1 || s.Backoffs.Users[0].LastError != "scoring posts: timeout" || s.Backoffs.Users[0].Attempts != 2 {
		t.Errorf("backoffs %+v, want bo alone (the baseline document and the stale lease are not backoffs)", s.Backoffs)
	}
	d := s.DeadLetters
	if d.Count != 3 || !d.WholeSet || len(d.ByReason) != 2 || d.ByReason[0].Reason != "max_attempts" || d.ByReason[0].Count != 2 {
		t.Fatalf("dead letters %+v", d)
	}
	if got := d.ByReason[0].NewestAt.Sub(d.ByReason[0].OldestAt); got < 59*time.Minute || got > 61*time.Minute {
		t.Errorf("max_attempts spans %v, want 1h", got)
	}
	if d.OldestAt == nil || d.NewestAt == nil || d.NewestAt.Sub(*d.OldestAt) < 119*time.Minute {
		t.Errorf("dead letters from %v to %v, want 2h apart", d.OldestAt, d.NewestAt)
	}
	if s.Rates != nil {
		t.Error("rates without --sample")
	}
	var out bytes.Buffer
	if err := WriteStatus(&out, s); err != nil {
		t.Fatal(err)
	}
	t.Logf("status:\n%s", out.String())
	for _, want := range []string{"firehose", "held by pod-a:1", "scoring posts: timeout", "max_attempts", "the whole queue"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestStatusWindowsAndThresholdsBoundTheReads makes the queue larger than
// the window and the exact-count threshold: the figures say they are a
// window and an estimate, and no read returns more than the window.
func TestStatusWindowsAndThresholdsBoundTheReads(t *testing.T) {
	t.Parallel()
	var cmds mongotest.Commands
	c := testColls(t, cmds.Monitor(nil))
	now := time.Now()
	populate(t, c, now)
	s, err := GatherStatus(t.Context(), c, StatusOptions{Top: 2, Window: 5, ExactLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if s.Queue.DepthExact || s.Queue.Depth < 11 {
		t.Errorf("depth %d exact %v: want an estimate past the threshold of 10", s.Queue.Depth, s.Queue.DepthExact)
	}
	if s.TopUsers.WholeQueue || s.TopUsers.Read != 5 {
		t.Errorf("top users read %d whole %v: want a window of 5", s.TopUsers.Read, s.TopUsers.WholeQueue)
	}
	if s.DeadLetters.Read != 3 || !s.DeadLetters.WholeSet {
		t.Errorf("dead letters read %d whole %v", s.DeadLetters.Read, s.DeadLetters.WholeSet)
	}
	maxDocs := 0
	for _, cmd := range cmds.All() {
		if batch, err := cmd.Reply.LookupErr("cursor", "firstBatch"); err == nil {
			vals, _ := batch.Array().Values()
			maxDocs = max(maxDocs, len(vals))
		}
	}
	if maxDocs > 5 {
		t.Errorf("a read returned %d documents, more than the window of 5", maxDocs)
	}
}

// TestStatusRatesFromTwoSamples changes the queue between the two samples:
// 4 arrivals, 3 removals of which 1 went to the dead letters.
func TestStatusRatesFromTwoSamples(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	now := time.Now()
	populate(t, c, now)
	wait := func(ctx context.Context) error {
		for range 4 {
			mustInsert(t, c, "queue", bson.D{{Key: "username", Value: "new"}, {Key: "createdAt", Value: time.Now().Add(time.Second)}})
		}
		res, err := c.Queue.DeleteMany(ctx, bson.D{{Key: "username", Value: "bo"}})
		if err != nil || res.DeletedCount != 2 {
			t.Fatalf("deleting bo's entries: %v", err)
		}
		if _, err := c.Queue.DeleteOne(ctx, bson.D{{Key: "username", Value: "cy"}}); err != nil {
			t.Fatal(err)
		}
		mustInsert(t, c, "dead", deadDoc("d4", "cy", "max_attempts", time.Now()))
		return nil
	}
	s, err := GatherStatus(t.Context(), c, StatusOptions{Sample: time.Millisecond, Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Rates
	if r == nil || r.Arrived != 4 || r.Removed != 3 || r.DeadLettered != 1 || r.Acked != 2 || !r.Exact {
		t.Fatalf("rates %+v, want 4 arrived, 3 removed, 1 dead-lettered, 2 acked", r)
	}
}

// TestStatusJSONSchema pins the --json document's top-level fields and
// version: dashboards and scripts parse it.
func TestStatusJSONSchema(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	populate(t, c, time.Now())
	s, err := GatherStatus(t.Context(), c, StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["schemaVersion"] != float64(1) || doc["kind"] != "status" {
		t.Errorf("schemaVersion %v kind %v", doc["schemaVersion"], doc["kind"])
	}
	want := map[string][]string{
		"queue":       {"collection", "depth", "depthExact", "oldestCreatedAt", "oldestAgeSeconds", "pendingLastMinute", "pendingLastMinuteExact"},
		"topUsers":    {"read", "wholeQueue", "malformed", "users"},
		"leases":      {"held", "truncated", "owners"},
		"backoffs":    {"count", "countExact", "users"},
		"deadLetters": {"collection", "count", "countExact", "oldestAt", "newestAt", "read", "wholeCollection", "byReason"},
	}
	for section, fields := range want {
		m, ok := doc[section].(map[string]any)
		if !ok {
			t.Errorf("no %q object", section)
			continue
		}
		for _, f := range fields {
			if _, ok := m[f]; !ok {
				t.Errorf("%s.%s missing", section, f)
			}
		}
	}
	if _, ok := doc["rates"]; !ok {
		t.Error("rates missing (null when not sampled)")
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestStatusRoundTripsDoNotGrowWithTheQueue counts the commands of one
// status (with rates) on a small queue and on one with ten times as many
// entries and users: the same fixed number.
func TestStatusRoundTripsDoNotGrowWithTheQueue(t *testing.T) {
	t.Parallel()
	var cmds mongotest.Commands
	c := testColls(t, cmds.Monitor(nil))
	populate(t, c, time.Now())
	measure := func() int {
		cmds.Reset()
		if _, err := GatherStatus(t.Context(), c, StatusOptions{Sample: time.Millisecond, Wait: func(context.Context) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, v := range mongotest.ByName(cmds.Take()) {
			n += v
		}
		return n
	}
	small := measure()
	var more []any
	for i := range 400 {
		more = append(more, bson.D{{Key: "username", Value: fmt.Sprintf("user%d", i)}, {Key: "createdAt", Value: time.Now().Add(-time.Minute)}})
	}
	mustInsert(t, c, "queue", more...)
	if large := measure(); large != small {
		t.Errorf("%d commands for 37 entries, %d for 437", small, large)
	}
	t.Logf("status with rates: %d round trips", small)
}
