package replay

import (
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

func TestSnapshotThenReplayGivesTheSameDocuments(t *testing.T) {
	t.Parallel()
	src, dst := setup(t), setup(t)
	at := time.Date(2024, 3, 1, 12, 0, 0, 123e6, time.UTC)
	entry := func(i int, user string) bson.D {
		return bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(at.Add(time.Duration(i) * time.Second))}, {Key: "username", Value: user},
			{Key: "createdAt", Value: at.Add(time.Duration(i) * time.Second)}, {Key: "seq", Value: int64(i)}, {Key: "n32", Value: int32(i)}}
	}
	queue := []any{
		entry(0, "alice"), entry(1, "bob"),
		bson.D{{Key: "_id", Value: "string-id"}, {Key: "username", Value: "carol"}, {Key: "createdAt", Value: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)},
			{Key: "big", Value: int64(1) << 40}, {Key: "ratio", Value: 2.0},
			{Key: "nested", Value: bson.D{{Key: "list", Value: bson.A{int32(1), "two", bson.D{{Key: "three", Value: int64(3)}}}}, {Key: "nil", Value: nil}}},
			{Key: "uuid", Value: bson.Binary{Subtype: bson.TypeBinaryUUID, Data: []byte("0123456789abcdef")}}},
	}
	if os.Getenv(mongotest.EnvURI) != "" {
		// FerretDB drops the connection on a decimal128 insert: decimals
		// round-trip against a real MongoDB only (the encoder and decoder
		// are covered by the mongoexport fixtures and pkg/extjson's tests).
		dec, _ := bson.ParseDecimal128("1234.5600")
		queue = append(queue, bson.D{{Key: "_id", Value: "decimal"}, {Key: "username", Value: "dan"}, {Key: "amount", Value: dec}})
	}
	insertDocs(t, src.db.Collection("score_events"), queue...)
	insertDocs(t, src.db.Collection("user_activity"),
		bson.D{{Key: "username", Value: "alice"}, {Key: "points", Value: int32(3)}, {Key: "at", Value: at}},
		bson.D{{Key: "username", Value: "bob"}, {Key: "points", Value: 2.5}, {Key: "at", Value: at}})

	dir := t.TempDir() + "/snap"
	m, err := Snapshot(t.Context(), SnapshotConfig{DB: src.db, Queue: "score_events", Sources: []string{"user_activity"}, Out: dir, Gzip: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 2 || !m.Files[0].Queue || m.Files[0].File != "score_events.json.gz" || m.Files[0].Documents != int64(len(queue)) {
		t.Fatalf("manifest %+v", m)
	}
	files, _, err := ResolveInput(dir, "events_replayed")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := load(t, LoadConfig{DB: dst.db, Queue: "events_replayed", Files: files}); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{"score_events": "events_replayed", "user_activity": "user_activity"} {
		want, got := allDocs(t, src.db.Collection(from)), allDocs(t, dst.db.Collection(to))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s -> %s differs:\n got %s\nwant %s", from, to, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
		}
	}
}

func TestInsertsGoInBatchesOfAThousand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	if _, err := Generate(GenerateConfig{Shape: ShapeDiverse, Entries: 2500, Users: 40, Out: dir, End: time.Now()}); err != nil {
		t.Fatal(err)
	}
	files, _, err := ResolveInput(dir, "score_events")
	if err != nil {
		t.Fatal(err)
	}
	l, plan, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", Files: files})
	if err != nil {
		t.Fatal(err)
	}
	sizes := func(cmds []insertCmd) (out []int) {
		for _, c := range cmds {
			out = append(out, c.docs)
		}
		return out
	}
	if got := sizes(b.inserts.into("score_events")); len(got) != 3 || got[0] != 1000 || got[1] != 1000 || got[2] != 500 {
		t.Errorf("queue inserts of %v documents, want [1000 1000 500]", got)
	}
	if got := sizes(b.inserts.into("user_activity")); len(got) != 1 || int64(got[0]) != plan.Files[1].Documents {
		t.Errorf("source inserts of %v documents, want one of %d", got, plan.Files[1].Documents)
	}
	if l.Inserted() != 2500 || plan.DistinctUsers != 40 {
		t.Errorf("inserted %d entries of %d users", l.Inserted(), plan.DistinctUsers)
	}
}

const badLines = `{"_id":1,"username":"a","createdAt":{"$date":"2024-03-01T12:00:00Z"}}
{"_id":2,"username":"b","createdAt":{"$date":"2024-03-01T12:00:01Z"}}
{"_id":3,"username":"c","createdAt":{"$date":"the third of March"}}
{"_id":4,"username":"d","createdAt":{"$date":"2024-03-01T12:00:03Z"}}

{"_id":5,"username":
{"_id":6,"username":"f","createdAt":{"$date":"2024-03-01T12:00:05Z"}}
`

