package replay

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
)

// pacedQueue has gaps of 0, 1s, 5ms, 3.995s and 55s between entries; the
// first has no createdAt and is dated by its ObjectId (12:00:00), as the
// consumer dates it.
const pacedQueue = `{"_id":{"$oid":"65e1c340000000000000aa01"},"username":"a"}
{"_id":2,"username":"b","createdAt":{"$date":"2024-03-01T12:00:00Z"}}
{"_id":3,"username":"c","createdAt":{"$date":"2024-03-01T12:00:01Z"}}
{"_id":4,"username":"d","createdAt":{"$date":"2024-03-01T12:00:01.005Z"}}
{"_id":5,"username":"e","createdAt":{"$date":"2024-03-01T12:00:05Z"}}
{"_id":6,"username":"f","createdAt":{"$date":"2024-03-01T12:01:00Z"}}
`

func TestOriginalArrivalInsertsEachEntryAtItsTimeSpedUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	clock := clocktest.NewAuto(start) // only moves when the loader sleeps
	b.inserts.clock = clock
	path := writeTestFile(t, "q.json", pacedQueue)
	l, _, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", Files: []InputFile{{Path: path, Queue: true}},
		Arrival: ArrivalOriginal, Speed: 10, ShiftToNow: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	// At ×10 the entries are due at 0, 0, 100ms, 100.5ms, 500ms and 6s.
	// The one due 0.5ms after another goes in the same insert, which is
	// what keeps a fast replay from making one round trip per entry.
	want := []insertCmd{{docs: 2, at: start}, {docs: 2, at: start.Add(100 * time.Millisecond)},
		{docs: 1, at: start.Add(500 * time.Millisecond)}, {docs: 1, at: start.Add(6 * time.Second)}}
	got := b.inserts.into("score_events")
	if len(got) != len(want) {
		t.Fatalf("inserts %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].docs != want[i].docs || !got[i].at.Equal(want[i].at) {
			t.Errorf("insert %d: %d documents at +%s, want %d at +%s", i, got[i].docs, got[i].at.Sub(start), want[i].docs, want[i].at.Sub(start))
		}
	}
	if l.Inserted() != 6 {
		t.Errorf("inserted %d", l.Inserted())
	}
	// With --shift-to-now each entry is stamped with the moment it was due,
	// so the queue's oldest age is time spent waiting in this replay.
	var docs []struct {
		ID        any       `bson:"_id"`
		CreatedAt time.Time `bson:"createdAt"`
	}
	cur, err := b.db.Collection("score_events").Find(t.Context(), bson.D{{Key: "_id", Value: 6}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(t.Context(), &docs); err != nil || len(docs) != 1 || !docs[0].CreatedAt.Equal(start.Add(6*time.Second)) {
		t.Errorf("last entry %+v (%v), want createdAt %s", docs, err, start.Add(6*time.Second))
	}
}

func TestMaxArrivalNeverSleeps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := clocktest.NewAuto(time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC))
	path := writeTestFile(t, "q.json", pacedQueue)
	if _, _, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", Files: []InputFile{{Path: path, Queue: true}}, Clock: clock}); err != nil {
		t.Fatal(err)
	}
	if len(clock.Armed()) != 0 || len(b.inserts.into("score_events")) != 1 {
		t.Errorf("slept %v, %d inserts; want no sleep and one insert", clock.Armed(), len(b.inserts.into("score_events")))
	}
}
