package consumer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestHotQueriesHaveThePipelinesShapes runs a claim round and an ack flush,
// records every command the driver sends, and checks that each HotQuery has
// the shape of one of them: the doctor explains what the pipeline really runs.
func TestHotQueriesHaveThePipelinesShapes(t *testing.T) {
	t.Parallel()
	cmds := &mongotest.Commands{}
	db := mongotest.Database(t, mongotest.Options{Monitor: cmds.Monitor(nil)})
	b := &testBundle{db: db, cmds: cmds, colls: Collections{
		Queue: db.Collection("score_events"), Claims: db.Collection("score_claims"), DeadLetter: db.Collection("score_events_dead"),
	}}
	b.enqueue(t, "ann", "bo", "ann")
	// A window of 2 is full with ann and bo: the malformed scan is bounded.
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: 2}})
	lengthFilter := true // the shapes MongoDB is sent, whatever this server is
	c.claimer.filter = &lengthFilter
	c.claimer.skip["somebody-else"] = time.Now().Add(time.Hour) // a $nin, as in a busy fleet
	b.enqueue(t, strings.Repeat("x", 300))                      // so the malformed scan has a bound
	res, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil)
	if err != nil || len(res.works) != 2 {
		t.Fatalf("claim: %v, %d users", err, len(res.works))
	}
	for _, w := range res.works {
		c.held[w.lease.User] = w.lease
		c.acks.add(outcome{work: w})
	}
	if err := c.flushAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A round paging past a blocked head, as page() sets it up.
	c.claimer.resume = &position{createdAt: time.Now().Add(-time.Hour), id: objectIDValue(bson.NewObjectID())}
	if _, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil); err != nil {
		t.Fatalf("paged claim: %v", err)
	}
	var sent []string
	for _, c := range cmds.All() {
		sent = append(sent, commandShape(c.Body))
	}
	for _, q := range DoctorQueries(b.colls, 500, time.Now()) {
		raw, err := bson.Marshal(q.Command)
		if err != nil {
			t.Fatal(err)
		}
		if want := commandShape(raw); !slices.Contains(sent, want) {
			t.Errorf("%s: shape %s is not among the commands the pipeline sent:\n  %s", q.Name, want, strings.Join(sent, "\n  "))
		}
	}
}

// commandShape reduces a find or delete command to what decides its plan:
// the collection, the filter's fields and operators, the sort and the
// projection; values and limits are left out.
func commandShape(cmd bson.Raw) string {
	elems, _ := cmd.Elements()
	if len(elems) == 0 {
		return ""
	}
	name, coll := elems[0].Key(), elems[0].Value().StringValueOK
	c, _ := coll()
	switch name {
	case "find":
		return fmt.Sprintf("find %s filter=%s sort=%s projection=%s", c,
			skeleton(cmd.Lookup("filter")), cmd.Lookup("sort"), cmd.Lookup("projection"))
	case "delete":
		var qs []string
		vals, _ := cmd.Lookup("deletes").Array().Values()
		for _, v := range vals {
			qs = append(qs, skeleton(v.Document().Lookup("q")))
		}
		slices.Sort(qs)
		return fmt.Sprintf("delete %s q=%s", c, slices.Compact(qs))
	}
	return name
}

func skeleton(v bson.RawValue) string {
	doc, ok := v.DocumentOK()
	if !ok {
		return "?"
	}
	elems, _ := doc.Elements()
	var parts []string
	for _, e := range elems {
		if strings.HasPrefix(e.Key(), "$") {
			parts = append(parts, e.Key())
			continue
		}
		parts = append(parts, e.Key()+":"+skeleton(e.Value()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func objectIDValue(id bson.ObjectID) bson.RawValue {
	return bson.RawValue{Type: bson.TypeObjectID, Value: id[:]}
}
