package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// plan is what an explain's winning plan says about index use.
type plan struct {
	recognized bool       // the reply has a MongoDB query plan at all
	collscan   bool       // some stage scans the collection
	fetches    bool       // some stage reads documents, not only index keys
	stages     []string   // every stage of the winning plan, outermost first; every shard's
	indexes    []string   // index names used ("_id_" for the _id fast paths)
	keys       [][]string // key patterns of the indexes read, as keyList writes them
}

// maxPlanDepth bounds the walk: a real plan is a few stages deep, and a
// reply nested deeper is not one this check can judge.
const maxPlanDepth = 64

// planChildren are the fields through which a stage holds the stages it
// reads from: classic (inputStage, inputStages), the slot-based engine's
// queryPlan (MongoDB 7+), a sharded cluster's shards[].winningPlan, and
// the branching stages. Everything else (rejectedPlans, slotBasedPlan,
// filters, which may themselves hold a field named "stage") is not the
// winning plan.
var planChildren = []string{"queryPlan", "inputStage", "inputStages", "shards", "winningPlan",
	"thenStage", "elseStage", "outerStage", "innerStage"}

// readPlan walks queryPlanner.winningPlan. It reads every field with the
// accessors that report a type mismatch instead of panicking: a server's
// reply is data, and MongoDB 8 changed keyPattern to a string in express
// stages.
func readPlan(explain bson.Raw) plan {
	var p plan
	wp, err := explain.LookupErr("queryPlanner", "winningPlan")
	if err != nil {
		return p
	}
	for _, d := range childDocs(wp) {
		p.walk(d, 0)
	}
	return p
}

func (p *plan) walk(doc bson.Raw, depth int) {
	if depth > maxPlanDepth {
		return
	}
	p.stage(doc)
	for _, key := range planChildren {
		v, err := doc.LookupErr(key)
		if err != nil {
			continue
		}
		for _, child := range childDocs(v) {
			p.walk(child, depth+1)
		}
	}
}

func (p *plan) stage(doc bson.Raw) {
	stage, ok := doc.Lookup("stage").StringValueOK()
	if !ok {
		return
	}
	p.recognized = true
	p.stages = append(p.stages, stage)
	name, named := doc.Lookup("indexName").StringValueOK()
	switch {
	case stage == "COLLSCAN":
		p.collscan, p.fetches = true, true
	case stage == "FETCH":
		p.fetches = true
	case stage == "IDHACK" || stage == "CLUSTERED_IXSCAN" || stage == "EXPRESS_CLUSTERED_IXSCAN":
		// A clustered collection is stored in _id order and has no _id_
		// index: its CLUSTERED_ stages read it by _id directly, naming no index.
		p.indexes, p.fetches = append(p.indexes, consumer.IDIndex), true
	case strings.HasPrefix(stage, "EXPRESS_"):
		// MongoDB 8's express path (EXPRESS_IXSCAN, and EXPRESS_UPDATE and
		// EXPRESS_DELETE for writes) serves point queries from an index it
		// names in indexName, with keyPattern as a string. It reads the
		// document unless it says the projection is covered.
		if covered, _ := doc.Lookup("projectionCovered").BooleanOK(); !covered {
			p.fetches = true
		}
		if !named {
			p.indexes = append(p.indexes, consumer.IDIndex)
		}
	}
	if named {
		p.indexes = append(p.indexes, name)
	}
	if keys, ok := keyPattern(doc.Lookup("keyPattern")); ok {
		p.keys = append(p.keys, keys)
	}
}

// uses reports whether the plan reads the index with these keys.
func (p plan) uses(name string, keys []string) bool {
	if name == consumer.IDIndex && slices.Contains(p.indexes, consumer.IDIndex) {
		return true
	}
	return slices.ContainsFunc(p.keys, func(k []string) bool { return slices.Equal(k, keys) })
}

// covered reports a plan answered from index keys alone.
func (p plan) covered() bool {
	return p.recognized && !p.fetches && (len(p.indexes) > 0 || len(p.keys) > 0)
}

func (p plan) describe() string {
	return strings.Join(p.stages, " ← ")
}

// childDocs returns v if it is a document, its documents if it is an array.
func childDocs(v bson.RawValue) []bson.Raw {
	if d, ok := v.DocumentOK(); ok {
		return []bson.Raw{d}
	}
	a, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, err := a.Values()
	if err != nil {
		return nil
	}
	var out []bson.Raw
	for _, x := range vals {
		if d, ok := x.DocumentOK(); ok {
			out = append(out, d)
		}
	}
	return out
}

