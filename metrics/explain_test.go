package metrics_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
)

// sampleRecorded builds the queue and indexes the service builds, with
// entries dated by createdAt and undated ones (dated by their
// ObjectId), and returns the commands of one SLI sample.
func sampleRecorded(t *testing.T, dated, undated int) (*mongo.Database, []queryplan.Command) {
	t.Helper()
	rec := &queryplan.Recorder{}
	db := mongotest.Database(t, mongotest.Options{Monitor: rec.Monitor()})
	colls := consumer.Collections{Queue: db.Collection("score_events"), Claims: db.Collection("score_claims"), DeadLetter: db.Collection("score_events_dead")}
	if _, err := consumer.EnsureIndexes(t.Context(), colls, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	var docs []any
	base := time.Now().Add(-time.Hour)
	for i := range dated {
		docs = append(docs, bson.D{{Key: "username", Value: "u"}, {Key: "createdAt", Value: base.Add(time.Duration(i) * time.Millisecond)}})
	}
	for range undated {
		docs = append(docs, bson.D{{Key: "username", Value: "u"}})
	}
	if _, err := colls.Queue.InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s := metrics.NewSampler(metrics.SamplerConfig{Queue: colls.Queue, DeadLetter: colls.DeadLetter}, metrics.NewSLI(reg, nil), metrics.NewConsumer(reg), nil)
	rec.Take()
	if err := s.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db, rec.Take()
}

// TestSamplerQueryShapes: one sample is four commands whatever the queue
// holds, two metadata counts and two finds of one document; the undated one
// hints the queue's time index.
func TestSamplerQueryShapes(t *testing.T) {
	t.Parallel()
	_, cmds := sampleRecorded(t, 50, 5)
	var counts, finds int
	for _, c := range cmds {
		switch c.Name {
		case "count":
			counts++
			if _, err := c.Body.LookupErr("query"); err == nil {
				t.Errorf("count with a query (reads the collection): %s", c.Body)
			}
		case "find":
			finds++
			if n, ok := c.Body.Lookup("limit").AsInt64OK(); !ok || n != 1 {
				t.Errorf("find without limit 1: %s", c.Body)
			}
			if _, err := c.Body.LookupErr("filter", "createdAt", "$type"); err != nil && c.Body.Lookup("hint").Type == 0 {
				t.Errorf("the undated entries' find carries no hint: %s", c.Body)
			}
		default:
			t.Errorf("unexpected %s", c.Body)
		}
	}
	if counts != 2 || finds != 2 {
		t.Errorf("%d counts and %d finds, want 2 and 2", counts, finds)
	}
}

// TestSamplerQueryPlans explains one sample's commands on a real MongoDB,
// with and without undated entries: the counts read collection metadata,
// the finds the first keys of the time index and at most two documents.
func TestSamplerQueryPlans(t *testing.T) {
	t.Parallel()
	mongotest.RequireMongoDBURI(t)
	for _, undated := range []int{0, 200} {
		db, cmds := sampleRecorded(t, 3000, undated)
		mongotest.RequireMongoDB(t, db)
		for _, c := range cmds {
			explained, err := queryplan.Explainable(c)
			if err != nil {
				t.Fatal(err)
			}
			p, err := queryplan.Explain(t.Context(), db, explained[0])
			if errors.Is(err, queryplan.ErrNotMongoDB) && c.Name == "count" {
				continue // a fast count has no winning plan on some versions
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Name == "count" {
				if p.CollScan() || p.DocsExamined > 0 || p.KeysExamined > 0 {
					t.Errorf("%d undated: count %s: %v, want metadata only", undated, c.Body, p)
				}
				continue
			}
			if !p.Uses("createdAt_1__id_1_username_1") || p.BlockingSort() || p.KeysExamined > 4 || p.DocsExamined > 2 {
				t.Errorf("%d undated: %s:\n  %v\n  want the time index, no sort, at most 4 keys and 2 documents", undated, c.Body, p)
			}
		}
	}
}
