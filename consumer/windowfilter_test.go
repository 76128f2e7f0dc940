package consumer

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
)

// TestWindowFilterBoundsTheLeadingField records the claim window's find,
// at the head and paging, and holds its filter to the shape MongoDB's
// planner can answer from the window's index (docs/query-plans.md): an $or
// whose every branch bounds createdAt, the index's leading field, and
// carries the username conditions, hinted by the index's name. (A filter
// on username alone, the index's third field, gets no index bounds: the
// hinted index is scanned whole and every key's document fetched.) It
// also checks, on the same queue, that the window reads exactly the
// entries the filter without createdAt read, whatever createdAt holds.
func TestWindowFilterBoundsTheLeadingField(t *testing.T) {
	t.Parallel()
	rec := &queryplan.Recorder{}
	db := mongotest.Database(t, mongotest.Options{Monitor: rec.Monitor()})
	b := &testBundle{db: db, cmds: &mongotest.Commands{}, colls: Collections{
		Queue: db.Collection("score_events"), Claims: db.Collection("score_claims"), DeadLetter: db.Collection("score_events_dead"),
	}}
	if _, err := EnsureIndexes(t.Context(), b.colls, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	tie := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	tieIDs := []bson.ObjectID{bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()}
	var queue []any
	add := func(id any, username, createdAt any) {
		doc := bson.D{{Key: "_id", Value: id}}
		if createdAt != missing {
			doc = append(doc, bson.E{Key: "createdAt", Value: createdAt})
		}
		if username != missing {
			doc = append(doc, bson.E{Key: "username", Value: username})
		}
		queue = append(queue, doc)
	}
	// Every kind of createdAt a producer can write, each with a valid
	// username, a held one (the $nin) and a malformed one.
	kinds := []any{
		tie.Add(-time.Minute), missing, nil, "2024-01-01T00:00:00Z", 42, int64(43), 1.5, true,
		bson.D{{Key: "at", Value: 1}}, bson.A{}, bson.A{tie.Add(time.Minute)}, bson.Timestamp{T: 1, I: 1},
		bson.NewObjectID(), bson.Binary{Data: []byte{1}}, bson.Regex{Pattern: "x"},
		bson.DateTime(math.MinInt64), bson.DateTime(math.MaxInt64),
	}
	for i, at := range kinds {
		add(bson.NewObjectID(), fmt.Sprintf("user-%02d", i), at)
		add(bson.NewObjectID(), "held", at)
		add(bson.NewObjectID(), 7, at)
		add(fmt.Sprintf("string-id-%02d", i), "", at)
	}
	for i, id := range tieIDs { // one time, three _ids: the page's tie-break
		add(id, fmt.Sprintf("tied-%d", i), tie)
	}
	add(bson.NewObjectID(), "later", tie.Add(time.Second))
	add(bson.NewObjectID(), missing, tie.Add(2*time.Second))
	if _, err := b.colls.Queue.InsertMany(t.Context(), queue); err != nil {
		t.Fatal(err)
	}

	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: 1000}})
	if err := c.claimer.detect(t.Context()); err != nil {
		t.Fatal(err)
	}
	exclude := []string{"held"}
	for _, lengthFilter := range []bool{true, false} {
		for _, resume := range []*position{nil, {createdAt: tie, id: objectIDValue(tieIDs[0])}} {
			name := fmt.Sprintf("length filter %v, paged %v", lengthFilter, resume != nil)
			c.claimer.filter = &lengthFilter
			c.claimer.resume = resume
			rec.Take()
			got, err := c.claimer.readWindow(t.Context(), time.Now(), exclude)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			window := one(t, rec.Take(), "window", func(cmd queryplan.Command) bool {
				return cmd.Name == "find" && cmd.Collection == "score_events"
			})
			checkHint(t, name+": window", window, windowIndex)
			checkWindowFilter(t, filterOf(window.Body), resume != nil)

			want := readUnbounded(t, b, lengthFilter, resume)
			if !slices.Equal(entryIDs(got), want) {
				t.Errorf("%s: the window read\n  %v\nthe filter without createdAt read\n  %v", name, entryIDs(got), want)
			}
		}
	}
}

