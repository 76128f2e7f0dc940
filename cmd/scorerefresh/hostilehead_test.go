package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.yaml.in/yaml/v3"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// hostileHeadCommand reproduces the figures docs/dead-letters.md gives.
const hostileHeadCommand = "go test ./cmd/scorerefresh/ -run TestHostileHeadDrainsInAPod -v -timeout 30m"

// hostileHeadEnv sets how many of the 30 hostile entries the test puts at
// the head (default defaultHostileHead). The embedded server reads every
// document of a collection for any query but one by _id, about 25 s for
// 30 of these documents on the 2-core test machine, which is past the
// service's 30 s deadline for a claim round (docs/dead-letters.md): all 30
// are for a real MongoDB (TEST_MONGODB_URI), or to see that limit.
const hostileHeadEnv = "SCOREREFRESH_HOSTILE_HEAD"

const defaultHostileHead = 6

const mib = 1 << 20

// Sizes of the hostile documents: whole ones fit in a dead letter with
// their deadLetter subdocument, near-limit ones (just under MongoDB's
// 16 MiB document limit) do not and are kept in reduced form.
const (
	wholeBytes     = 15*mib + 3*mib/4
	payloadBytes   = 15 * mib
	nearLimitBytes = 16*mib - 1024
)

// TestHostileHeadDrainsInAPod runs the production binary with the
// Deployment's settings (its environment, its rules file, GOMEMLIMIT) on a
// queue whose head holds documents of 15 to 16 MiB a hostile producer could
// write, ahead of 300 ordinary entries. The head is taken in turn from
// three kinds of ten (SCOREREFRESH_HOSTILE_HEAD of them, all 30 at most):
//
//   - usernames of 15 down to 1.5 MiB, padded to 15.75 MiB or to just under
//     16 MiB: dead-lettered, whole or in reduced form (too_large);
//   - a username that is absent or looks normal but is not valid (a string
//     createdAt that sorts before every date, missing, not UTF-8, 257 bytes,
//     array, number, null, document, empty, no createdAt beside a string _id),
//     each with a 15 MiB payload: dead-lettered whole as malformed;
//   - valid entries of just under 16 MiB (a huge extra field, string or
//     binary, beside a proper username): their users refreshed, the entries
//     acknowledged.
//
// Everything must drain: every ordinary and valid entry acknowledged with
// exact scores, every hostile one dead-lettered with its reason, nothing
// left queued, /healthz answering all along; and the process's peak
// resident memory (VmHWM, read before it stops) must stay under the
// container's memory limit.
//
// Not parallel: it moves hundreds of megabytes through the embedded server,
// which runs in this test process (so this process's memory is not the one
// measured, and it grows well past the pod's limit).
func TestHostileHeadDrainsInAPod(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("moves hundreds of megabytes through the embedded server; run " + hostileHeadCommand)
	}
	pod := readPod(t, "deploy/k8s/deployment.yaml", "scorerefresh")
	w := newUntimedWorld(t)
	head := hostileHead()[:hostileHeadSize(t)]
	began := time.Now()
	sizes := w.seedHostile(head)
	w.seed(300, 100)
	t.Logf("seeded %d hostile entries (%d MiB) and 300 ordinary ones in %v", len(head), sumOf(sizes)/mib, time.Since(began).Round(time.Second))

	p := startProc(t, "pod", append(w.env, pod.env...)...)
	began = time.Now()
	acked, dead := 300.0, 0.0
	for _, e := range head {
		if e.reason == "" {
			acked++
		} else {
			dead++
		}
	}
	// Every entry acknowledged or dead-lettered, whichever it was; the
	// checks below say whether each went the right way.
	w.awaitMetrics(p, 45*time.Minute, func(body string) bool {
		return sampleSum(body, "scorerefresh_entries_acked_total", "")+
			sampleSum(body, "scorerefresh_entries_deadlettered_total", "") >= acked+dead
	})
	drained := time.Since(began)
	hwm := vmHWM(t, p)
	body, err := scrape(p)
	if err != nil {
		t.Fatalf("scraping the pod: %v", err)
	}
	p.stop()
	t.Logf("drained in %v; peak RSS (VmHWM) %.1f MiB, limit %d MiB, GOMEMLIMIT=%s",
		drained.Round(time.Second), float64(hwm)/mib, pod.memoryLimit/mib, pod.goMemLimit)
	if hwm >= pod.memoryLimit {
		t.Errorf("peak RSS %d bytes is not under the pod's memory limit of %d: the pod would be OOM-killed", hwm, pod.memoryLimit)
	}
	checkDrainCounters(t, body, acked, head)
	if n := w.count("score_events"); n != 0 {
		t.Errorf("%d entries still queued", n)
	}
	if n := w.count("score_claims"); n != 0 {
		t.Errorf("%d leases left after a graceful stop", n)
	}
	w.checkDeadLetters(head, sizes)
	w.verifyScores()
}