func TestABadLineStopsTheLoadNamingFileAndLineWithNothingLoaded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path := writeTestFile(t, "queue.json", badLines)
	_, _, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", Files: []InputFile{{Path: path, Queue: true}}})
	if err == nil || !strings.Contains(err.Error(), "queue.json:3:") || !strings.Contains(err.Error(), "nothing was loaded") || !strings.Contains(err.Error(), "--skip-bad") {
		t.Fatalf("error %v: want one naming queue.json:3, saying nothing was loaded and offering --skip-bad", err)
	}
	if n, _ := b.db.Collection("score_events").CountDocuments(t.Context(), bson.D{}); n != 0 {
		t.Errorf("%d entries loaded, want none", n)
	}
}

func TestSkipBadLoadsTheRestAndListsEverySkippedLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path := writeTestFile(t, "queue.json", badLines)
	l, plan, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", Files: []InputFile{{Path: path, Queue: true}}, SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	if plan.SkippedTotal != 2 || len(plan.Skipped) != 2 || plan.Skipped[0].Line != 3 || plan.Skipped[1].Line != 6 ||
		plan.Skipped[0].File != path || !strings.Contains(plan.Skipped[0].Error, "the third of March") {
		t.Errorf("skipped %d: %+v", plan.SkippedTotal, plan.Skipped)
	}
	if n, _ := b.db.Collection("score_events").CountDocuments(t.Context(), bson.D{}); n != 4 || l.Inserted() != 4 || plan.Entries != 4 {
		t.Errorf("%d entries in the queue, %d inserted, %d planned; want 4", n, l.Inserted(), plan.Entries)
	}
}

func TestBookkeepingIsStrippedFromAMongoexportFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The relaxed fixture less its decimal, which FerretDB cannot store.
	data, err := os.ReadFile("testdata/mongoexport/relaxed.json")
	if err != nil {
		t.Fatal(err)
	}
	path := writeTestFile(t, "export.json", strings.Replace(string(data), `,"amount":{"$numberDecimal":"19.99"}`, "", 1))
	l, _, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", Files: []InputFile{{Path: path, Queue: true}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range allDocs(t, b.db.Collection("score_events")) {
		for _, f := range []string{"attempts", "claimToken", "claimedBy", "leaseUntil", "lastError", "processingBy", "processingSince", "notBefore", "deadLetter"} {
			if strings.Contains(doc, `"`+f+`"`) {
				t.Errorf("%s left in %s", f, doc)
			}
		}
	}
	if got := l.stripped; got["claimToken"] != 1 || got["deadLetter"] != 1 || len(got) != 9 {
		t.Errorf("stripped %v", got)
	}
}

func TestShiftToNowKeepsGapsAndMovesWindowedSourceTimes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	queue := writeTestFile(t, "q.json", `{"_id":1,"username":"a","createdAt":{"$date":"2024-03-01T12:00:00Z"}}
{"_id":2,"username":"b","createdAt":{"$date":"2024-03-01T12:05:00Z"}}
`)
	activity := writeTestFile(t, "user_activity.json", `{"_id":1,"username":"a","points":1,"at":{"$date":"2024-03-01T11:00:00Z"},"other":{"$date":"2024-03-01T11:00:00Z"}}`)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := clocktest.NewAuto(now)
	l, _, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", ShiftToNow: true, Clock: clock,
		TimeFields: map[string][]string{"user_activity": {"at"}},
		Files:      []InputFile{{Path: queue, Queue: true}, {Path: activity, Collection: "user_activity"}}})
	if err != nil {
		t.Fatal(err)
	}
	shift := now.Sub(t0.Add(5 * time.Minute))
	if l.shift != shift {
		t.Errorf("shift %s, want %s", l.shift, shift)
	}
	var got []struct {
		CreatedAt time.Time `bson:"createdAt"`
	}
	cur, _ := b.db.Collection("score_events").Find(t.Context(), bson.D{})
	if err := cur.All(t.Context(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].CreatedAt.Equal(now.Add(-5*time.Minute)) || !got[1].CreatedAt.Equal(now) {
		t.Errorf("createdAt after the shift: %v, want %s and %s", got, now.Add(-5*time.Minute), now)
	}
	var src struct {
		At    time.Time `bson:"at"`
		Other time.Time `bson:"other"`
	}
	if err := b.db.Collection("user_activity").FindOne(t.Context(), bson.D{}).Decode(&src); err != nil {
		t.Fatal(err)
	}
	if !src.At.Equal(t0.Add(-time.Hour).Add(shift)) || !src.Other.Equal(t0.Add(-time.Hour)) {
		t.Errorf("source at %s (want shifted to %s), other %s (want untouched)", src.At, t0.Add(-time.Hour).Add(shift), src.Other)
	}
}

func TestAFailedInsertSaysWhatIsInTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertDocs(t, b.db.Collection("score_events"), bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: "already here"}})
	path := writeTestFile(t, "q.json", `{"_id":3,"username":"c"}
{"_id":1,"username":"a"}
{"_id":4,"username":"d"}
`)
	l, _, err := load(t, LoadConfig{DB: b.db, Queue: "score_events", Files: []InputFile{{Path: path, Queue: true}}})
	if err == nil || !strings.Contains(err.Error(), "1 of 3 documents of "+path+" are in") || !strings.Contains(err.Error(), "--drop") {
		t.Fatalf("error %v", err)
	}
	if got := l.LoadedSoFar(); got != path+": 1 of 3 documents" {
		t.Errorf("loaded so far: %q", got)
	}
}
