package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/consumer"
)

// plan is what an explain's winning plan says about index use.
type plan struct {
	recognized bool     // the reply has a MongoDB query plan at all
	collscan   bool     // some stage scans the collection
	indexes    []string // index names used ("_id_" for the _id fast paths)
	keys       [][]string
}

// readPlan walks queryPlanner.winningPlan (through shards, and the query
// plan MongoDB 7+ nests under it) for scan stages, skipping rejected plans.
func readPlan(explain bson.Raw) plan {
	var p plan
	wp, err := explain.LookupErr("queryPlanner", "winningPlan")
	if err != nil {
		return p
	}
	p.walk(wp)
	return p
}

func (p *plan) walk(v bson.RawValue) {
	switch v.Type {
	case bson.TypeArray:
		vals, _ := v.Array().Values()
		for _, x := range vals {
			p.walk(x)
		}
	case bson.TypeEmbeddedDocument:
		doc := v.Document()
		p.stage(doc)
		elems, _ := doc.Elements()
		for _, e := range elems {
			if e.Key() != "rejectedPlans" {
				p.walk(e.Value())
			}
		}
	}
}

func (p *plan) stage(doc bson.Raw) {
	stage, ok := doc.Lookup("stage").StringValueOK()
	if !ok {
		return
	}
	p.recognized = true
	switch {
	case stage == "COLLSCAN":
		p.collscan = true
	case strings.Contains(stage, "IDHACK"):
		p.indexes = append(p.indexes, consumer.IDIndex)
	case strings.HasPrefix(stage, "EXPRESS") && doc.Lookup("indexName").Type == 0:
		// MongoDB 8's express path for a point query on _id names no index.
		p.indexes = append(p.indexes, consumer.IDIndex)
	}
	if name, ok := doc.Lookup("indexName").StringValueOK(); ok {
		p.indexes = append(p.indexes, name)
		p.keys = append(p.keys, keyList(doc.Lookup("keyPattern")))
	}
}

// uses reports whether the plan reads the index with these keys.
func (p plan) uses(name string, keys []string) bool {
	if name == consumer.IDIndex && slices.Contains(p.indexes, consumer.IDIndex) {
		return true
	}
	return slices.ContainsFunc(p.keys, func(k []string) bool { return slices.Equal(k, keys) })
}

// planChecks explains each of the pipeline's hot queries
// (consumer.HotQueries) and checks the winning plan reads the index meant
// for it. Explain with queryPlanner verbosity runs nothing.
func planChecks(ctx context.Context, cfg DoctorConfig, ix *indexCache, info *serverInfo) []Check {
	specs := map[string][]string{consumer.IDIndex: {"_id:1"}}
	for _, s := range consumer.IndexSpecs(cfg.Colls.consumer()) {
		specs[s.Name] = keyList(s.Model.Keys)
	}
	var checks []Check
	for _, q := range consumer.HotQueries(cfg.Colls.consumer(), cfg.ClaimWindow, time.Now()) {
		c := Check{Name: "plan: " + q.Name}
		want := specs[q.Index]
		switch {
		case !ix.exists[q.Coll.Name()]:
			c.Status, c.Detail = Warn, q.Coll.Name()+" does not exist yet: nothing to explain"
		default:
			c.Status, c.Detail, c.Fix = explainQuery(ctx, cfg, q, want, info)
		}
		checks = append(checks, c)
	}
	return checks
}

func explainQuery(ctx context.Context, cfg DoctorConfig, q consumer.HotQuery, want []string, info *serverInfo) (status, detail, fix string) {
	raw, err := cfg.Colls.DB.RunCommand(ctx, bson.D{{Key: "explain", Value: q.Command}, {Key: "verbosity", Value: "queryPlanner"}}).Raw()
	if err != nil {
		return Warn, "the server cannot explain it: " + err.Error(), ""
	}
	return planVerdict(readPlan(raw), q, want, info.ferret != "")
}

func planVerdict(p plan, q consumer.HotQuery, want []string, ferret bool) (status, detail, fix string) {
	wantDesc := "{" + strings.Join(want, ", ") + "}"
	switch {
	case !p.recognized && ferret:
		return Warn, "FerretDB's explain shows no index plan; intended: " + wantDesc, ""
	case !p.recognized:
		return Warn, "the explain output has no plan this check recognises; intended: " + wantDesc, ""
	case p.uses(q.Index, want):
		return OK, "uses " + wantDesc, ""
	case p.collscan:
		return Fail, "scans the collection instead of using " + wantDesc,
			"create the index (see the index checks above), then run the doctor again"
	case len(p.indexes) == 0:
		return Warn, "the plan reads no index (an empty collection?); intended: " + wantDesc, ""
	}
	return Warn, fmt.Sprintf("the planner chose %s over %s; on an empty or small collection it may, check again once there is data", strings.Join(p.indexes, ", "), wantDesc),
		"if it persists with data, compare with `explain(\"executionStats\")` in mongosh"
}