// hostileHeadSize reads SCOREREFRESH_HOSTILE_HEAD.
func hostileHeadSize(t *testing.T) int {
	t.Helper()
	v := os.Getenv(hostileHeadEnv)
	if v == "" {
		return defaultHostileHead
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 30 {
		t.Fatalf("%s=%q: want a number of entries from 1 to 30", hostileHeadEnv, v)
	}
	return n
}

// hostileEntry is one document of the hostile head.
type hostileEntry struct {
	id     string
	user   any  // the username field's value; absent when nil and !null
	null   bool // username: null
	extra  bson.D
	size   int    // the document's size in bytes, padded with a payload
	reason string // the dead letter's reason; "" for a valid entry
	binary bool   // pad with binary data rather than a string
	noDate bool   // no createdAt at all
}

// hostileHead is the 30 entries, interleaved so that every kind sits
// among the others.
func hostileHead() []hostileEntry {
	var huge, bad, valid []hostileEntry
	for i := range 10 {
		size, reason := wholeBytes, metrics.ReasonMalformed
		if i%2 == 1 {
			size, reason = nearLimitBytes, metrics.ReasonTooLarge
		}
		huge = append(huge, hostileEntry{
			id:   fmt.Sprintf("huge-username-%02d", i),
			user: strings.Repeat(string(rune('a'+i)), (10-i)*3*mib/2), size: size, reason: reason,
		})
	}
	invalid := []hostileEntry{
		{id: "string-createdAt", user: "user 003", extra: bson.D{{Key: "createdAt", Value: "0000-00-00"}}},
		{id: "no-username"},
		{id: "non-utf8-username", user: "user \xff\xfe"},
		{id: "257-byte-username", user: "user 001" + strings.Repeat("x", 249)},
		{id: "array-username", user: bson.A{"user 001"}},
		{id: "number-username", user: int32(1)},
		{id: "null-username", null: true},
		{id: "document-username", user: bson.D{{Key: "name", Value: "user 002"}}},
		{id: "empty-username", user: ""},
		{id: "no-createdAt", user: "user 004", noDate: true},
	}
	for _, e := range invalid {
		e.size, e.reason = payloadBytes, metrics.ReasonMalformed
		bad = append(bad, e)
	}
	for i := range 10 {
		// Half of them belong to users with ordinary entries behind them,
		// half to users this entry alone announces.
		user := fmt.Sprintf("user %03d", i)
		if i >= 5 {
			user = fmt.Sprintf("lone %03d", i)
		}
		valid = append(valid, hostileEntry{id: fmt.Sprintf("valid-near-limit-%02d", i), user: user, size: nearLimitBytes, binary: i%2 == 1})
	}
	var head []hostileEntry
	for i := range 10 {
		head = append(head, huge[i], bad[i], valid[i])
	}
	return head
}

// doc builds e's document, created at createdAt, padded to e.size.
func (e hostileEntry) doc(t *testing.T, createdAt time.Time) bson.D {
	t.Helper()
	d := bson.D{{Key: "_id", Value: e.id}}
	if !e.noDate && !hasKey(e.extra, "createdAt") {
		d = append(d, bson.E{Key: "createdAt", Value: createdAt})
	}
	if e.user != nil || e.null {
		d = append(d, bson.E{Key: "username", Value: e.user})
	}
	d = append(d, e.extra...)
	pad := e.size - bsonLen(t, append(d, bson.E{Key: "payload", Value: ""}))
	if e.binary {
		pad = e.size - bsonLen(t, append(d, bson.E{Key: "payload", Value: bson.Binary{Data: []byte{}}}))
		return append(d, bson.E{Key: "payload", Value: bson.Binary{Data: make([]byte, pad)}})
	}
	return append(d, bson.E{Key: "payload", Value: strings.Repeat("p", pad)})
}

func hasKey(d bson.D, key string) bool {
	for _, e := range d {
		if e.Key == key {
			return true
		}
	}
	return false
}

func bsonLen(t *testing.T, d bson.D) int {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return len(raw)
}

func sumOf(sizes map[string]int) int {
	n := 0
	for _, s := range sizes {
		n += s
	}
	return n
}

// newUntimedWorld is newWorld on a client without the suite's 30-second
// operation timeout: the embedded server takes seconds per 16 MiB document.
// Its processes poll at the service's default interval, as the pod does.
func newUntimedWorld(t *testing.T) *world {
	t.Helper()
	uri := mongotest.URI(t)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	db := client.Database(mongotest.DatabaseName(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	return &world{t: t, db: db, env: []string{"MONGODB_URI=" + uri, "MONGODB_DATABASE=" + db.Name()}}
}

// seedHostile builds the queue's indexes, as the first deployment does,
// then inserts head (the oldest entries of the queue, in order), each
// document built only when inserted. It writes activity for the users of
// the valid entries and returns the documents' sizes by _id.
//
// One insert at a time: the embedded server's SQLite takes one writer, and
// concurrent inserts fail with "database is locked" (SQLITE_BUSY) rather
// than wait, so inserting in parallel would gain nothing.
func (w *world) seedHostile(head []hostileEntry) map[string]int {
	t := w.t
	t.Helper()
	ctx := t.Context()
	colls := consumer.Collections{Queue: w.db.Collection("score_events"), Claims: w.db.Collection("score_claims"), DeadLetter: w.db.Collection("score_events_dead")}
	if _, err := consumer.EnsureIndexes(ctx, colls, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("building the indexes: %v", err)
	}
	var activity []any
	for i, e := range head {
		if e.reason == "" {
			activity = append(activity, bson.D{{Key: "username", Value: e.user}, {Key: "points", Value: 10 + i}, {Key: "at", Value: time.Now()}})
		}
	}
	if _, err := w.db.Collection("user_activity").InsertMany(ctx, activity); err != nil {
		t.Fatal(err)
	}
	oldest := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	bySize := make(map[string]int, len(head))
	for i, e := range head {
		d := e.doc(t, oldest.Add(time.Duration(i)*time.Millisecond))
		bySize[e.id] = bsonLen(t, d)
		if _, err := colls.Queue.InsertOne(ctx, d); err != nil {
			t.Fatalf("inserting %s: %v", e.id, err)
		}
		if u, ok := e.user.(string); ok && !utf8.ValidString(u) {
			head[i].reason = w.storedUTF8(e.id, metrics.ReasonMalformed)
		}
	}
	return bySize
}

// storedUTF8 is the reason to expect for the entry id written with a
// username that is not UTF-8: reason if the server stored it as written,
// none (a valid entry) if it stored valid UTF-8 instead, as the embedded
// server does (its storage is JSON text, which replaces such bytes with
// U+FFFD).
func (w *world) storedUTF8(id, reason string) string {
	t := w.t
	t.Helper()
	var stored struct {
		User string `bson:"username"`
	}
	err := w.db.Collection("score_events").FindOne(t.Context(), bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: "username", Value: 1}})).Decode(&stored)
	if err != nil {
		t.Fatalf("reading back %s: %v", id, err)
	}
	if utf8.ValidString(stored.User) {
		t.Logf("%s: the server stored the username as %q, valid UTF-8: the entry is valid", id, stored.User)
		return ""
	}
	return reason
}

