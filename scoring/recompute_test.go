package scoring

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// refreshStart is a startedAt on a millisecond, as BSON stores dates.
var refreshStart = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func insertDocs(t *testing.T, coll *mongo.Collection, docs ...bson.D) {
	t.Helper()
	if len(docs) == 0 {
		return
	}
	if _, err := coll.InsertMany(context.Background(), docs); err != nil {
		t.Fatalf("seeding %s: %v", coll.Name(), err)
	}
}

// oneComponent completes c as the parser would and names it "v", reading
// collection "src".
func oneComponent(c Component) *Rules {
	c.Name, c.Collection, c.Weight = "v", "src", 1
	c.UserField = cmp.Or(c.UserField, DefaultUserField)
	c.TimeField = cmp.Or(c.TimeField, DefaultTimeField)
	return &Rules{Source: "test", Components: []Component{c}}
}

// u is a document of user "u" with the given fields; other users' documents
// are written out in full.
func u(fields ...bson.E) bson.D { return append(bson.D{{Key: "username", Value: "u"}}, fields...) }

func TestRecomputeOps(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) bson.E { return bson.E{Key: "at", Value: refreshStart.Add(d)} }
	p := func(v any) bson.E { return bson.E{Key: "p", Value: v} }
	other := bson.D{{Key: "username", Value: "other"}, {Key: "p", Value: int32(1000)}, {Key: "at", Value: refreshStart}}
	tests := map[string]struct {
		comp Component
		docs []bson.D
		want float64
	}{
		"sum of int32 int64 and double ignoring non-numbers": {
			comp: Component{Op: OpSum, Field: "p"},
			docs: []bson.D{u(p(int32(3))), u(p(int64(4))), u(p(1.5)), u(p("12")), u(), u(p(nil)), u(p(true)), u(p(bson.A{100})), other},
			want: 8.5,
		},
		"sum of negatives": {
			comp: Component{Op: OpSum, Field: "p"},
			docs: []bson.D{u(p(int32(-3))), u(p(-0.25)), other},
			want: -3.25,
		},
		"sum with nothing numeric is 0": {
			comp: Component{Op: OpSum, Field: "p"},
			docs: []bson.D{u(p("x")), u(), other},
			want: 0,
		},
		"sum of a nested field": {
			comp: Component{Op: OpSum, Field: "stats.p"},
			docs: []bson.D{u(bson.E{Key: "stats", Value: bson.D{p(int32(2))}}), u(bson.E{Key: "stats", Value: bson.D{p(3.5)}}), u(bson.E{Key: "stats", Value: int32(7)})},
			want: 5.5,
		},
		"count": {
			comp: Component{Op: OpCount},
			docs: []bson.D{u(), u(p(1)), u(p(nil)), other, other},
			want: 3,
		},
		"count on a custom userField": {
			comp: Component{Op: OpCount, UserField: "author"},
			docs: []bson.D{{{Key: "author", Value: "u"}}, {{Key: "author", Value: "u"}}, u(), {{Key: "author", Value: "other"}}},
			want: 2,
		},
		"max over mixed numeric types ignores non-numbers": {
			comp: Component{Op: OpMax, Field: "p"},
			docs: []bson.D{u(p(int32(3))), u(p(int64(9))), u(p(8.5)), u(p("zzz")), u(p(bson.A{100})), u(p(true)), u(p(nil)), u(), other},
			want: 9,
		},
		"max of negatives": {
			comp: Component{Op: OpMax, Field: "p"},
			docs: []bson.D{u(p(int32(-5))), u(p(-2.5)), u(p(int64(-7))), u(p("a"))},
			want: -2.5,
		},
		"max with no numeric value is 0": {
			comp: Component{Op: OpMax, Field: "p"},
			docs: []bson.D{u(p("a")), u(p(nil)), u(), other},
			want: 0,
		},
		"max of a nested field": {
			comp: Component{Op: OpMax, Field: "stats.p"},
			docs: []bson.D{u(bson.E{Key: "stats", Value: bson.D{p(int32(2))}}), u(bson.E{Key: "stats", Value: bson.D{p(3.5)}})},
			want: 3.5,
		},
		"distinct excludes null and missing and equal numbers are one value": {
			comp: Component{Op: OpDistinct, Field: "p"},
			docs: []bson.D{
				u(p("x")), u(p("x")), u(p("y")), // 2
				u(p(int32(1))), u(p(int64(1))), u(p(1.0)), u(p(2.5)), // 2
				u(p(true)), u(p(bson.D{{Key: "k", Value: int32(1)}})), // 2
				u(p(nil)), u(), other,
			},
			want: 6,
		},
		"distinct of nothing is 0": {
			comp: Component{Op: OpDistinct, Field: "p"},
			docs: []bson.D{u(p(nil)), u(), other},
			want: 0,
		},
		"window counts its edge and documents after startedAt": {
			comp: Component{Op: OpSum, Field: "p", Window: time.Hour},
			docs: []bson.D{
				u(p(int32(1)), at(-time.Hour)),                   // exactly at the edge: in
				u(p(int32(10)), at(-time.Hour-time.Millisecond)), // just outside
				u(p(int32(100)), at(5*time.Second)),              // producer clock ahead: in
				u(p(int32(1000))),                                // no time: out
				u(p(int32(10000)), bson.E{Key: "at", Value: "yesterday"}),
				other,
			},
			want: 101,
		},
		"window on a custom timeField": {
			comp: Component{Op: OpCount, Window: 24 * time.Hour, TimeField: "when"},
			docs: []bson.D{
				u(bson.E{Key: "when", Value: refreshStart.Add(-23 * time.Hour)}, at(-48*time.Hour)),
				u(bson.E{Key: "when", Value: refreshStart.Add(-25 * time.Hour)}, at(0)),
				u(at(0)),
			},
			want: 1,
		},
		"window with max and distinct": {
			comp: Component{Op: OpMax, Field: "p", Window: time.Minute},
			docs: []bson.D{u(p(int32(5)), at(-time.Second)), u(p(int32(50)), at(-time.Hour))},
			want: 5,
		},
		"min over mixed numeric types ignores non-numbers": {
			comp: Component{Op: OpMin, Field: "p"},
			docs: []bson.D{u(p(int32(3))), u(p(int64(9))), u(p(2.5)), u(p("a")), u(p(bson.A{-100})), u(p(true)), u(p(nil)), u(), other},
			want: 2.5,
		},
		"min of negatives": {
			comp: Component{Op: OpMin, Field: "p"},
			docs: []bson.D{u(p(int32(-5))), u(p(-2.5)), u(p(int64(-7))), u(p("a"))},
			want: -7,
		},
		"min with no numeric value is 0": {
			comp: Component{Op: OpMin, Field: "p"},
			docs: []bson.D{u(p("a")), u(p(nil)), u(), bson.D{{Key: "username", Value: "other"}, {Key: "p", Value: int32(-1)}}},
			want: 0,
		},
		"avg over mixed numeric types ignores non-numbers": {
			comp: Component{Op: OpAvg, Field: "p"},
			docs: []bson.D{u(p(int32(3))), u(p(int64(4))), u(p(1.5)), u(p(-0.5)), u(p("12")), u(p(bson.A{100})), u(p(true)), u(p(nil)), u(), other},
			want: 2,
		},
		"avg with no numeric value is 0": {
			comp: Component{Op: OpAvg, Field: "p"},
			docs: []bson.D{u(p("a")), u(), other},
			want: 0,
		},
		"avg of a nested field within a window": {
			comp: Component{Op: OpAvg, Field: "stats.p", Window: time.Hour},
			docs: []bson.D{
				u(bson.E{Key: "stats", Value: bson.D{p(int32(2))}}, at(0)),
				u(bson.E{Key: "stats", Value: bson.D{p(5.0)}}, at(-time.Minute)),
				u(bson.E{Key: "stats", Value: bson.D{p(int32(100))}}, at(-2*time.Hour)),
			},
			want: 3.5,
		},
		"filter on strings and in": {
			comp: Component{Op: OpCount, Filter: mustFilter(`{status: published, kind: {$in: [post, reply]}}`)},
			docs: []bson.D{
				u(st("published"), kind("post")), u(st("published"), kind("reply")), // in
				u(st("published"), kind(bson.A{"share", "post"})), // in: an array holds post
				u(st("published"), kind("share")), u(st("Published"), kind("post")), u(st("draft"), kind("post")), u(kind("post")),
				bson.D{{Key: "username", Value: "other"}, st("published"), kind("post")},
			},
			want: 3,
		},
		"filter on a date": {
			comp: Component{Op: OpSum, Field: "p", Filter: mustFilter(`{published: {$gte: {$date: "2025-06-01T00:00:00Z"}}}`)},
			docs: []bson.D{
				u(p(int32(1)), pub(refreshStart.Add(-12*time.Hour))), // midnight: in
				u(p(int32(10)), pub(refreshStart.Add(-12*time.Hour-time.Millisecond))),
				u(p(int32(100)), bson.E{Key: "published", Value: "2025-06-02"}),
				u(p(int32(1000))),
			},
			want: 1,
		},
		"filter with or nor not and exists": {
			comp: Component{Op: OpCount, Filter: mustFilter(`{$or: [{status: published}, {kind: share}], $nor: [{kind: reply}], flag: {$exists: false}, n: {$not: {$gt: 5}}}`)},
			docs: []bson.D{
				u(st("published")), u(kind("share"), bson.E{Key: "n", Value: int32(5)}), // in
				u(st("published"), kind("reply")), u(st("published"), bson.E{Key: "flag", Value: nil}), // $nor, $exists
				u(st("published"), bson.E{Key: "n", Value: int32(6)}), u(st("draft")), // $not, $or
			},
			want: 2,
		},
		"filter on nested and dotted array fields with regex all size and type": {
			comp: Component{Op: OpMax, Field: "p", Filter: mustFilter(`{meta.lang: {$regex: "^e", $options: i}, tags: {$all: [go], $size: 2}, items.name: y, status: {$type: string}}`)},
			docs: []bson.D{
				u(p(int32(7)), meta("En"), tags("go", "db"), items("x", "y"), st("a")), // in
				u(p(int32(70)), meta("fr"), tags("go", "db"), items("y"), st("a")),
				u(p(int32(71)), meta("en"), tags("go"), items("y"), st("a")),
				u(p(int32(72)), meta("en"), tags("go", "db"), items("x"), st("a")),
				u(p(int32(73)), meta("en"), tags("go", "db"), items("y"), st(int32(1))),
			},
			want: 7,
		},
		"filter with a one-condition elemMatch": {
			comp: Component{Op: OpMin, Field: "p", Filter: mustFilter(`{tags: {$elemMatch: {$in: [go, db]}}}`)},
			docs: []bson.D{u(p(int32(4)), tags("ops", "db")), u(p(int32(-4)), tags("ops")), u(p(int32(-5)), st("go"))},
			want: 4,
		},
		"filter on the time field narrows the window": {
			comp: Component{Op: OpCount, Window: time.Hour, Filter: mustFilter(`{at: {$lt: {$date: "2025-06-01T11:30:00Z"}}}`)},
			docs: []bson.D{u(at(-40 * time.Minute)), u(at(-20 * time.Minute)), u(at(-2 * time.Hour))},
			want: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := mongotest.Database(t, mongotest.Options{})
			insertDocs(t, db.Collection("src"), tc.docs...)
			strategies := map[string]bool{"": false}
			if rec := NewRecomputer(db, nil); rec.lacksAccumulator(tc.comp.Op) != nil {
				// Check both ways of taking a max, min or avg on every server.
				strategies = map[string]bool{"accumulator": false, "without it": true}
			}
			for strategy, without := range strategies {
				rec := NewRecomputer(db, oneComponent(tc.comp))
				if lacks := rec.lacksAccumulator(tc.comp.Op); lacks != nil {
					lacks.Store(without)
				}
				res, err := rec.Recompute(context.Background(), "u", refreshStart)
				if err != nil {
					t.Fatalf("%s Recompute: %v", strategy, err)
				}
				want := Result{Score: tc.want, Components: map[string]float64{"v": tc.want}}
				if !reflect.DeepEqual(res, want) {
					t.Errorf("%s Recompute = %+v, want %+v", strategy, res, want)
				}
			}
		})
	}
}

