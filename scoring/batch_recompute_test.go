package scoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

func TestChunkUsers(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100)
	tests := map[string]struct {
		users              []string
		maxUsers, maxBytes int
		want               [][]string
	}{
		"empty":                {nil, 2, 1000, nil},
		"under both limits":    {[]string{"a", "b"}, 2, 1000, [][]string{{"a", "b"}}},
		"by count":             {[]string{"a", "b", "c", "d", "e"}, 2, 1000, [][]string{{"a", "b"}, {"c", "d"}, {"e"}}},
		"by bytes":             {[]string{"a", "b", "c"}, 10, 2 * (1 + batchNameOverhead), [][]string{{"a", "b"}, {"c"}}},
		"a long name is alone": {[]string{"a", long, "b"}, 10, 50, [][]string{{"a"}, {long}, {"b"}}},
	}
	for name, tc := range tests {
		if got := chunkUsers(tc.users, tc.maxUsers, tc.maxBytes); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: chunkUsers = %q, want %q", name, got, tc.want)
		}
	}
	if got := uniqueUsers([]string{"b", "a", "b", "", "a", ""}); !slices.Equal(got, []string{"b", "a", ""}) {
		t.Errorf("uniqueUsers = %q", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger shared by goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// batchUsers returns n usernames, u00, u01, ...
func batchUsers(n int) []string {
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("u%02d", i)
	}
	return users
}

// TestRefreshBatchRoundTrips counts the commands a batch sends with the
// driver's command monitor: one per batched component plus the score read and
// the bulk write. A component the server cannot batch costs one per user, and
// learning that costs one refused command, once per Recomputer; avg without
// $avg costs two aggregations per batch. The expected count is derived from
// what the Recomputer detected. The first round also learns each source
// collection's collation, once.
func TestRefreshBatchRoundTrips(t *testing.T) {
	t.Parallel()
	const n = 10
	comp := func(name, coll string, op Op, window time.Duration) Component {
		return Component{Name: name, Collection: coll, UserField: "username", Op: op, Field: "p", Weight: 1, TimeField: "at", Window: window}
	}
	batchable := []Component{ // every server has what these need
		comp("s", "src", OpSum, time.Hour), comp("c", "src", OpCount, 0),
		comp("d", "other", OpDistinct, 0), comp("dw", "src", OpDistinct, time.Hour),
	}
	filtered := comp("sf", "src", OpSum, time.Hour)
	filtered.Filter = bson.D{{Key: "p", Value: bson.D{{Key: "$in", Value: bson.A{int32(1), int32(2)}}}}}
	tests := map[string]struct {
		comps []Component
		users []string
	}{
		"batchable only":                 {comps: batchable, users: batchUsers(n)},
		"with max":                       {comps: append(slices.Clone(batchable), comp("m", "other", OpMax, 0)), users: batchUsers(n)},
		"with min and avg":               {comps: []Component{comp("mn", "other", OpMin, 0), comp("a", "src", OpAvg, time.Hour), comp("a2", "other", OpAvg, 0)}, users: batchUsers(n)},
		"with a filter":                  {comps: []Component{filtered, batchable[1]}, users: batchUsers(n)},
		"more users than one batch":      {comps: batchable[:1], users: batchUsers(MaxBatchUsers + 6)},
		"repeated users count once each": {comps: batchable[:2], users: append(batchUsers(3), batchUsers(3)...)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			log := &commandLog{db: "not yet"}
			db := mongotest.Database(t, mongotest.Options{Monitor: log.monitor()})
			log.mu.Lock()
			log.db = db.Name()
			log.mu.Unlock()
			users := uniqueUsers(tc.users)
			for i, u := range users {
				insertDocs(t, db.Collection("src"), bson.D{{Key: "username", Value: u}, {Key: "p", Value: int32(i)}, {Key: "at", Value: refreshStart}})
				insertDocs(t, db.Collection("other"), bson.D{{Key: "username", Value: u}, {Key: "p", Value: int32(i % 3)}})
			}
			var logs syncBuffer
			rules := &Rules{Components: tc.comps}
			rec := NewRecomputer(db, rules, WithRecomputerLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
			var stats []RefreshStats
			store := NewStore(db.Collection("user_scores"), StoreConfig{})
			// What the server is, learnt once per process: not a batch's.
			if err := store.cfg.Traits.Probe(context.Background(), db); err != nil {
				t.Fatal(err)
			}
			r := NewRefresher(rec, store, WithRefreshObserver(func(s RefreshStats) { stats = append(stats, s) }))
			log.take()

			chunks := len(chunkUsers(uniqueUsers(users), MaxBatchUsers, maxBatchNameBytes))
			for round := range 2 {
				learnt := map[Op]bool{}
				for _, op := range []Op{OpMax, OpMin, OpAvg} {
					learnt[op] = rec.lacksAccumulator(op).Load()
				}
				for u, err := range r.RefreshBatch(context.Background(), tc.users, refreshStart.Add(time.Duration(round)*time.Second)) {
					if err != nil {
						t.Fatalf("round %d: RefreshBatch: %s: %v", round, u, err)
					}
				}
				want := 0
				if round == 0 {
					want += len(rules.Collections()) // listCollections, once each
				}
				for _, c := range tc.comps {
					lacks := rec.lacksAccumulator(c.Op)
					if lacks != nil && lacks.Load() && !learnt[c.Op] {
						want++ // the refused accumulator, once
						learnt[c.Op] = true
					}
					switch {
					case (c.Op == OpMax || c.Op == OpMin) && lacks.Load():
						want += len(users) // a sorted find per user
					case c.Op == OpAvg && lacks.Load():
						want += 2 * chunks // a $sum and a count
					default:
						want += chunks
					}
				}
				want += 2 * chunks // score read + bulk write
				got := log.take()
				if len(got) != want {
					t.Errorf("round %d: sent %d commands %v, want %d (%d components, %d users, lacking $max %v, $min %v, $avg %v)", round, len(got), got, want, len(tc.comps), len(users),
						rec.lacksAccumulator(OpMax).Load(), rec.lacksAccumulator(OpMin).Load(), rec.lacksAccumulator(OpAvg).Load())
				}
				for _, name := range got {
					if !slices.Contains([]string{"aggregate", "find", "update", "insert", "listCollections"}, name) {
						t.Errorf("round %d: sent a %q command, want only aggregate, find, update, insert and listCollections", round, name)
					}
				}
				if last := stats[len(stats)-1]; last.Users != len(users) || last.RoundTrips != len(got) {
					t.Errorf("round %d: observed %+v, want %d users and the %d commands sent", round, last, len(users), len(got))
				}
			}
			for _, op := range []Op{OpMax, OpMin, OpAvg} {
				lacking := rec.lacksAccumulator(op).Load()
				if lines := strings.Count(logs.String(), "lacks the $"+string(op)+" "); lacking != (lines == 1) {
					t.Errorf("$%s lacking: %v, but %d log lines about it:\n%s", op, lacking, lines, logs.String())
				}
			}
			for _, u := range users {
				want, err := rec.Recompute(context.Background(), u, refreshStart.Add(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				doc, found, err := NewStore(db.Collection("user_scores"), StoreConfig{}).Get(context.Background(), u)
				if err != nil || !found || doc.Version != 2 || doc.Score != want.Score || !reflect.DeepEqual(doc.Components, want.Components) {
					t.Errorf("score document of %q = %+v (found %v, %v), want version 2 with %+v", u, doc, found, err, want)
				}
			}
		})
	}
}

// randomSources returns documents for "events" and "posts", of users and of
// decoys, in every shape the rules must cope with.
func randomSources(rng *rand.Rand, users []string) map[string][]bson.D {
	out := map[string][]bson.D{}
	decoys := []any{"zzz", "other", nil, "U00", bson.A{"zzz"}}
	// Arrays in the user field name only u1 and u2 (and decoys), so the
	// other users go through the batched queries, these two through the
	// per-user fallback.
	arrays := []string{"u1", "u2"}
	pick := func() any {
		switch r := rng.IntN(40); {
		case r < 33:
			return users[rng.IntN(len(users))]
		case r < 38:
			return decoys[rng.IntN(len(decoys))]
		case r < 39:
			return bson.A{arrays[rng.IntN(2)], "zzz"}
		default: // (FerretDB 1.24 stores no arrays directly in arrays)
			return bson.A{"u1", "u2"}
		}
	}
	value := func() (any, bool) {
		k := rng.IntN(9) - 3
		switch rng.IntN(12) {
		case 0:
			return int32(k), true
		case 1:
			return int64(k), true
		case 2, 3:
			return float64(k) / 4, true // dyadic: sums are exact in any order
		case 4:
			return fmt.Sprint(k), true
		case 5:
			return k > 0, true
		case 6:
			return nil, true
		case 7:
			return bson.A{int32(k)}, true
		case 8:
			return bson.D{{Key: "k", Value: int32(k % 2)}}, true
		case 9:
			return bson.D{{Key: "k", Value: float64(k % 2)}}, true
		case 10:
			return float64(k), true
		}
		return nil, false // missing
	}
	when := func() (any, bool) {
		switch rng.IntN(8) {
		case 0:
			return nil, false
		case 1:
			return "yesterday", true
		}
		return refreshStart.Add(time.Duration(rng.IntN(4*3600)-3*3600) * time.Second), true
	}
	for range 150 {
		d := bson.D{}
		if u := pick(); rng.IntN(30) > 0 {
			d = append(d, bson.E{Key: "username", Value: u})
		}
		for _, f := range []string{"p", "q"} {
			if v, ok := value(); ok {
				d = append(d, bson.E{Key: f, Value: v})
			}
		}
		if v, ok := value(); ok {
			d = append(d, bson.E{Key: "stats", Value: bson.D{{Key: "p", Value: v}}})
		}
		for _, f := range []string{"at", "when"} {
			if v, ok := when(); ok {
				d = append(d, bson.E{Key: f, Value: v})
			}
		}
		d = append(d, filterFields(rng)...)
		out["events"] = append(out["events"], d)
	}
	for range 50 {
		var a any = bson.D{{Key: "name", Value: pick()}}
		if rng.IntN(10) == 0 {
			a = bson.A{bson.D{{Key: "name", Value: arrays[rng.IntN(2)]}}, bson.D{{Key: "name", Value: "zzz"}}}
		}
		d := bson.D{{Key: "author", Value: a}}
		if v, ok := value(); ok {
			d = append(d, bson.E{Key: "likes", Value: v})
		}
		out["posts"] = append(out["posts"], d)
	}
	return out
}

// filterFields returns random values for the fields randomFilters test:
// strings, arrays of strings and of documents, a nested document, dates.
func filterFields(rng *rand.Rand) bson.D {
	var d bson.D
	pick := func(vals ...any) any { return vals[rng.IntN(len(vals))] }
	if rng.IntN(6) > 0 {
		d = append(d, bson.E{Key: "status", Value: pick("published", "draft", "Published", nil, int32(1))})
	}
	if rng.IntN(6) > 0 {
		d = append(d, bson.E{Key: "kind", Value: pick("post", "reply", "share", bson.A{"post", "share"})})
	}
	if rng.IntN(3) > 0 {
		tags := bson.A{}
		for range rng.IntN(4) {
			tags = append(tags, pick("go", "db", "ops", "GO"))
		}
		d = append(d, bson.E{Key: "tags", Value: tags})
	}
	if rng.IntN(3) > 0 {
		items := bson.A{}
		for range rng.IntN(3) {
			items = append(items, bson.D{{Key: "name", Value: pick("x", "y")}, {Key: "n", Value: int32(rng.IntN(5))}})
		}
		d = append(d, bson.E{Key: "items", Value: items})
	}
	switch rng.IntN(4) {
	case 0:
	case 1:
		d = append(d, bson.E{Key: "meta", Value: "none"})
	default:
		d = append(d, bson.E{Key: "meta", Value: bson.D{{Key: "lang", Value: pick("en", "fr", "de")}, {Key: "score", Value: int32(rng.IntN(10))}}})
	}
	if rng.IntN(4) > 0 {
		d = append(d, bson.E{Key: "published", Value: refreshStart.Add(-time.Duration(rng.IntN(72)) * time.Hour)})
	}
	return d
}

// randomFilters are filters in every form the rules allow, in YAML as a
// rules file holds them: dates, $in, $or, $elemMatch, $exists, nested
// fields, and the rest of the operators.
var randomFilters = map[string]string{
	"status":     `{status: published}`,
	"in":         `{kind: {$in: [post, reply]}, status: {$ne: draft}}`,
	"or":         `{$or: [{status: published}, {kind: share}]}`,
	"date":       `{published: {$gte: {$date: "2025-05-31T00:00:00Z"}, $lt: {$date: "2025-06-01T06:00:00.000Z"}}}`,
	"elemmatch":  `{tags: {$elemMatch: {$in: [go, db]}}}`,
	"elemdocs":   `{items: {$elemMatch: {n: {$gte: 3}}}}`,
	"exists":     `{meta.lang: {$exists: true}, tags: {$exists: false}}`,
	"nested":     `{meta.lang: {$in: [en, fr]}, meta.score: {$gt: 2}}`,
	"nor_not":    `{$nor: [{status: draft}], meta.score: {$not: {$gte: 8}}}`,
	"regex":      `{status: {$regex: "^pub", $options: i}}`,
	"all_size":   `{$and: [{tags: {$all: [go]}}, {tags: {$size: 2}}]}`,
	"type_nin":   `{status: {$type: string, $nin: [draft]}, kind: {$eq: post}}`,
	"dotted_arr": `{items.name: y}`,
}

// randomRules are components over randomSources' collections covering every
// op, windows, custom and dotted user and time fields, nested fields.
func randomRules() *Rules {
	c := func(name, coll, userField string, op Op, field string, weight float64, window time.Duration, timeField string) Component {
		return Component{Name: name, Collection: coll, UserField: userField, Op: op, Field: field, Weight: weight, Window: window, TimeField: timeField}
	}
	return &Rules{Source: "test", Components: []Component{
		c("sum", "events", "username", OpSum, "p", 1, 0, "at"),
		c("sum_hour", "events", "username", OpSum, "p", 2, time.Hour, "at"),
		c("sum_nested", "events", "username", OpSum, "stats.p", 0.5, 0, "at"),
		c("count", "events", "username", OpCount, "", 0.25, 0, "at"),
		c("count_when", "events", "username", OpCount, "", -1, 90*time.Minute, "when"),
		c("max", "events", "username", OpMax, "p", 1, 0, "at"),
		c("max_hour", "events", "username", OpMax, "q", 4, time.Hour, "at"),
		c("distinct", "events", "username", OpDistinct, "p", 1, 0, "at"),
		c("distinct_hour", "events", "username", OpDistinct, "q", 8, time.Hour, "at"),
		c("posts", "posts", "author.name", OpCount, "", 5, 0, "at"),
		c("likes", "posts", "author.name", OpSum, "likes", 1, 0, "at"),
		c("best_likes", "posts", "author.name", OpMax, "likes", 1, 0, "at"),
		c("distinct_likes", "posts", "author.name", OpDistinct, "likes", 1, 0, "at"),
		c("min", "events", "username", OpMin, "p", 1, 0, "at"),
		c("min_hour", "events", "username", OpMin, "q", 3, time.Hour, "at"),
		c("avg", "events", "username", OpAvg, "p", 1, 0, "at"),
		c("avg_hour", "events", "username", OpAvg, "stats.p", 2, time.Hour, "at"),
		c("min_likes", "posts", "author.name", OpMin, "likes", 1, 0, "at"),
		c("avg_likes", "posts", "author.name", OpAvg, "likes", 1, 0, "at"),
	}}
}

// randomFilteredRules puts each of randomFilters on components of every op,
// with a window and without.
func randomFilteredRules(t *testing.T) *Rules {
	t.Helper()
	var b strings.Builder
	b.WriteString("components:\n")
	ops := []Op{OpSum, OpCount, OpMax, OpMin, OpAvg, OpDistinct}
	i := 0
	for _, name := range slices.Sorted(maps.Keys(randomFilters)) {
		for _, window := range []string{"0s", "2h"} {
			op := ops[i%len(ops)]
			i++
			field := "p"
			if op == OpCount {
				field = ""
			}
			fmt.Fprintf(&b, "  - {name: %s_%s_%s, collection: events, op: %s, field: %q, window: %s, timeField: at, filter: %s}\n",
				name, op, window, op, field, window, randomFilters[name])
		}
	}
	rules, err := ParseRules("random filters", []byte(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return rules
}

// TestRecomputeBatchMatchesRecompute checks RecomputeBatch against Recompute,
// user by user, on random documents of every shape, with usernames that look
// like operators and users without documents.
func TestRecomputeBatchMatchesRecompute(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	log := &commandLog{db: "not yet"}
	db := mongotest.Database(t, mongotest.Options{Monitor: log.monitor()})
	log.mu.Lock()
	log.db = db.Name()
	log.mu.Unlock()
	withDocs := []string{"$gt", `{"$ne": null}`, "", "a.b", "$where", "plain", "ünïcødé", "with space", "u1", "u2"}
	users := append(slices.Clone(withDocs), "nodocs", "$exists", "U01")
	for coll, docs := range randomSources(rng, withDocs) {
		insertDocs(t, db.Collection(coll), docs...)
	}
	rules := randomRules()
	rules.Components = append(rules.Components, randomFilteredRules(t).Components...)

	serverLacks := false
	for _, without := range []bool{false, true} {
		strategy := map[bool]string{false: "$max, $min and $avg accumulators", true: "max and min by sorted find, avg by $sum and count"}[without]
		if without && serverLacks {
			break // the first round already did without them
		}
		batch := NewRecomputer(db, rules)
		lacking := func(r *Recomputer) {
			for _, op := range []Op{OpMax, OpMin, OpAvg} {
				r.lacksAccumulator(op).Store(without)
			}
		}
		lacking(batch)
		log.take()
		got, err := batch.RecomputeBatch(context.Background(), users, refreshStart)
		if err != nil {
			t.Fatalf("%s: RecomputeBatch: %v", strategy, err)
		}
		// Only u1 and u2 (and max and min by sorted find) go one by one.
		serverLacks = batch.lacksAccumulator(OpMax).Load() && batch.lacksAccumulator(OpMin).Load() && batch.lacksAccumulator(OpAvg).Load()
		most := len(rules.Collections()) // the collations, learnt
		for _, c := range rules.Components {
			most += 3 // batched, then u1 and u2 alone
			switch {
			case c.Op == OpMax || c.Op == OpMin:
				most += 1 + len(users) // refused, then sorted finds
			case c.Op == OpAvg:
				most += 1 + 2*3 // refused, then a $sum and a count each time
			}
		}
		if sent := len(log.take()); sent > most {
			t.Errorf("%s: RecomputeBatch sent %d commands, want at most %d: it fell back to per-user queries", strategy, sent, most)
		}
		if len(got) != len(users) {
			t.Errorf("%s: RecomputeBatch returned %d users, want %d", strategy, len(got), len(users))
		}
		single := NewRecomputer(db, rules)
		lacking(single)
		for _, u := range users {
			want, err := single.Recompute(context.Background(), u, refreshStart)
			if err != nil {
				t.Fatalf("Recompute(%q): %v", u, err)
			}
			if !reflect.DeepEqual(got[u], want) {
				t.Errorf("%s: batch result of %q = %+v, want Recompute's %+v", strategy, u, got[u], want)
			}
		}
		zero := Result{Components: map[string]float64{}}
		for _, c := range rules.Components {
			zero.Components[c.Name] = 0
		}
		if !reflect.DeepEqual(got["nodocs"], zero) {
			t.Errorf("%s: user without documents = %+v, want all zero", strategy, got["nodocs"])
		}
	}
}

func TestRefreshBatchWritesUsersWithoutDocuments(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	insertDocs(t, db.Collection("user_activity"), bson.D{{Key: "username", Value: "alice"}, {Key: "points", Value: int32(3)}, {Key: "at", Value: refreshStart}})
	store := NewStore(db.Collection("user_scores"), StoreConfig{})
	r := NewRefresher(NewRecomputer(db, DefaultRules()), store)
	users := []string{"alice", "nobody", `{"$ne": null}`}
	for u, err := range r.RefreshBatch(context.Background(), users, refreshStart) {
		if err != nil {
			t.Errorf("RefreshBatch: %q: %v", u, err)
		}
	}
	for _, u := range users {
		doc, found, err := store.Get(context.Background(), u)
		if err != nil || !found {
			t.Fatalf("Get(%q) = found %v, %v", u, found, err)
		}
		score := 0.0
		if u == "alice" {
			score = 3
		}
		want := ScoreDoc{Username: u, Score: score, Components: map[string]float64{"activity": score}, Version: 1, RefreshedAt: refreshStart}
		doc.RefreshedAt = doc.RefreshedAt.UTC()
		if !reflect.DeepEqual(doc, want) {
			t.Errorf("score document of %q = %+v, want %+v", u, doc, want)
		}
	}
}

func TestRefreshBatchComponentFailureFailsEveryUser(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	var stats RefreshStats
	r := NewRefresher(NewRecomputer(db, DefaultRules()), NewStore(db.Collection("user_scores"), StoreConfig{}),
		WithRefreshObserver(func(s RefreshStats) { stats = s }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := r.RefreshBatch(ctx, []string{"a", "b", "a"}, refreshStart)
	if len(errs) != 2 {
		t.Errorf("RefreshBatch returned %d entries, want one per distinct user (2)", len(errs))
	}
	for u, err := range errs {
		if !errors.Is(err, context.Canceled) || err.Error() != errs["a"].Error() {
			t.Errorf("%q: %v, want context.Canceled, the same for every user (%v)", u, err, errs["a"])
		}
	}
	// The scorer's error names the component that failed. (The batch
	// above fails at its first command, the read of the stored scores.)
	if _, _, err := NewRecomputer(db, DefaultRules()).Score(ctx, []string{"a", "b"}, refreshStart); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `component "activity"`) {
		t.Errorf("Score: %v, want context.Canceled naming the component", err)
	}
	if stats.Users != 2 {
		t.Errorf("observed %+v, want 2 users", stats)
	}
}

// TestRecomputeBatchUnbatchedOp runs a batch after the Recomputer has learnt
// that the server cannot batch distinct: that component costs one query per
// user, the others stay batched, and the values do not change.
func TestRecomputeBatchUnbatchedOp(t *testing.T) {
	t.Parallel()
	log := &commandLog{db: "not yet"}
	db := mongotest.Database(t, mongotest.Options{Monitor: log.monitor()})
	log.mu.Lock()
	log.db = db.Name()
	log.mu.Unlock()
	users := batchUsers(5)
	for i, u := range users {
		for j := range i {
			insertDocs(t, db.Collection("src"), bson.D{{Key: "username", Value: u}, {Key: "p", Value: int32(j % 3)}})
		}
	}
	rules := &Rules{Components: []Component{
		{Name: "d", Collection: "src", UserField: "username", Op: OpDistinct, Field: "p", Weight: 1, TimeField: "at"},
		{Name: "c", Collection: "src", UserField: "username", Op: OpCount, Weight: 1, TimeField: "at"},
	}}
	batched, err := NewRecomputer(db, rules).RecomputeBatch(context.Background(), users, refreshStart)
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecomputer(db, rules)
	rec.unbatched(OpDistinct).Store(true)
	log.take()
	got, err := rec.RecomputeBatch(context.Background(), users, refreshStart)
	if err != nil {
		t.Fatal(err)
	}
	if sent := log.take(); len(sent) != len(users)+2 {
		t.Errorf("sent %d commands %v, want %d (src's collation learnt, distinct per user, count batched)", len(sent), sent, len(users)+2)
	}
	if !reflect.DeepEqual(got, batched) {
		t.Errorf("per-user distinct gave %+v, batched %+v", got, batched)
	}
	if got["u04"].Components["d"] != 3 || got["u00"].Components["c"] != 0 {
		t.Errorf("u04 = %+v, u00 = %+v; want 3 distinct values and 0 documents", got["u04"], got["u00"])
	}
}

// TestQueriesCarryTheSimpleCollation: usernames compare exactly. Where a
// source collection's default collation is not simple, every query of it,
// per user or batched, aggregate or find, carries {locale: "simple"}, so a
// case-insensitive default cannot merge "Bob" and "bob" in the batched
// $group while the per-user $eq keeps them apart; elsewhere no query carries
// a collation (the embedded server refuses the option). The embedded server
// has no collations, so the learning is answered by the test; the commands'
// shape is what is checked (the server then refuses those that carry one).
func TestQueriesCarryTheSimpleCollation(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var cmds []bson.Raw
	dbName := "not yet"
	db := mongotest.Database(t, mongotest.Options{Monitor: &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		if e.DatabaseName == dbName && (e.CommandName == "aggregate" || e.CommandName == "find" || e.CommandName == "listCollections") {
			cmds = append(cmds, slices.Clone(e.Command))
		}
	}}})
	mu.Lock()
	dbName = db.Name()
	mu.Unlock()
	take := func() []bson.Raw {
		mu.Lock()
		defer mu.Unlock()
		out := cmds
		cmds = nil
		return out
	}
	for _, coll := range []string{"ci", "plain"} {
		insertDocs(t, db.Collection(coll), bson.D{{Key: "username", Value: "Bob"}, {Key: "p", Value: int32(1)}}, bson.D{{Key: "username", Value: "bob"}, {Key: "p", Value: int32(2)}})
	}
	comp := func(coll string, op Op) Component {
		return Component{Name: coll + string(op), Collection: coll, UserField: "username", Op: op, Field: "p", Weight: 1, TimeField: "at"}
	}
	// ci's max first: the embedded server refuses the collation as "not
	// implemented", which also takes max to its sorted find, so both
	// shapes of ci's queries are sent before Recompute stops.
	rules := &Rules{Components: []Component{comp("plain", OpSum), comp("plain", OpMax), comp("ci", OpMax), comp("ci", OpSum)}}
	newRec := func(nonSimple bool) *Recomputer {
		rec := NewRecomputer(db, rules)
		rec.learnCollation = func(_ context.Context, coll string) (bool, error) { return nonSimple && coll == "ci", nil }
		return rec
	}
	for _, nonSimple := range []bool{true, false} {
		for _, bySort := range []bool{false, true} {
			rec := newRec(nonSimple)
			rec.lacksAccumulator(OpMax).Store(bySort)
			take()
			_, errOne := rec.Recompute(context.Background(), "bob", refreshStart)
			_, errBatch := rec.RecomputeBatch(context.Background(), []string{"Bob", "bob"}, refreshStart)
			if !nonSimple && (errOne != nil || errBatch != nil) {
				t.Fatalf("without collations: Recompute %v, RecomputeBatch %v", errOne, errBatch)
			}
			seen := map[string]int{}
			for _, cmd := range take() {
				name := cmd.Index(0).Key()
				coll, _ := cmd.Index(0).Value().StringValueOK()
				seen[coll+" "+name]++
				loc, has := cmd.Lookup("collation", "locale").StringValueOK()
				if want := nonSimple && coll == "ci"; has != want || (has && loc != "simple") {
					t.Errorf("non-simple ci: %v, max by sort: %v: %s on %s carries collation %v (%q), want %v: %s", nonSimple, bySort, name, coll, has, loc, want, cmd)
				}
			}
			if seen["ci aggregate"]+seen["ci find"] == 0 || seen["plain aggregate"] == 0 {
				t.Errorf("non-simple ci: %v, max by sort: %v: sent %v, want queries of both collections", nonSimple, bySort, seen)
			}
			if bySort && seen["plain find"] == 0 || nonSimple && seen["ci find"] == 0 {
				t.Errorf("non-simple ci: %v, max by sort: %v: sent %v, want the sorted finds", nonSimple, bySort, seen)
			}
		}
	}

	// The default learning asks listCollections about each collection once
	// (the embedded server answers without a collation), and Bob and bob
	// stay two users in both paths.
	rec := NewRecomputer(db, &Rules{Components: []Component{comp("ci", OpSum), comp("ci", OpCount), comp("plain", OpSum)}})
	take()
	got, err := rec.RecomputeBatch(context.Background(), []string{"Bob", "bob"}, refreshStart)
	if err != nil {
		t.Fatal(err)
	}
	lists := 0
	for _, cmd := range take() {
		if cmd.Index(0).Key() == "listCollections" {
			lists++
			if _, ok := cmd.Lookup("filter", "name").StringValueOK(); !ok {
				t.Errorf("listCollections without a filter on the name: %s", cmd)
			}
		}
		if _, has := cmd.Lookup("collation").DocumentOK(); has {
			t.Errorf("sent a collation to the embedded server: %s", cmd)
		}
	}
	if lists != 2 {
		t.Errorf("sent %d listCollections, want one per collection (2)", lists)
	}
	for u, want := range map[string]float64{"Bob": 1, "bob": 2} {
		one, err := rec.Recompute(context.Background(), u, refreshStart)
		if err != nil {
			t.Fatal(err)
		}
		if got[u].Components["cisum"] != want || !reflect.DeepEqual(got[u], one) {
			t.Errorf("%s: batched %+v, per user %+v, want sum %v", u, got[u], one, want)
		}
	}
	if extra := take(); slices.ContainsFunc(extra, func(c bson.Raw) bool { return c.Index(0).Key() == "listCollections" }) {
		t.Errorf("learnt a collation again: %v", extra)
	}
}
