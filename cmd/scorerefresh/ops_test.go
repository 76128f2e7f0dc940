package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// opsDB is a fresh database with a small queue, one held lease and dead
// letters of two reasons, and the environment that points the binary at it.
func opsDB(t *testing.T) (*mongo.Database, []string) {
	t.Helper()
	db := mongotest.Database(t, mongotest.Options{})
	ctx := t.Context()
	now := time.Now()
	var queue, dead []any
	for i := range 12 {
		queue = append(queue, bson.D{{Key: "username", Value: []string{"firehose", "firehose", "ann"}[i%3]}, {Key: "createdAt", Value: now.Add(-time.Duration(12-i) * time.Minute)}})
	}
	for i := range 5 {
		dead = append(dead, bson.D{{Key: "_id", Value: fmt.Sprintf("dl%d", i)}, {Key: "username", Value: fmt.Sprintf("u%d", i)}, {Key: "createdAt", Value: now.Add(-2 * time.Hour)},
			{Key: "deadLetter", Value: bson.D{{Key: "reason", Value: "max_attempts"}, {Key: "at", Value: now.Add(-time.Hour + time.Duration(i)*time.Second)}, {Key: "attempts", Value: int32(5)}, {Key: "error", Value: "scoring: timeout"}}}})
	}
	dead = append(dead, bson.D{{Key: "_id", Value: "bad"}, {Key: "username", Value: 7},
		{Key: "deadLetter", Value: bson.D{{Key: "reason", Value: "malformed"}, {Key: "at", Value: now.Add(-time.Hour)}, {Key: "error", Value: "username is a int32"}}}})
	for coll, docs := range map[string][]any{"score_events": queue, "score_events_dead": dead} {
		if _, err := db.Collection(coll).InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
	}
	lease := bson.D{{Key: "_id", Value: "firehose"}, {Key: "token", Value: "t"}, {Key: "owner", Value: "pod-a:1"}, {Key: "leaseUntil", Value: now.Add(20 * time.Minute)}, {Key: "attempts", Value: 0}}
	if _, err := db.Collection("score_claims").InsertOne(ctx, lease); err != nil {
		t.Fatal(err)
	}
	return db, []string{"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name()}
}

func runCmd(t *testing.T, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runWith(args, env, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestStatusCommand(t *testing.T) {
	t.Parallel()
	_, env := opsDB(t)
	code, out, errOut := runCmd(t, env, "", "status", "--json", "--sample", "0", "--top", "1")
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errOut)
	}
	var s struct {
		SchemaVersion int    `json:"schemaVersion"`
		Kind          string `json:"kind"`
		Queue         struct {
			Depth      int64 `json:"depth"`
			DepthExact bool  `json:"depthExact"`
		} `json:"queue"`
		TopUsers struct {
			Users []struct {
				Username, State, Owner string
				Entries                int
			} `json:"users"`
		} `json:"topUsers"`
		DeadLetters struct {
			ByReason []struct {
				Reason string
				Count  int
			} `json:"byReason"`
		} `json:"deadLetters"`
		Rates *struct{} `json:"rates"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	if s.SchemaVersion != 1 || s.Kind != "status" || s.Queue.Depth != 12 || !s.Queue.DepthExact || s.Rates != nil {
		t.Errorf("status: %+v", s)
	}
	if len(s.TopUsers.Users) != 1 || s.TopUsers.Users[0].Username != "firehose" || s.TopUsers.Users[0].Entries != 8 || s.TopUsers.Users[0].Owner != "pod-a:1" {
		t.Errorf("top users %+v, want firehose alone (--top 1), 8 entries, held by pod-a:1", s.TopUsers.Users)
	}
	if len(s.DeadLetters.ByReason) != 2 || s.DeadLetters.ByReason[0].Reason != "max_attempts" || s.DeadLetters.ByReason[0].Count != 5 {
		t.Errorf("dead letters by reason %+v", s.DeadLetters.ByReason)
	}
	code, out, _ = runCmd(t, env, "", "status", "--sample", "1ms")
	if code != 0 || !strings.Contains(out, "firehose") || !strings.Contains(out, "rates over") || !strings.Contains(out, "pod-a:1") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCmd(t, env, "", "status", "--top", "0"); code != 2 || !strings.Contains(errOut, "--top") {
		t.Errorf("status --top 0: exit %d, %s", code, errOut)
	}
}

func TestDeadLettersListShowRedrivePurge(t *testing.T) {
	t.Parallel()
	db, env := opsDB(t)
	code, out, errOut := runCmd(t, env, "", "deadletters", "list", "--json", "--reason", "max_attempts", "--limit", "2")
	var l struct {
		SchemaVersion int   `json:"schemaVersion"`
		Matching      int64 `json:"matching"`
		DeadLetters   []struct {
			ID, Reason string
		} `json:"deadLetters"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.SchemaVersion != 1 || l.Matching != 5 || len(l.DeadLetters) != 2 || l.DeadLetters[0].ID != "dl4" {
		t.Fatalf("list: exit %d %s\n%s", code, errOut, out)
	}
	if code, out, _ := runCmd(t, env, "", "deadletters", "list", "--since", "2h", "--user", "u1"); code != 0 || !strings.Contains(out, "dl1") || strings.Contains(out, "dl2") {
		t.Errorf("list --user u1: exit %d\n%s", code, out)
	}
	if code, out, _ := runCmd(t, env, "", "deadletters", "show", "bad"); code != 0 || !strings.Contains(out, `"malformed"`) {
		t.Errorf("show bad: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCmd(t, env, "", "deadletters", "show", "nope"); code != 1 || !strings.Contains(errOut, "no dead letter") {
		t.Errorf("show nope: exit %d %s", code, errOut)
	}

	code, out, errOut = runCmd(t, env, "", "deadletters", "redrive", "--batch", "2")
	if code != 0 || !strings.Contains(out, "5 requeued") || !strings.Contains(out, "skipped 1 malformed") {
		t.Fatalf("redrive: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "redrive: 2/5 (40%)") || !strings.Contains(errOut, "5/5 (100%)") {
		t.Errorf("redrive printed no progress lines on stderr:\n%s", errOut)
	}
	if n, _ := db.Collection("score_events").CountDocuments(t.Context(), bson.D{{Key: "redrive.reason", Value: "max_attempts"}}); n != 5 {
		t.Errorf("%d redriven entries in the queue, want 5", n)
	}
	if code, out, _ := runCmd(t, env, "", "deadletters", "redrive"); code != 0 || !strings.Contains(out, "redrove 0") {
		t.Errorf("second redrive: exit %d\n%s", code, out)
	}

	if code, _, errOut := runCmd(t, env, "", "deadletters", "purge"); code != 2 || !strings.Contains(errOut, "--all") {
		t.Errorf("purge without a filter: exit %d %s", code, errOut)
	}
	if code, _, errOut := runCmd(t, env, "", "deadletters", "purge", "--reason", "malformed"); code != 1 || !strings.Contains(errOut, "not confirmed") {
		t.Errorf("purge with no answer: exit %d %s", code, errOut)
	}
	code, out, errOut = runCmd(t, env, "yes\n", "deadletters", "purge", "--reason", "malformed")
	if code != 0 || !strings.Contains(out, "deleted 1") || !strings.Contains(errOut, "Type yes") {
		t.Errorf("purge answered yes: exit %d\n%s\n%s", code, out, errOut)
	}
	if n, _ := db.Collection("score_events_dead").CountDocuments(t.Context(), bson.D{}); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
}

func TestDoctorCommand(t *testing.T) {
	t.Parallel()
	db, env := opsDB(t)
	// Unindexed queue and no source collection: failures, exit 1.
	code, out, _ := runCmd(t, env, "", "doctor")
	if code != 1 || !strings.Contains(out, "fail") || !strings.Contains(out, "createIndex") {
		t.Errorf("doctor on an unprepared database: exit %d\n%s", code, out)
	}
	// Indexed as the service builds them (run creates them; the test builds
	// them the same way) with the source indexed: warnings only, exit 0.
	for coll, keys := range map[string]bson.D{
		"score_events":      {{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}},
		"score_claims":      {{Key: "leaseUntil", Value: 1}},
		"score_events_dead": {{Key: "deadLetter.at", Value: 1}},
		"user_activity":     {{Key: "username", Value: 1}, {Key: "at", Value: 1}},
	} {
		if _, err := db.Collection(coll).Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: keys}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Collection("score_events").Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: bson.D{{Key: "username", Value: 1}, {Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, env, "", "doctor", "--json", "--replicas", "3")
	var r struct {
		SchemaVersion      int `json:"schemaVersion"`
		Failures, Warnings int
		Checks             []struct{ Name, Status, Detail string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.SchemaVersion != 1 || r.Failures != 0 || r.Warnings == 0 {
		t.Fatalf("doctor --json on a prepared database: exit %d %s\n%s", code, errOut, out)
	}
	for _, c := range r.Checks {
		if c.Name == "connections" && !strings.Contains(c.Detail, "92") { // (3+1) × (16+5+2)
			t.Errorf("connections: %s, want the fleet's 92", c.Detail)
		}
	}
}

func TestOperatorCommandsNeverPrintThePassword(t *testing.T) {
	t.Parallel()
	env := []string{"MONGODB_URI=mongodb://app:hunter2@127.0.0.1:1/?serverSelectionTimeoutMS=200"}
	for _, args := range [][]string{{"status", "--sample", "0"}, {"doctor"}, {"deadletters", "list"}} {
		var stdout, stderr bytes.Buffer
		code := runWith(args, env, strings.NewReader(""), &stdout, &stderr)
		if code == 0 || strings.Contains(stdout.String()+stderr.String(), "hunter2") {
			t.Errorf("%v: exit %d, output:\n%s%s", args, code, stdout.String(), stderr.String())
		}
	}
}

// TestDeadLettersJSONAndSafetyFlags pins the documented --json fields of
// list, redrive and purge, and checks that --dry-run writes nothing and
// --yes skips the question.
func TestDeadLettersJSONAndSafetyFlags(t *testing.T) {
	t.Parallel()
	db, env := opsDB(t)
	jsonDoc := func(args ...string) map[string]any {
		t.Helper()
		code, out, errOut := runCmd(t, env, "", args...)
		var doc map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil {
			t.Fatalf("%v: exit %d %s\n%s", args, code, errOut, out)
		}
		return doc
	}
	hasKeys := func(what string, doc map[string]any, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, ok := doc[k]; !ok {
				t.Errorf("%s: no %q in %v", what, k, doc)
			}
		}
	}
	l := jsonDoc("deadletters", "list", "--json", "--reason", "malformed")
	hasKeys("list", l, "schemaVersion", "kind", "filter", "matching", "matchingExact", "limit", "deadLetters")
	rows, _ := l["deadLetters"].([]any)
	if l["kind"] != "deadletters.list" || len(rows) != 1 {
		t.Fatalf("list: %v", l)
	}
	row := rows[0].(map[string]any)
	hasKeys("list row", row, "id", "username", "usernameNote", "createdAt", "reason", "at", "attempts", "error")
	if row["username"] != nil {
		t.Errorf("a username that is not a string lists as %v, want null", row["username"])
	}

	r := jsonDoc("deadletters", "redrive", "--json", "--dry-run", "--reason", "max_attempts")
	hasKeys("redrive", r, "schemaVersion", "kind", "dryRun", "filter", "total", "read", "requeued", "alreadyQueued", "removed", "conflicts", "failed", "problems", "skipped", "batches")
	if r["kind"] != "deadletters.redrive" || r["dryRun"] != true || r["requeued"] != float64(5) {
		t.Errorf("redrive --dry-run: %v", r)
	}
	p := jsonDoc("deadletters", "purge", "--json", "--dry-run", "--reason", "max_attempts")
	hasKeys("purge", p, "schemaVersion", "kind", "dryRun", "filter", "matching", "deleted")
	if p["kind"] != "deadletters.purge" || p["matching"] != float64(5) || p["deleted"] != float64(0) {
		t.Errorf("purge --dry-run: %v", p)
	}
	for coll, want := range map[string]int64{"score_events": 12, "score_events_dead": 6} {
		if n, err := db.Collection(coll).CountDocuments(t.Context(), bson.D{}); err != nil || n != want {
			t.Errorf("after the dry runs %s holds %d (%v), want %d", coll, n, err, want)
		}
	}

	code, out, errOut := runCmd(t, env, "", "deadletters", "purge", "--json", "--yes", "--user", "u1", "--until", "30m")
	if code != 0 || strings.Contains(errOut, "Type yes") || !strings.Contains(out, `"deleted": 1`) {
		t.Errorf("purge --yes: exit %d\n%s\n%s", code, out, errOut)
	}
	if n, _ := db.Collection("score_events_dead").CountDocuments(t.Context(), bson.D{{Key: "_id", Value: "dl1"}}); n != 0 {
		t.Error("purge --yes --user u1 left u1's dead letter")
	}
}