// Fields of the filter cases of TestRecomputeOps.
func st(v any) bson.E         { return bson.E{Key: "status", Value: v} }
func kind(v any) bson.E       { return bson.E{Key: "kind", Value: v} }
func pub(v time.Time) bson.E  { return bson.E{Key: "published", Value: v} }
func meta(lang string) bson.E { return bson.E{Key: "meta", Value: bson.D{{Key: "lang", Value: lang}}} }
func tags(v ...any) bson.E    { return bson.E{Key: "tags", Value: bson.A(v)} }
func items(names ...any) bson.E {
	a := bson.A{}
	for _, n := range names {
		a = append(a, bson.D{{Key: "name", Value: n}})
	}
	return bson.E{Key: "items", Value: a}
}

// mustFilter parses a filter as a rules file holds it.
func mustFilter(yaml string) bson.D {
	r, err := ParseRules("test", []byte("components: [{name: v, collection: src, op: count, filter: "+yaml+"}]"))
	if err != nil {
		panic(err)
	}
	return r.Components[0].Filter
}

func TestRecomputeWeightsCombine(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	insertDocs(t, db.Collection("activity"), u(bson.E{Key: "points", Value: int32(6)}), u(bson.E{Key: "points", Value: 2.5}))
	insertDocs(t, db.Collection("posts"), bson.D{{Key: "author", Value: "u"}}, bson.D{{Key: "author", Value: "u"}}, bson.D{{Key: "author", Value: "u"}})
	rules := &Rules{Components: []Component{
		{Name: "points", Collection: "activity", UserField: "username", Op: OpSum, Field: "points", Weight: 2, TimeField: "at"},
		{Name: "best", Collection: "activity", UserField: "username", Op: OpMax, Field: "points", Weight: -0.5, TimeField: "at"},
		{Name: "posts", Collection: "posts", UserField: "author", Op: OpCount, Weight: 5, TimeField: "at"},
		{Name: "ignored", Collection: "posts", UserField: "author", Op: OpCount, Weight: 0, TimeField: "at"},
	}}
	res, err := NewRecomputer(db, rules).Recompute(context.Background(), "u", refreshStart)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		Score:      2*8.5 - 0.5*6 + 5*3 + 0*3,
		Components: map[string]float64{"points": 8.5, "best": 6, "posts": 3, "ignored": 3},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Recompute = %+v, want %+v", res, want)
	}
}