// awaitMetrics polls p's metrics until done says so, failing when p exits
// or after timeout. It polls the process rather than the collections:
// counting a queue of hundreds of megabytes makes the embedded server read
// every document of it, competing with the consumer for the same server.
func (w *world) awaitMetrics(p *proc, timeout time.Duration, done func(body string) bool) {
	t := w.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	unhealthy := 0
	for {
		body, err := scrape(p)
		if err == nil && done(body) {
			break
		}
		if p.status("/healthz") != 200 {
			unhealthy++
		}
		select {
		case err := <-p.done:
			t.Fatalf("the pod exited while draining: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained within %v; last metrics:\n%s", timeout, grepMetrics(body, "scorerefresh_entries_", "scorerefresh_claim_errors", "scorerefresh_ack_flush_errors"))
		}
	}
	if unhealthy > 0 {
		t.Errorf("/healthz failed %d times while draining: the liveness probe would have restarted the pod", unhealthy)
	}
}

// grepMetrics keeps the sample lines of body that start with a prefix.
func grepMetrics(body string, prefixes ...string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}

// checkDrainCounters checks the pod's own account of the drain: exactly
// the entries acknowledged and dead-lettered that should be, per reason,
// and no refresh failed.
func checkDrainCounters(t *testing.T, body string, acked float64, head []hostileEntry) {
	t.Helper()
	want := map[string]float64{}
	for _, e := range head {
		if e.reason != "" {
			want[e.reason]++
		}
	}
	if got := sampleSum(body, "scorerefresh_entries_acked_total", ""); got != acked {
		t.Errorf("scorerefresh_entries_acked_total = %v, want %v", got, acked)
	}
	for _, r := range []string{metrics.ReasonMalformed, metrics.ReasonTooLarge, metrics.ReasonMaxAttempts} {
		if got := sampleSum(body, "scorerefresh_entries_deadlettered_total", `reason="`+r+`"`); got != want[r] {
			t.Errorf("scorerefresh_entries_deadlettered_total{reason=%q} = %v, want %v", r, got, want[r])
		}
	}
	if got := sampleSum(body, "scorerefresh_refreshes_total", `outcome="error"`); got != 0 {
		t.Errorf("%v refreshes failed, want none", got)
	}
	t.Logf("errors counted on the way (retried, nothing lost): claim rounds %v, ack flushes %v",
		sampleSum(body, "scorerefresh_claim_errors_total", ""), sampleSum(body, "scorerefresh_ack_flush_errors_total", ""))
}

