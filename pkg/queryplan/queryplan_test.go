package queryplan

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/bsonfuzz"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// The replies in testdata are MongoDB's explain output in each shape Parse
// must read (trimmed by hand to the fields that matter and a few that must
// be ignored; the express-*.json ones are recorded replies, each naming its
// source in _fixtureSource): the classic engine, the slot-based engine, a write, an
// aggregation with a $cursor stage, a sharded find and a sharded
// aggregation; and FerretDB's, which has no MongoDB plan.
func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file       string
		stages     []string
		indexes    []string
		multiKey   bool
		keys, docs int64
		covered    bool
	}{
		// The rejected plan's SORT and index, and allPlansExecution's
		// counts, are not the winning plan's.
		{"find-classic.json", []string{"LIMIT", "PROJECTION_COVERED", "IXSCAN"}, []string{"createdAt_1__id_1_username_1"}, false, 651, 0, true},
		// slotBasedPlan is the engine's program, not stages.
		{"find-sbe.json", []string{"FETCH", "IXSCAN"}, []string{"_id_"}, false, 41, 3, false},
		{"delete-idhack.json", []string{"DELETE", "IDHACK"}, []string{"_id_"}, false, 1, 1, false},
		{"aggregate-cursor.json", []string{"PROJECTION_COVERED", "IXSCAN"}, []string{"username_1_at_1_points_1"}, true, 13, 0, true},
		// Per-shard plans; the top-level totals already sum the shards.
		{"find-sharded.json", []string{"SHARD_MERGE_SORT", "LIMIT", "PROJECTION_COVERED", "SHARDING_FILTER", "IXSCAN",
			"LIMIT", "PROJECTION_COVERED", "SHARDING_FILTER", "IXSCAN"}, []string{"createdAt_1__id_1_username_1"}, false, 25, 0, true},
		// No top-level totals: each shard's are added.
		{"aggregate-sharded.json", nil, []string{"username_1"}, false, 12, 5, false},
		// MongoDB 8's express path, recorded (see _fixtureSource): the
		// index named, its keyPattern a string; a clustered collection's
		// names none.
		{"express-ixscan-8.0.json", []string{"EXPRESS_IXSCAN"}, []string{"a_1_b_1"}, false, 1, 1, false},
		{"express-clustered-8.0.json", []string{"EXPRESS_CLUSTERED_IXSCAN"}, []string{"_id_"}, false, 0, 1, false},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			p, err := Parse(readReply(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if c.stages != nil && !slices.Equal(p.Stages, c.stages) {
				t.Errorf("stages %v, want %v", p.Stages, c.stages)
			}
			if !slices.Equal(p.Indexes, c.indexes) || p.MultiKey != c.multiKey {
				t.Errorf("indexes %v multikey %v, want %v %v", p.Indexes, p.MultiKey, c.indexes, c.multiKey)
			}
			if p.KeysExamined != c.keys || p.DocsExamined != c.docs {
				t.Errorf("examined %d keys %d docs, want %d %d", p.KeysExamined, p.DocsExamined, c.keys, c.docs)
			}
			if p.Covered() != c.covered || p.BlockingSort() || p.CollScan() {
				t.Errorf("covered %v (want %v), blocking sort %v, collection scan %v", p.Covered(), c.covered, p.BlockingSort(), p.CollScan())
			}
		})
	}
	if _, err := Parse(readReply(t, "ferretdb.json")); !errors.Is(err, ErrNotMongoDB) {
		t.Errorf("FerretDB's reply: %v, want ErrNotMongoDB", err)
	}
}

func readReply(t *testing.T, name string) bson.Raw {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON(data, false, &raw); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return raw
}

// TestRecordedCommandsBecomeExplainable records what the driver really
// sends for a find and an unordered bulk delete: the driver's session and
// database fields are dropped, and the delete becomes one command per
// statement (explain takes one). On MongoDB each is then explained; on
// FerretDB explain's answer is recognised as not MongoDB's.
func TestRecordedCommandsBecomeExplainable(t *testing.T) {
	t.Parallel()
	var rec Recorder
	db := mongotest.Database(t, mongotest.Options{Monitor: rec.Monitor()})
	coll := db.Collection("q")
	if _, err := coll.InsertMany(t.Context(), []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	cur, err := coll.Find(t.Context(), bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}},
		options.Find().SetLimit(5).SetHint(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	_ = cur.Close(t.Context())
	if _, err := coll.BulkWrite(t.Context(), []mongo.WriteModel{
		mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}),
		mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}),
	}); err != nil {
		t.Fatal(err)
	}
	var explained []bson.D
	for _, c := range rec.Take() {
		cmds, err := Explainable(c)
		if errors.Is(err, ErrNotExplainable) {
			if c.Name != "insert" {
				t.Errorf("%s: not explainable", c.Name)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		explained = append(explained, cmds...)
	}
	if len(explained) != 3 {
		t.Fatalf("explainable: %v, want the find and two single-statement deletes", explained)
	}
	for _, cmd := range explained {
		for _, e := range cmd {
			if e.Key == "$db" || e.Key == "lsid" || e.Key == "$clusterTime" || e.Key == "writeConcern" {
				t.Errorf("%v carries the driver's %s", cmd, e.Key)
			}
		}
	}
	if explained[0][0].Key != "find" || len(explained[1]) != 2 || explained[1][0].Key != "delete" {
		t.Errorf("explainable commands %v", explained)
	}
	for _, cmd := range explained {
		p, err := Explain(t.Context(), db, cmd)
		if errors.Is(err, ErrNotMongoDB) {
			continue // FerretDB: its plans are its backend's
		}
		if err != nil {
			t.Fatal(err)
		}
		if !p.Uses("_id_") || p.CollScan() {
			t.Errorf("%v: %v, want the _id index", cmd, p)
		}
	}
}

// FuzzParse feeds Parse and Explainable arbitrary documents (bsonfuzz.Doc)
// seeded with the replies in testdata: whatever a server or a recorded
// command holds, they return an answer or an error, never a panic.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no replies in testdata: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON(data, false, &raw); err != nil {
			f.Fatalf("%s: %v", file, err)
		}
		f.Add([]byte(raw))
	}
	keys := []string{"queryPlanner", "winningPlan", "queryPlan", "stage", "inputStage", "inputStages", "shards",
		"indexName", "isMultiKey", "executionStats", "totalKeysExamined", "totalDocsExamined", "nReturned",
		"stages", "$cursor", "command", "rejectedPlans", "find", "filter", "updates", "deletes", "hint"}
	strs := []string{"IXSCAN", "FETCH", "IDHACK", "EXPRESS_IXSCAN", "EXPRESS_DELETE", "COLLSCAN", "SORT", "_id_", "{ _id: 1 }"}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc := bsonfuzz.Doc(data, keys, strs)
		if p, err := Parse(doc); err == nil {
			_ = p.String()
			_, _, _ = p.Covered(), p.BlockingSort(), p.CollScan()
		}
		for name := range kept {
			_, _ = Explainable(Command{Name: name, Body: doc})
		}
	})
}