func TestRecomputeUserWithoutDocuments(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	insertDocs(t, db.Collection("src"), bson.D{{Key: "username", Value: "other"}, {Key: "p", Value: int32(4)}, {Key: "at", Value: refreshStart}})
	rules := &Rules{Components: []Component{
		{Name: "s", Collection: "src", UserField: "username", Op: OpSum, Field: "p", Weight: 1, TimeField: "at", Window: time.Hour},
		{Name: "c", Collection: "src", UserField: "username", Op: OpCount, Weight: 1, TimeField: "at"},
		{Name: "m", Collection: "src", UserField: "username", Op: OpMax, Field: "p", Weight: 1, TimeField: "at"},
		{Name: "d", Collection: "src", UserField: "username", Op: OpDistinct, Field: "p", Weight: 1, TimeField: "at"},
		{Name: "absent", Collection: "no_such_collection", UserField: "username", Op: OpSum, Field: "p", Weight: 1, TimeField: "at"},
	}}
	res, err := NewRecomputer(db, rules).Recompute(context.Background(), "nobody", refreshStart)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Components: map[string]float64{"s": 0, "c": 0, "m": 0, "d": 0, "absent": 0}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Recompute = %+v, want %+v", res, want)
	}
}

func TestRecomputeTrickyUsernames(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	users := []string{"a.b", "a", "$gt", "with space", "ünïcødé", `{"$ne": null}`, "$where", ".*", ""}
	var docs []bson.D
	for i, name := range users {
		docs = append(docs, bson.D{{Key: "username", Value: name}, {Key: "p", Value: int64(1) << i}})
	}
	// Documents an operator-shaped username would match if it were read as
	// an operator rather than a string ({$ne: null}, {$gt: ""}).
	docs = append(docs,
		bson.D{{Key: "username", Value: nil}, {Key: "p", Value: int64(1) << 21}},
		bson.D{{Key: "p", Value: int64(1) << 22}},
		bson.D{{Key: "username", Value: "zzz"}, {Key: "p", Value: int64(1) << 23}},
	)
	insertDocs(t, db.Collection("src"), docs...)
	// With a filter too: it is ANDed beside the user match and cannot turn
	// the username into an operator either.
	rec := NewRecomputer(db, &Rules{Components: []Component{
		{Name: "sum", Collection: "src", UserField: "username", Op: OpSum, Field: "p", Weight: 1, TimeField: "at"},
		{Name: "count", Collection: "src", UserField: "username", Op: OpCount, Weight: 0, TimeField: "at"},
		{Name: "filtered", Collection: "src", UserField: "username", Op: OpCount, Weight: 0, TimeField: "at", Filter: mustFilter(`{p: {$exists: true}}`)},
	}})
	batch, err := rec.RecomputeBatch(context.Background(), users, refreshStart)
	if err != nil {
		t.Fatalf("RecomputeBatch: %v", err)
	}
	for i, name := range users {
		res, err := rec.Recompute(context.Background(), name, refreshStart)
		if err != nil {
			t.Fatalf("Recompute(%q): %v", name, err)
		}
		want := map[string]float64{"sum": float64(int64(1) << i), "count": 1, "filtered": 1}
		if !reflect.DeepEqual(res.Components, want) {
			t.Errorf("Recompute(%q) = %v, want %v (its own document only)", name, res.Components, want)
		}
		if !reflect.DeepEqual(batch[name].Components, want) {
			t.Errorf("RecomputeBatch: %q = %v, want %v (its own document only)", name, batch[name].Components, want)
		}
	}
}