// checkDeadLetters checks that the dead letters are exactly the hostile
// entries, each with its reason, a reduced one with its original's size.
func (w *world) checkDeadLetters(head []hostileEntry, sizes map[string]int) {
	t := w.t
	t.Helper()
	want := map[string]hostileEntry{}
	for _, e := range head {
		if e.reason != "" {
			want[e.id] = e
		}
	}
	// Only the verdicts: the letters themselves are megabytes each.
	cur, err := w.db.Collection("score_events_dead").Find(t.Context(), bson.D{}, options.Find().SetProjection(bson.D{{Key: "deadLetter", Value: 1}}))
	if err != nil {
		t.Fatalf("reading the dead letters: %v", err)
	}
	var letters []struct {
		ID any `bson:"_id"`
		V  struct {
			Reason         string `bson:"reason"`
			OriginalReason string `bson:"originalReason"`
			OriginalSize   int64  `bson:"originalSize"`
			Error          string `bson:"error"`
		} `bson:"deadLetter"`
	}
	if err := cur.All(t.Context(), &letters); err != nil {
		t.Fatalf("reading the dead letters: %v", err)
	}
	for _, l := range letters {
		id, _ := l.ID.(string)
		e, ok := want[id]
		if !ok {
			t.Errorf("unexpected dead letter %.60v (%s: %s)", l.ID, l.V.Reason, l.V.Error)
			continue
		}
		delete(want, id)
		if l.V.Reason != e.reason || l.V.Error == "" {
			t.Errorf("%s: deadLetter.reason = %q (error %q), want %q with an error", id, l.V.Reason, l.V.Error, e.reason)
		}
		if e.reason == metrics.ReasonTooLarge && (l.V.OriginalReason != metrics.ReasonMalformed || l.V.OriginalSize != int64(sizes[id])) {
			t.Errorf("%s: reduced form says originalReason %q, originalSize %d; want malformed, %d", id, l.V.OriginalReason, l.V.OriginalSize, sizes[id])
		}
	}
	for id := range want {
		t.Errorf("%s: not dead-lettered", id)
	}
}

// vmHWM is p's peak resident set size in bytes, from /proc (Linux).
func vmHWM(t *testing.T, p *proc) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading the pod's peak memory: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	return 0
}

// pod is what the test takes from the Deployment's container.
type pod struct {
	env         []string // its literal environment, pointed at this test's server
	memoryLimit int64    // resources.limits.memory, in bytes
	goMemLimit  string   // its GOMEMLIMIT
}

// readPod reads the container named container of the Deployment manifest
// rel (relative to the repository root). Variables that point somewhere
// (the MongoDB URI from a secret, the database, the metrics address) are
// left to the test; the rules file is the one the manifest's ConfigMap is
// generated from.
func readPod(t *testing.T, rel, container string) pod {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name string `yaml:"name"`
						Env  []struct {
							Name  string  `yaml:"name"`
							Value *string `yaml:"value"`
						} `yaml:"env"`
						Resources struct {
							Limits map[string]string `yaml:"limits"`
						} `yaml:"resources"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != container {
			continue
		}
		var p pod
		if p.memoryLimit, err = parseQuantity(c.Resources.Limits["memory"]); err != nil {
			t.Fatalf("%s: the container's memory limit: %v", rel, err)
		}
		for _, e := range c.Env {
			switch {
			case e.Value == nil, e.Name == "MONGODB_DATABASE", e.Name == "METRICS_ADDR":
				continue
			case e.Name == "SCORING_RULES":
				p.env = append(p.env, "SCORING_RULES="+filepath.Join(root, "deploy", "k8s", "rules", "rules.yaml"))
			default:
				p.env = append(p.env, e.Name+"="+*e.Value)
			}
			if e.Name == "GOMEMLIMIT" {
				p.goMemLimit = *e.Value
			}
		}
		if p.goMemLimit == "" {
			t.Fatalf("%s: container %s sets no GOMEMLIMIT", rel, container)
		}
		return p
	}
	t.Fatalf("%s: no container %s", rel, container)
	return pod{}
}

// parseQuantity reads a Kubernetes memory quantity of the forms manifests
// use (512Mi, 1Gi, 500M, 536870912) as bytes.
func parseQuantity(q string) (int64, error) {
	units := []struct {
		suffix string
		factor int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}}
	factor, digits := int64(1), q
	for _, u := range units {
		if s, ok := strings.CutSuffix(q, u.suffix); ok {
			factor, digits = u.factor, s
			break
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a memory quantity this test reads", q)
	}
	return n * factor, nil
}
