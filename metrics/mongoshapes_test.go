package metrics_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// TestSamplerCommandShapes pins each command of an SLI sample as MongoDB's
// planner and limits need it (the sampler sends the same on every
// server): counts read the collection's metadata, never its documents;
// each find constrains the queue's time index on its leading field
// (createdAt), sorts in that index's order, returns one document in a
// reply that closes its cursor, and hints by index name where it hints.
func TestSamplerCommandShapes(t *testing.T) {
	t.Parallel()
	_, cmds := sampleRecorded(t, 20, 3)
	timeIndex := servertraits.IndexName(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}})
	for _, tc := range []struct {
		name  string
		match func(queryplan.Command) bool
		hint  string   // "" where it sends none
		sort  []string // the sort's fields, in order
	}{
		{name: "queue depth", match: isCount("score_events")},
		{name: "dead-letter depth", match: isCount("score_events_dead")},
		{name: "oldest dated entry", match: func(c queryplan.Command) bool {
			_, err := c.Body.LookupErr("filter", "createdAt", "$type")
			return c.Name == "find" && err == nil
		}, sort: []string{"createdAt", "_id"}},
		{name: "oldest undated entry", match: func(c queryplan.Command) bool {
			return c.Name == "find" && c.Body.Lookup("filter", "createdAt").Type == bson.TypeNull
		}, hint: timeIndex, sort: []string{"_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var found []queryplan.Command
			for _, c := range cmds {
				if tc.match(c) {
					found = append(found, c)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d commands of a sample are the %s, want 1: %v", len(found), tc.name, cmds)
			}
			c := found[0].Body
			if found[0].Name == "count" {
				if _, err := c.LookupErr("query"); err == nil {
					t.Errorf("count with a query (reads the collection): %s", c)
				}
				return
			}
			if _, err := c.LookupErr("filter", "createdAt"); err != nil {
				t.Errorf("filter does not constrain createdAt, the time index's leading field: %s", c)
			}
			if n, ok := c.Lookup("limit").AsInt64OK(); !ok || n != 1 {
				t.Errorf("limit %s, want 1: %s", c.Lookup("limit"), c)
			}
			if single, ok := c.Lookup("singleBatch").BooleanOK(); !ok || !single {
				t.Errorf("not singleBatch (its cursor may stay open): %s", c)
			}
			hint, err := c.LookupErr("hint")
			switch {
			case tc.hint == "" && err == nil:
				t.Errorf("hints %s, want no hint", hint)
			case tc.hint != "" && !hasName(hint, tc.hint):
				t.Errorf("hint %s, want the name %q", hint, tc.hint)
			}
			sort, _ := c.Lookup("sort").DocumentOK()
			elems, _ := sort.Elements()
			var got []string
			for _, e := range elems {
				got = append(got, e.Key())
			}
			if len(got) != len(tc.sort) {
				t.Errorf("sort %v, want %v", got, tc.sort)
				return
			}
			for i := range got {
				if got[i] != tc.sort[i] {
					t.Errorf("sort %v, want %v", got, tc.sort)
				}
			}
		})
	}
}

func isCount(coll string) func(queryplan.Command) bool {
	return func(c queryplan.Command) bool { return c.Name == "count" && c.Collection == coll }
}

func hasName(v bson.RawValue, name string) bool {
	s, ok := v.StringValueOK()
	return ok && s == name
}
