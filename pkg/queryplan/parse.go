package queryplan

import (
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Parse sums up an explain reply (verbosity executionStats).
func Parse(reply bson.Raw) (Plan, error) {
	var p Plan
	if !findWinning(reply, &p) {
		return Plan{}, ErrNotMongoDB
	}
	addTotals(reply, &p)
	return p, nil
}

// notPlan are the parts of an explain reply that are not the winning plan:
// the alternatives the planner rejected, the slot-based engine's internal
// program, and echoes of the command.
var notPlan = map[string]bool{
	"rejectedPlans": true, "slotBasedPlan": true, "allPlansExecution": true,
	"command": true, "originalCommand": true, "parsedQuery": true, "serverInfo": true,
	"executionStats": true,
}

// findWinning collects every winningPlan in doc: one per shard on a sharded
// cluster, one under $cursor in an aggregation that the query engine runs
// only in part.
func findWinning(doc bson.Raw, p *Plan) bool {
	found := false
	elems, _ := doc.Elements()
	for _, e := range elems {
		if notPlan[e.Key()] {
			continue
		}
		if e.Key() == "winningPlan" {
			if d, ok := e.Value().DocumentOK(); ok {
				collectStages(d, p)
				found = true
			}
			continue
		}
		for _, child := range children(e.Value()) {
			found = findWinning(child, p) || found
		}
	}
	return found
}

// stageChildren are the fields through which a plan stage holds others.
var stageChildren = []string{"queryPlan", "inputStage", "inputStages", "shards", "winningPlan",
	"thenStage", "elseStage", "outerStage", "innerStage"}

func collectStages(stage bson.Raw, p *Plan) {
	if s, ok := stage.Lookup("stage").StringValueOK(); ok {
		p.Stages = append(p.Stages, s)
		name, ok := stage.Lookup("indexName").StringValueOK()
		if !ok && (s == "IDHACK" || strings.HasPrefix(s, "EXPRESS")) {
			// _id lookups that skip planning (MongoDB 8's express path
			// also serves single-field unique indexes, and then names them).
			name, ok = "_id_", true
		}
		if ok && !slices.Contains(p.Indexes, name) {
			p.Indexes = append(p.Indexes, name)
		}
		if mk, _ := stage.Lookup("isMultiKey").BooleanOK(); mk {
			p.MultiKey = true
		}
	}
	for _, key := range stageChildren {
		for _, child := range children(stage.Lookup(key)) {
			collectStages(child, p)
		}
	}
}

// addTotals adds the executionStats totals in doc: the top-level ones, or,
// where there are none (an aggregation's $cursor, each shard of a sharded
// aggregation), every one found below.
func addTotals(doc bson.Raw, p *Plan) {
	es, _ := doc.Lookup("executionStats").DocumentOK()
	if keys, ok := es.Lookup("totalKeysExamined").AsInt64OK(); ok {
		docs, _ := es.Lookup("totalDocsExamined").AsInt64OK()
		returned, _ := es.Lookup("nReturned").AsInt64OK()
		p.KeysExamined += keys
		p.DocsExamined += docs
		p.Returned += returned
		return
	}
	elems, _ := doc.Elements()
	for _, e := range elems {
		if e.Key() != "command" && e.Key() != "queryPlanner" {
			for _, child := range children(e.Value()) {
				addTotals(child, p)
			}
		}
	}
}

// children returns v if it is a document, its document elements if it is an
// array, nothing otherwise.
func children(v bson.RawValue) []bson.Raw {
	if d, ok := v.DocumentOK(); ok {
		return []bson.Raw{d}
	}
	a, _ := v.ArrayOK()
	vals, _ := a.Values()
	var out []bson.Raw
	for _, x := range vals {
		if d, ok := x.DocumentOK(); ok {
			out = append(out, d)
		}
	}
	return out
}