func TestRecomputeErrorNamesComponent(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := NewRecomputer(db, DefaultRules()).Recompute(ctx, "u", refreshStart)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `component "activity"`) {
		t.Errorf("Recompute with a cancelled context = %v, want context.Canceled naming the component", err)
	}
}

// commandLog records the commands a client sends to one database.
type commandLog struct {
	mu    sync.Mutex
	db    string
	names []string
}

func (l *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if e.DatabaseName == l.db {
			l.names = append(l.names, e.CommandName)
		}
	}}
}

// take returns the commands recorded since the last take.
func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := l.names
	l.names = nil
	return names
}

func TestRecomputeOneCommandPerComponent(t *testing.T) {
	t.Parallel()
	log := &commandLog{db: "not yet"}
	db := mongotest.Database(t, mongotest.Options{Monitor: log.monitor()})
	log.mu.Lock()
	log.db = db.Name()
	log.mu.Unlock()
	insertDocs(t, db.Collection("src"), u(bson.E{Key: "p", Value: int32(2)}, bson.E{Key: "at", Value: refreshStart}))
	insertDocs(t, db.Collection("other"), u(bson.E{Key: "p", Value: int32(3)}))
	rules := &Rules{Components: []Component{
		{Name: "s", Collection: "src", UserField: "username", Op: OpSum, Field: "p", Weight: 1, TimeField: "at", Window: time.Hour},
		{Name: "c", Collection: "src", UserField: "username", Op: OpCount, Weight: 1, TimeField: "at"},
		{Name: "m", Collection: "other", UserField: "username", Op: OpMax, Field: "p", Weight: 1, TimeField: "at"},
		{Name: "d", Collection: "other", UserField: "username", Op: OpDistinct, Field: "p", Weight: 1, TimeField: "at"},
	}}
	rec := NewRecomputer(db, rules)
	log.take()

	// The first refresh may pay once for learning that the server lacks
	// $max, and pays once per source collection for learning its collation.
	if _, err := rec.Recompute(context.Background(), "u", refreshStart); err != nil {
		t.Fatal(err)
	}
	learnt := len(rules.Collections())
	if rec.lacksAccumulator(OpMax).Load() {
		learnt++
	}
	if got := log.take(); len(got) != len(rules.Components)+learnt {
		t.Errorf("first Recompute sent %v, want %d commands", got, len(rules.Components)+learnt)
	}

	for range 3 {
		res, err := rec.Recompute(context.Background(), "u", refreshStart)
		if err != nil {
			t.Fatal(err)
		}
		if want := 2 + 1 + 3 + 1.0; res.Score != want {
			t.Errorf("Score = %v, want %v", res.Score, want)
		}
		got := log.take()
		if len(got) != len(rules.Components) {
			t.Errorf("Recompute sent %v, want exactly one command per component (%d)", got, len(rules.Components))
		}
		for _, name := range got {
			if name != "aggregate" && name != "find" {
				t.Errorf("Recompute sent a %q command, want only aggregate or find", name)
			}
		}
	}
}