// planChecks explains each of the pipeline's hot queries
// (consumer.DoctorQueries) with the hint production sends and checks the
// winning plan reads the index meant for it, without reading documents
// where the plan is meant to be covered. Explain with queryPlanner
// verbosity runs nothing.
func planChecks(ctx context.Context, cfg DoctorConfig, ix *indexCache, info *serverInfo) []Check {
	specs := map[string][]string{consumer.IDIndex: {"_id:1"}}
	for _, s := range consumer.IndexSpecs(cfg.Colls.consumer()) {
		specs[s.Name] = keyList(s.Model.Keys)
	}
	var checks []Check
	for _, q := range consumer.DoctorQueries(cfg.Colls.consumer(), cfg.ClaimWindow, time.Now()) {
		c := Check{Name: "plan: " + q.Name, Status: Warn, Detail: q.Coll.Name() + " does not exist yet: nothing to explain"}
		if ix.exists[q.Coll.Name()] {
			c.Status, c.Detail, c.Fix = explainQuery(ctx, cfg, q, specs[q.Index], info)
		}
		checks = append(checks, c)
	}
	return checks
}

// explainQuery explains q with each of its hints in turn, as the pipeline
// falls back through them when the server refuses one (an index missing or
// still being built), and unhinted after the last.
func explainQuery(ctx context.Context, cfg DoctorConfig, q consumer.DoctorQuery, want []string, info *serverInfo) (status, detail, fix string) {
	var refused []string
	for i := 0; ; i++ {
		cmd := q.Command
		hinted := i < len(q.Hints)
		if hinted {
			cmd = append(slices.Clone(cmd), bson.E{Key: "hint", Value: servertraits.IndexName(q.Hints[i])}) // by name, as the pipeline hints
		}
		raw, err := cfg.Colls.DB.RunCommand(ctx, bson.D{{Key: "explain", Value: cmd}, {Key: "verbosity", Value: "queryPlanner"}}).Raw()
		if hinted && servertraits.RefusesHint(err) { // the error on which the pipeline moves to its next hint
			refused = append(refused, "{"+strings.Join(keyList(q.Hints[i]), ", ")+"}")
			continue
		}
		if err != nil {
			return Warn, "the server cannot explain it: " + err.Error(), ""
		}
		status, detail, fix = planVerdict(readPlan(raw), q, want, !info.traits.ExplainsPlans())
		if len(refused) == 0 {
			return status, detail, fix
		}
		next := "no hint"
		if hinted {
			next = "{" + strings.Join(keyList(q.Hints[i]), ", ") + "}"
		}
		detail = fmt.Sprintf("the server refuses the hint %s (no such index, or its build is running), so the service hints %s instead: %s",
			strings.Join(refused, ", then "), next, detail)
		if status == OK {
			status, fix = Warn, "build the missing index (see the index checks above), then run the doctor again"
		}
		return status, detail, fix
	}
}

func planVerdict(p plan, q consumer.DoctorQuery, want []string, ferret bool) (status, detail, fix string) {
	wantDesc := "{" + strings.Join(want, ", ") + "}"
	switch {
	case !p.recognized && ferret:
		return Warn, "FerretDB's explain shows no index plan; intended: " + wantDesc, ""
	case !p.recognized:
		return Warn, "the explain output has no plan this check recognises; intended: " + wantDesc, ""
	case p.collscan:
		// Checked before the index: on a sharded cluster one shard may
		// scan while the others use the index.
		return Fail, "scans the collection instead of using " + wantDesc + " (" + p.describe() + ")",
			"create the index (see the index checks above), then run the doctor again"
	case p.uses(q.Index, want) && q.Covered && !p.covered():
		return Warn, "uses " + wantDesc + " but reads documents (" + p.describe() + "), where the index alone should answer it: an array username makes the index multikey",
			"see \"When a producer writes an array username\" in docs/query-plans.md: rebuild the index in a quiet period"
	case p.uses(q.Index, want) && q.Covered:
		return OK, "uses " + wantDesc + ", covered (" + p.describe() + ")", ""
	case p.uses(q.Index, want):
		return OK, "uses " + wantDesc + " (" + p.describe() + ")", ""
	case len(p.indexes) == 0 && len(p.keys) == 0:
		return Warn, "the plan reads no index (an empty collection?); intended: " + wantDesc, ""
	}
	chosen := p.indexes
	if len(chosen) == 0 {
		for _, k := range p.keys {
			chosen = append(chosen, "{"+strings.Join(k, ", ")+"}")
		}
	}
	return Warn, fmt.Sprintf("the planner chose %s over %s; on an empty or small collection it may, check again once there is data", strings.Join(chosen, ", "), wantDesc),
		"if it persists with data, compare with `explain(\"executionStats\")` in mongosh"
}
