package queuestate_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
	"github.com/scorerefresh/scorerefresh/queuestate"
)

// queue returns an empty queue with the consumer's time index (when indexed)
// and a recorder of the commands sent on its client.
func queue(t *testing.T, indexed bool) (q, dead *mongo.Collection, rec *queryplan.Recorder) {
	t.Helper()
	rec = &queryplan.Recorder{}
	db := mongotest.Database(t, mongotest.Options{Monitor: rec.Monitor()})
	q, dead = db.Collection("score_events"), db.Collection("score_events_dead")
	if indexed {
		keys := bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}}
		if _, err := q.Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: keys}); err != nil {
			t.Fatal(err)
		}
	}
	return q, dead, rec
}

func insert(t *testing.T, c *mongo.Collection, docs ...any) {
	t.Helper()
	if _, err := c.InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
}

func TestReadEmptyQueue(t *testing.T) {
	t.Parallel()
	q, dead, _ := queue(t, true)
	st, err := queuestate.New(q, dead).Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st != (queuestate.State{}) || st.OldestAge(time.Now()) != 0 {
		t.Errorf("empty queue: %+v, age %v; want the zero state, age 0", st, st.OldestAge(time.Now()))
	}
}

// TestReadDatesEntriesAsTheConsumerDoes: createdAt when it is a date, else
// the ObjectId's time; malformed entries count in the depth only, even when
// they sort first.
func TestReadDatesEntriesAsTheConsumerDoes(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second) // ObjectIds keep whole seconds
	oid := func(ago time.Duration) bson.ObjectID { return bson.NewObjectIDFromTimestamp(now.Add(-ago)) }
	cases := []struct {
		name    string
		entries []any
		oldest  time.Duration // age at now; 0: none
	}{
		{"dated only", []any{
			bson.D{{Key: "username", Value: "a"}, {Key: "createdAt", Value: now.Add(-30 * time.Second)}},
			bson.D{{Key: "username", Value: "b"}, {Key: "createdAt", Value: now.Add(-90 * time.Second)}},
			bson.D{{Key: "username", Value: "c"}, {Key: "createdAt", Value: now.Add(-10 * time.Second)}},
		}, 90 * time.Second},
		{"undated older than dated", []any{
			bson.D{{Key: "username", Value: "a"}, {Key: "createdAt", Value: now.Add(-30 * time.Second)}},
			bson.D{{Key: "_id", Value: oid(10 * time.Minute)}, {Key: "username", Value: "d"}},
			bson.D{{Key: "_id", Value: oid(time.Minute)}, {Key: "username", Value: "e"}, {Key: "createdAt", Value: nil}},
		}, 10 * time.Minute},
		{"dated older than undated", []any{
			bson.D{{Key: "_id", Value: oid(20 * time.Minute)}, {Key: "username", Value: "a"}, {Key: "createdAt", Value: now.Add(-time.Hour)}},
			bson.D{{Key: "_id", Value: oid(10 * time.Minute)}, {Key: "username", Value: "d"}},
		}, time.Hour},
		{"undated only", []any{
			bson.D{{Key: "_id", Value: oid(5 * time.Minute)}, {Key: "username", Value: "d"}},
		}, 5 * time.Minute},
		{"malformed only", []any{
			bson.D{{Key: "_id", Value: oid(time.Hour)}, {Key: "username", Value: "a"}, {Key: "createdAt", Value: "yesterday"}},
			bson.D{{Key: "_id", Value: "no-time"}, {Key: "username", Value: "b"}},
		}, 0},
		// A string _id sorts before every ObjectId: read first, it would
		// hide the undated entries behind it.
		{"malformed at the head", []any{
			bson.D{{Key: "_id", Value: "no-time"}, {Key: "username", Value: "b"}},
			bson.D{{Key: "_id", Value: int32(7)}, {Key: "username", Value: "b"}},
			bson.D{{Key: "_id", Value: oid(2 * time.Hour)}, {Key: "username", Value: "a"}, {Key: "createdAt", Value: "yesterday"}},
			bson.D{{Key: "_id", Value: oid(3 * time.Minute)}, {Key: "username", Value: "d"}},
			bson.D{{Key: "username", Value: "c"}, {Key: "createdAt", Value: now.Add(-time.Minute)}},
		}, 3 * time.Minute},
	}
	for _, tc := range cases {
		for _, indexed := range []bool{true, false} {
			q, _, _ := queue(t, indexed)
			insert(t, q, tc.entries...)
			st, err := queuestate.New(q, nil).Read(t.Context())
			if err != nil {
				t.Fatalf("%s (indexed %t): %v", tc.name, indexed, err)
			}
			if st.Depth != int64(len(tc.entries)) || st.OldestAge(now) != tc.oldest {
				t.Errorf("%s (indexed %t): depth %d, oldest age %v; want %d, %v", tc.name, indexed, st.Depth, st.OldestAge(now), len(tc.entries), tc.oldest)
			}
		}
	}
}

func TestReadCountsDeadLetters(t *testing.T) {
	t.Parallel()
	q, dead, _ := queue(t, true)
	insert(t, dead, bson.D{{Key: "username", Value: "z"}}, bson.D{{Key: "username", Value: "y"}})
	st, err := queuestate.New(q, dead).Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != 2 {
		t.Errorf("dead letters = %d, want 2", st.DeadLetters)
	}
}

// TestReadRoundTrips: a read is the same commands whatever the queue holds:
// one metadata count per collection and two finds of at most one document.
func TestReadRoundTrips(t *testing.T) {
	t.Parallel()
	q, dead, rec := queue(t, true)
	var docs []any
	base := time.Now().Add(-time.Hour)
	for i := range 300 {
		doc := bson.D{{Key: "username", Value: "u"}}
		if i%10 != 0 { // one in ten undated
			doc = append(doc, bson.E{Key: "createdAt", Value: base.Add(time.Duration(i) * time.Millisecond)})
		}
		docs = append(docs, doc)
	}
	for _, size := range []int{0, len(docs)} {
		if size > 0 {
			insert(t, q, docs...)
		}
		for _, deadLetter := range []*mongo.Collection{nil, dead} {
			rec.Take()
			if _, err := queuestate.New(q, deadLetter).Read(t.Context()); err != nil {
				t.Fatal(err)
			}
			cmds := rec.Take()
			want := 3
			if deadLetter != nil {
				want = 4
			}
			if len(cmds) != want {
				t.Errorf("%d entries, dead letters %t: %d round trips, want %d: %v", size, deadLetter != nil, len(cmds), want, names(cmds))
			}
			checkBounded(t, cmds)
		}
	}
}

func checkBounded(t *testing.T, cmds []queryplan.Command) {
	t.Helper()
	for _, c := range cmds {
		switch c.Name {
		case "count":
			if _, err := c.Body.LookupErr("query"); err == nil {
				t.Errorf("count with a query (reads the collection): %s", c.Body)
			}
		case "find":
			if n, ok := c.Body.Lookup("limit").AsInt64OK(); !ok || n != 1 {
				t.Errorf("find without limit 1: %s", c.Body)
			}
		default:
			t.Errorf("unexpected command %s", c.Body)
		}
	}
}

func names(cmds []queryplan.Command) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, c.Name)
	}
	return out
}