// missing marks a field left out of a seeded document.
var missing = struct{ missing bool }{true}

// checkWindowFilter holds a window's filter to an $or of branches that each
// bound createdAt (a date, a range of dates, points, or types other than
// array, which MongoDB turns into index bounds) and carry the same username
// conditions; at the head, the branches take in every date and the
// entries without one.
func checkWindowFilter(t *testing.T, filter bson.Raw, paged bool) {
	t.Helper()
	elems, _ := filter.Elements()
	if len(elems) != 1 || elems[0].Key() != "$or" {
		t.Errorf("window filter %s: want one $or of ranges of createdAt, the index's leading field", filter)
		return
	}
	branches := list(filter.Lookup("$or"))
	var user bson.RawValue
	allDates, undated := false, false
	for i, b := range branches {
		doc := b.Document()
		at, err := doc.LookupErr("createdAt")
		if err != nil || !boundsCreatedAt(at) {
			t.Errorf("window branch %s: createdAt bounds no index range", doc)
		}
		if u := doc.Lookup("username"); i == 0 {
			user = u
		} else if !u.Equal(user) {
			t.Errorf("window branch %s: username conditions differ from the first branch's %s", doc, user)
		}
		if d, ok := at.DocumentOK(); ok {
			lo, _ := d.Lookup("$gte").DateTimeOK()
			hi, _ := d.Lookup("$lte").DateTimeOK()
			allDates = allDates || lo == math.MinInt64 && hi == math.MaxInt64
			for _, v := range list(d.Lookup("$in")) {
				undated = undated || v.Type == bson.TypeNull
			}
		}
	}
	if !paged && (!allDates || !undated) {
		t.Errorf("window filter %s: want branches for every date and for entries without one", filter)
	}
}

func boundsCreatedAt(v bson.RawValue) bool {
	d, ok := v.DocumentOK()
	if !ok {
		return v.Type == bson.TypeDateTime // equality: a point
	}
	elems, _ := d.Elements()
	for _, e := range elems {
		switch e.Key() {
		case "$gt", "$gte", "$lt", "$lte":
			if e.Value().Type != bson.TypeDateTime {
				return false
			}
		case "$in":
		case "$type":
			for _, ty := range list(e.Value()) {
				if s, _ := ty.StringValueOK(); s == "array" {
					return false // bounds nothing: arrays are keyed by their elements
				}
			}
		default:
			return false
		}
	}
	return len(elems) > 0
}

// readUnbounded reads the window as the filter before createdAt was in it
// did: the username conditions alone, at the head or behind resume.
func readUnbounded(t *testing.T, b *testBundle, lengthFilter bool, resume *position) []string {
	t.Helper()
	userCond := bson.D{{Key: "$nin", Value: bson.A{"held"}}}
	if lengthFilter {
		userCond = append(bson.D{{Key: "$regex", Value: validUsername}}, userCond...)
	}
	filter := bson.D{{Key: "username", Value: userCond}}
	if resume != nil {
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "createdAt", Value: bson.D{{Key: "$gt", Value: resume.createdAt}}}},
			bson.D{{Key: "createdAt", Value: resume.createdAt}, {Key: "_id", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$lte", Value: resume.id}}}}}},
		}})
	}
	cur, err := b.colls.Queue.Find(t.Context(), filter, options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var raw []rawEntry
	if err := cur.All(t.Context(), &raw); err != nil {
		t.Fatal(err)
	}
	if resume != nil {
		raw = slices.DeleteFunc(raw, func(r rawEntry) bool { return !resume.before(r) })
	}
	return entryIDs(raw)
}

func entryIDs(entries []rawEntry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID.String()
	}
	return ids
}
