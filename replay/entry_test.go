package replay

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/extjson"
)

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// canon renders documents (or a slice of them) as canonical Extended JSON,
// which shows every value's type.
func canon(t *testing.T, v any) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBookkeepingFieldsAreStripped(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	raw := mustRaw(t, bson.D{
		{Key: "_id", Value: int32(1)}, {Key: "username", Value: "u"}, {Key: "createdAt", Value: at},
		{Key: "claimToken", Value: "t"}, {Key: "claimedBy", Value: "c"}, {Key: "leaseUntil", Value: at}, {Key: "lockedUntil", Value: at},
		{Key: "attempts", Value: 3}, {Key: "notBefore", Value: at}, {Key: "lastError", Value: "x"}, {Key: "deadLetter", Value: bson.D{}},
		{Key: "processing", Value: true}, {Key: "processingStartedAt", Value: at},
		{Key: "owner", Value: "kept: a producer's field"}, {Key: "payload", Value: bson.D{{Key: "attempts", Value: 1}}},
	})
	stripped := map[string]int{}
	doc, err := prepareEntry(raw, time.Time{}, stripped)
	if err != nil {
		t.Fatal(err)
	}
	want := bson.D{{Key: "_id", Value: int32(1)}, {Key: "username", Value: "u"}, {Key: "createdAt", Value: at},
		{Key: "owner", Value: "kept: a producer's field"}, {Key: "payload", Value: bson.D{{Key: "attempts", Value: 1}}}}
	if canon(t, doc) != canon(t, want) {
		t.Errorf("got  %s\nwant %s", canon(t, doc), canon(t, want))
	}
	if len(stripped) != 10 || stripped["claimToken"] != 1 || stripped["processingStartedAt"] != 1 {
		t.Errorf("stripped counts %v", stripped)
	}
}

func TestRetimingMovesCreatedAtOrAddsIt(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	oid := bson.NewObjectIDFromTimestamp(at)
	// Every timed case's time is at; the untimed one must ignore it.
	plus := at.Add(time.Hour)
	tests := map[string]struct {
		in, want bson.D
	}{
		"explicit createdAt moves": {
			bson.D{{Key: "_id", Value: "a"}, {Key: "createdAt", Value: at}, {Key: "x", Value: 1}},
			bson.D{{Key: "_id", Value: "a"}, {Key: "createdAt", Value: at.Add(time.Hour)}, {Key: "x", Value: 1}},
		},
		"an ObjectId's time becomes an explicit createdAt": {
			bson.D{{Key: "_id", Value: oid}},
			bson.D{{Key: "_id", Value: oid}, {Key: "createdAt", Value: at.Add(time.Hour)}},
		},
		"an untimed entry stays as it is, to be dead-lettered": {
			bson.D{{Key: "_id", Value: "b"}, {Key: "createdAt", Value: "yesterday"}},
			bson.D{{Key: "_id", Value: "b"}, {Key: "createdAt", Value: "yesterday"}},
		},
	}
	for name, tc := range tests {
		got, err := prepareEntry(mustRaw(t, tc.in), plus, map[string]int{})
		if err != nil {
			t.Fatal(err)
		}
		if canon(t, got) != canon(t, tc.want) {
			t.Errorf("%s:\n got %s\nwant %s", name, canon(t, got), canon(t, tc.want))
		}
	}
}

// fixtureEntries is what every mongoexport fixture holds once loaded: the
// bookkeeping gone, every other value with its type. Relaxed mode writes
// int64 values that fit in 32 bits as plain numbers, which read back as
// int32: that is the format's loss, not the loader's.
func fixtureEntries(t *testing.T, relaxed bool) []bson.D {
	t.Helper()
	oid := func(h string) bson.ObjectID { o, _ := bson.ObjectIDFromHex(h); return o }
	dt := func(s string) bson.DateTime {
		tm, _ := time.Parse(time.RFC3339Nano, s)
		return bson.NewDateTimeFromTime(tm)
	}
	dec, _ := bson.ParseDecimal128("19.99")
	small := func(n int64) any {
		if relaxed {
			return int32(n)
		}
		return n
	}
	return []bson.D{
		{{Key: "_id", Value: oid("65e1c2a0f1d2c3b4a5968701")}, {Key: "username", Value: "alice"}, {Key: "createdAt", Value: dt("2024-03-01T12:00:00.123Z")}, {Key: "source", Value: "web"}},
		{{Key: "_id", Value: oid("65e1c2a1f1d2c3b4a5968702")}, {Key: "username", Value: "bob"}, {Key: "createdAt", Value: dt("2024-03-01T12:00:01.5Z")},
			{Key: "payload", Value: bson.D{{Key: "kind", Value: "like"}, {Key: "count", Value: int64(3000000000)}, {Key: "small64", Value: small(7)},
				{Key: "tags", Value: bson.A{"a", "b", int32(3)}}, {Key: "ratio", Value: 0.25}, {Key: "whole", Value: 2.0}, {Key: "amount", Value: dec}}},
			{Key: "requestId", Value: bson.Binary{Subtype: 4, Data: []byte{0x3b, 0x24, 0x1f, 0x01, 0x5a, 0x7e, 0x4c, 0x3d, 0x9b, 0x1e, 0x2f, 0x0a, 0x55, 0x61, 0x77, 0x88}}}},
		{{Key: "_id", Value: oid("65e1c2a2f1d2c3b4a5968703")}, {Key: "username", Value: "alice"}},
		{{Key: "_id", Value: "legacy-42"}, {Key: "username", Value: "carol"}, {Key: "createdAt", Value: dt("1999-12-31T23:59:59Z")}, {Key: "seq", Value: small(42)}},
		{{Key: "_id", Value: oid("65e1c2a4f1d2c3b4a5968705")}, {Key: "username", Value: "dave"}, {Key: "createdAt", Value: dt("2024-03-01T12:00:04Z")}},
	}
}

func TestMongoexportFixturesInEveryModeLoadAsTheSameEntries(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/mongoexport/*.json")
	if len(files) != 6 {
		t.Fatalf("want 6 fixtures, found %v", files)
	}
	for _, path := range files {
		want := fixtureEntries(t, !bytes.Contains([]byte(filepath.Base(path)), []byte("canonical")))
		plan, err := scan(context.Background(), []InputFile{{Path: path, Queue: true}}, false, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if plan.Entries != 5 || plan.DistinctUsers != 4 || plan.Untimed != 0 || !plan.First.Equal(time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC)) {
			t.Errorf("%s: plan %+v", path, plan)
		}
		var got []bson.D
		stripped := map[string]int{}
		err = eachDocument(context.Background(), path, nil, func(raw []byte, _ *extjson.Error) error {
			d, err := prepareEntry(raw, time.Time{}, stripped)
			got = append(got, d)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if canon(t, got) != canon(t, want) {
			t.Errorf("%s:\n got %s\nwant %s", path, canon(t, got), canon(t, want))
		}
		if len(stripped) != 9 {
			t.Errorf("%s: stripped %v, want the 9 bookkeeping fields", path, stripped)
		}
	}
}
