package ops

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestListDeadLettersFiltersNewestFirstWithoutWholeDocuments(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	now := time.Now()
	populate(t, c, now)
	l, err := ListDeadLetters(t.Context(), c.DeadLetter, Filter{Reasons: []string{"max_attempts"}}, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if l.Matching != 2 || !l.MatchingExact || len(l.DeadLetters) != 1 || l.DeadLetters[0].ID != "d2" {
		t.Fatalf("list %+v: want 2 matching, the newest (d2) shown", l)
	}
	r := l.DeadLetters[0]
	if r.Username == nil || *r.Username != "bo" || r.Reason != "max_attempts" || r.Attempts != 5 || r.Error != "boom" || r.CreatedAt == nil {
		t.Errorf("row %+v", r)
	}
	all, err := ListDeadLetters(t.Context(), c.DeadLetter, Filter{Since: now.Add(-90 * time.Minute)}, 10, 100)
	if err != nil || len(all.DeadLetters) != 1 || all.DeadLetters[0].ID != "d3" || all.DeadLetters[0].Username != nil || all.DeadLetters[0].UserNote == "" {
		t.Errorf("since 90m ago: %+v, %v: want d3 alone, its non-string username described", all, err)
	}
	none, err := ListDeadLetters(t.Context(), c.DeadLetter, Filter{User: "bo", Until: now.Add(-3 * time.Hour)}, 10, 100)
	if err != nil || none.Matching != 0 || none.DeadLetters == nil {
		t.Errorf("bo before 3h ago: %+v, %v: want none (and an empty list, not null)", none, err)
	}
}

func TestShowFindsADeadLetterByItsOrOriginalID(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	oid := bson.NewObjectID()
	mustInsert(t, c, "dead",
		bson.D{{Key: "_id", Value: oid}, {Key: "username", Value: "ann"}, {Key: "blob", Value: strings.Repeat("z", 5000)}},
		bson.D{{Key: "_id", Value: "renamed"}, {Key: "deadLetter", Value: bson.D{{Key: "originalId", Value: int32(42)}}}},
	)
	for arg, want := range map[string]string{oid.Hex(): oid.Hex(), "42": "renamed", `{"$numberInt":"42"}`: "renamed", "renamed": "renamed"} {
		ids, err := IDCandidates(arg)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := ShowDeadLetters(t.Context(), c.DeadLetter, ids)
		if err != nil || len(docs) != 1 || idString(docs[0].Lookup("_id")) != want {
			t.Errorf("show %s: %d documents, %v: want %s", arg, len(docs), err, want)
		}
	}
	docs, _ := ShowDeadLetters(t.Context(), c.DeadLetter, bson.A{oid})
	var out bytes.Buffer
	if err := WriteExtJSON(&out, docs); err != nil || !strings.Contains(out.String(), strings.Repeat("z", 5000)) || !strings.Contains(out.String(), `"$oid"`) {
		t.Errorf("show prints %q (%v): want the whole document as Extended JSON", out.String()[:min(out.Len(), 200)], err)
	}
}

func TestPurgeDeletesTheMatchesInBatches(t *testing.T) {
	t.Parallel()
	var cmds mongotest.Commands
	c := testColls(t, cmds.Monitor(nil))
	deadLetters(t, c, 25)
	populate(t, c, time.Now())
	cmds.Reset()
	var progress []int64
	n, err := Purge(t.Context(), c.DeadLetter, Filter{Reasons: []string{"max_attempts"}}, 0, 10, func(d int64) { progress = append(progress, d) })
	if err != nil || n != 27 {
		t.Fatalf("purged %d, %v: want the 27 max_attempts dead letters", n, err)
	}
	if got := mongotest.ByName(cmds.Take()); got["delete"] != 3 {
		t.Errorf("commands %v: want 3 deletes for 27 dead letters in batches of 10", got)
	}
	if left := countDocs(t, c.DeadLetter); left != 1 {
		t.Errorf("%d dead letters left, want the malformed one", left)
	}
	if len(progress) != 3 || progress[2] != 27 {
		t.Errorf("progress %v", progress)
	}
	deadLetters(t, c, 5)
	if n, err := Purge(t.Context(), c.DeadLetter, Filter{}, 3, 10, nil); err != nil || n != 3 {
		t.Errorf("purge --limit 3: %d, %v", n, err)
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"24h":                  now.Add(-24 * time.Hour),
		"2026-03-01":           time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		"2026-03-01T06:30:00Z": time.Date(2026, 3, 1, 6, 30, 0, 0, time.UTC),
	} {
		got, err := ParseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-5m", "2026-13-01"} {
		if _, err := ParseTime(bad, now); err == nil {
			t.Errorf("ParseTime(%q): no error", bad)
		}
	}
}
