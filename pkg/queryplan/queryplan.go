// Package queryplan asks MongoDB how it runs the very commands a program sends: a Recorder
// keeps them as they went on the wire, Explainable turns one into what explain accepts, Explain
// runs that with executionStats and Parse reduces the reply to what a plan check needs. Parse
// reads the classic and slot-based engines, aggregations (whole or with a $cursor stage) and
// sharded clusters; FerretDB's explain (its backend's plan) is ErrNotMongoDB.
package queryplan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

type Command = mongotest.Command

// Recorder keeps the commands the driver sends, until Take returns them.
type Recorder struct{ mongotest.Commands }

func (r *Recorder) Monitor() *event.CommandMonitor { return r.Commands.Monitor(nil) }

// Plan is what explain said about one command.
type Plan struct {
	Stages       []string // stages of the winning plan(s), outermost first; every shard's
	Indexes      []string // names of the indexes the winning plan reads ("_id_" for IDHACK)
	MultiKey     bool     // an index it reads is multikey (on a path the plan uses)
	KeysExamined int64    // index keys examined, over all shards
	DocsExamined int64    // documents examined, over all shards
	Returned     int64    // documents returned (for a write: matched)
}

func (p Plan) Has(stage string) bool { return slices.Contains(p.Stages, stage) }

// Uses reports whether the winning plan reads index (by name).
func (p Plan) Uses(index string) bool { return slices.Contains(p.Indexes, index) }

// BlockingSort reports an in-memory sort: every input is read before the
// first result. (SORT_MERGE, which merges sorted index scans, is not one.)
func (p Plan) BlockingSort() bool { return p.Has("SORT") }

func (p Plan) CollScan() bool { return p.Has("COLLSCAN") }

// Covered reports a plan answered from index keys alone: no document read.
func (p Plan) Covered() bool {
	return !p.Has("FETCH") && !p.Has("IDHACK") && !p.CollScan() && p.DocsExamined == 0
}

func (p Plan) String() string {
	return fmt.Sprintf("stages %v, indexes %v, multikey %v, keys examined %d, docs examined %d, returned %d",
		p.Stages, p.Indexes, p.MultiKey, p.KeysExamined, p.DocsExamined, p.Returned)
}

// ErrNotMongoDB is Parse's answer to an explain reply without MongoDB's planner output (FerretDB's).
var ErrNotMongoDB = errors.New("explain reply has no MongoDB winning plan")

// Explain runs cmd (one of Explainable's) under explain with executionStats.
// A write is planned and executed without writing anything.
func Explain(ctx context.Context, db *mongo.Database, cmd bson.D) (Plan, error) {
	reply, err := db.RunCommand(ctx, bson.D{{Key: "explain", Value: cmd}, {Key: "verbosity", Value: "executionStats"}}).Raw()
	var p Plan
	if err == nil {
		p, err = Parse(reply)
	}
	if err != nil {
		return Plan{}, fmt.Errorf("explaining %s: %w", cmd, err)
	}
	return p, nil
}

// ErrNotExplainable is Explainable's answer for commands with no plan (insert, getMore, …).
var ErrNotExplainable = errors.New("command has no query plan")

// kept lists, per command, the fields explain accepts; the driver's own
// ($db, lsid, $clusterTime, readConcern, writeConcern, …) are dropped.
var kept = map[string][]string{
	"find": {"find", "filter", "sort", "projection", "hint", "skip", "limit", "batchSize",
		"singleBatch", "collation", "min", "max", "let", "allowDiskUse", "returnKey", "showRecordId"},
	"aggregate":     {"aggregate", "pipeline", "cursor", "hint", "collation", "let", "allowDiskUse"},
	"count":         {"count", "query", "limit", "skip", "hint", "collation"},
	"distinct":      {"distinct", "key", "query", "hint", "collation"},
	"findAndModify": {"findAndModify", "query", "sort", "update", "remove", "new", "fields", "upsert", "hint", "collation", "arrayFilters"},
	"update":        {"update", "let"},
	"delete":        {"delete", "let"},
}

// statements names the write commands' statement arrays: explain takes one statement per command.
var statements = map[string]string{"update": "updates", "delete": "deletes"}

// Explainable returns what to explain for c: c itself without the driver's
// fields, or, for a write, one command per statement.
func Explainable(c Command) ([]bson.D, error) {
	fields, ok := kept[c.Name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", c.Name, ErrNotExplainable)
	}
	base := bson.D{}
	for _, f := range fields {
		if v, err := c.Body.LookupErr(f); err == nil {
			base = append(base, bson.E{Key: f, Value: v})
		}
	}
	list, isWrite := statements[c.Name]
	if !isWrite {
		return []bson.D{base}, nil
	}
	arr, ok := c.Body.Lookup(list).ArrayOK()
	if !ok {
		return nil, fmt.Errorf("%s command without %s", c.Name, list)
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", list, err)
	}
	out := make([]bson.D, 0, len(vals))
	for _, v := range vals {
		out = append(out, append(slices.Clone(base), bson.E{Key: list, Value: bson.A{v}}))
	}
	return out, nil
}

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
// rejected plans, the slot-based engine's program, echoes of the command.
var notPlan = map[string]bool{
	"rejectedPlans": true, "slotBasedPlan": true, "allPlansExecution": true,
	"command": true, "originalCommand": true, "parsedQuery": true, "serverInfo": true,
	"executionStats": true,
}

// findWinning collects every winningPlan in doc: one per shard on a sharded
// cluster, one under $cursor in an aggregation the query engine runs in part.
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
		mk, _ := stage.Lookup("isMultiKey").BooleanOK()
		p.MultiKey = p.MultiKey || mk
	}
	for _, key := range stageChildren {
		for _, child := range children(stage.Lookup(key)) {
			collectStages(child, p)
		}
	}
}

// addTotals adds the executionStats totals in doc: the top-level ones, or, where there are none
// (an aggregation's $cursor, each shard of a sharded aggregation), every one found below.
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

// children returns v if it is a document, or its document elements.
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
