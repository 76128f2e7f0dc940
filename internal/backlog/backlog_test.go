package backlog

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestGenerateSpreadsEntriesOverTheSpanUpToEnd(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	entries := Generate(Spec{Shape: Diverse, Entries: 100, Users: 10, Span: 100 * time.Second, End: end}, rand.New(rand.NewPCG(1, 2)))
	if len(entries) != 100 {
		t.Fatalf("%d entries, want 100", len(entries))
	}
	if !entries[99].At.Equal(end) || !entries[0].At.Equal(end.Add(-99*time.Second)) {
		t.Errorf("first %v, last %v; want one second apart, the last at %v", entries[0].At, entries[99].At, end)
	}
	for i, e := range entries {
		if e.User < 0 || e.User >= 10 {
			t.Errorf("entry %d: user %d outside [0, 10)", i, e.User)
		}
	}
}

func TestDistinctRepeatsNobodyUntilEveryUserHadAnEntry(t *testing.T) {
	t.Parallel()
	entries := Generate(Spec{Shape: Distinct, Entries: 30, Users: 20}, rand.New(rand.NewPCG(1, 2)))
	seen := map[int]int{}
	for i, e := range entries {
		seen[e.User]++
		if i < 20 && seen[e.User] > 1 {
			t.Fatalf("user %d twice within the first 20 entries", e.User)
		}
	}
	if len(seen) != 20 {
		t.Errorf("%d users, want all 20", len(seen))
	}
}

func TestFirehoseGivesTheHotUserItsShare(t *testing.T) {
	t.Parallel()
	for _, hot := range []float64{0, 0.5, 0.94} {
		pick := Picker(Firehose, rand.New(rand.NewPCG(3, 4)), 1000, hot)
		n := 0
		for range 10000 {
			if pick() == 0 {
				n++
			}
		}
		// Uniform draws land on user 0 one time in 1,000 too.
		if want := 10000 * (hot + (1-hot)/1000); float64(n) < want-300 || float64(n) > want+300 {
			t.Errorf("hot %v: user 0 had %d of 10,000 entries, want about %.0f", hot, n, want)
		}
	}
}

func TestSameSeedSameBacklog(t *testing.T) {
	t.Parallel()
	for _, shape := range []Shape{Firehose, Diverse, Zipf, Mixed, Distinct} {
		spec := Spec{Shape: shape, Entries: 50, Users: 40, Hot: FirehoseShare, End: time.Unix(1e9, 0)}
		a, b := Generate(spec, rand.New(rand.NewPCG(5, 6))), Generate(spec, rand.New(rand.NewPCG(5, 6)))
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s: two backlogs from one seed differ", shape)
		}
	}
}

func TestActivityScoresWhatItWrites(t *testing.T) {
	t.Parallel()
	entries := Generate(Spec{Shape: Diverse, Entries: 500, Users: 50}, rand.New(rand.NewPCG(7, 8)))
	name := func(i int) string { return fmt.Sprintf("u%d", i) }
	docs, want := Activity(entries, name, rand.New(rand.NewPCG(9, 10)), 2)
	got := map[string]float64{}
	for _, d := range docs {
		doc := d.(bson.D)
		got[doc[0].Value.(string)] += doc[1].Value.(float64) + 2
	}
	if len(want) != len(got) || len(docs) <= len(want) {
		t.Fatalf("%d documents for %d users (want more documents than users, one per user at least), %d scored", len(docs), len(got), len(want))
	}
	for u, w := range want {
		if got[u] != w {
			t.Errorf("%s: want %v, the documents add up to %v", u, w, got[u])
		}
	}
	for _, e := range entries {
		if _, ok := want[name(e.User)]; !ok {
			t.Errorf("user %s has an entry but no document", name(e.User))
		}
	}
}

func TestQueueDocsAreEntriesAsProducersWriteThem(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	doc := QueueDocs([]Entry{{User: 7, At: at}}, func(i int) string { return fmt.Sprint("user-", i) }, "test")[0].(bson.D)
	m := map[string]any{}
	for _, e := range doc {
		m[e.Key] = e.Value
	}
	if m["username"] != "user-7" || m["createdAt"] != at || m["source"] != "test" || m["_id"].(bson.ObjectID).Timestamp() != at {
		t.Errorf("queue document %v", doc)
	}
}
