// Package queryplan asks MongoDB how it runs the very commands a program
// sends, and sums up the answer.
//
// A Recorder, set as the driver's command monitor, keeps every command as it
// went on the wire; Explainable turns one into the commands explain accepts
// (driver fields stripped, a write split into one command per statement);
// Explain runs them with executionStats and Parse reduces the reply to what
// a plan check needs: the stages and indexes of the winning plan, whether it
// is multikey, and the keys and documents it examined. Parse understands
// the classic and the slot-based engine's output, aggregations (whole or with
// a $cursor stage) and sharded clusters (per-shard plans, summed).
//
// FerretDB answers explain with its backend's plan (SQLite's or PostgreSQL's),
// which has none of this: Parse reports ErrNotMongoDB for it.
package queryplan

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// Command is one command as the driver sent it.
type Command = mongotest.Command

// Recorder keeps the commands the driver sends. Use Monitor as the client's
// command monitor; it is safe for concurrent use.
type Recorder struct{ cmds mongotest.Commands }

// Monitor returns the command monitor that feeds r.
func (r *Recorder) Monitor() *event.CommandMonitor { return r.cmds.Monitor(nil) }

// Take returns the commands recorded since the last Take.
func (r *Recorder) Take() []Command { return r.cmds.Take() }

// Plan is what explain said about one command.
type Plan struct {
	Stages       []string // stages of the winning plan(s), outermost first; every shard's
	Indexes      []string // names of the indexes the winning plan reads ("_id_" for IDHACK)
	MultiKey     bool     // an index it reads is multikey (on a path the plan uses)
	KeysExamined int64    // index keys examined, over all shards
	DocsExamined int64    // documents examined, over all shards
	Returned     int64    // documents returned (for a write: matched)
}

// Has reports whether the winning plan has stage.
func (p Plan) Has(stage string) bool { return slices.Contains(p.Stages, stage) }

// Uses reports whether the winning plan reads index (by name).
func (p Plan) Uses(index string) bool { return slices.Contains(p.Indexes, index) }

// BlockingSort reports an in-memory sort: every input is read before the
// first result. (SORT_MERGE, which merges sorted index scans, is not one.)
func (p Plan) BlockingSort() bool { return p.Has("SORT") }

// CollScan reports a plan that reads the whole collection.
func (p Plan) CollScan() bool { return p.Has("COLLSCAN") }

// Covered reports a plan answered from index keys alone: no document read.
func (p Plan) Covered() bool {
	return !p.Has("FETCH") && !p.Has("IDHACK") && !p.CollScan() && p.DocsExamined == 0
}

func (p Plan) String() string {
	return fmt.Sprintf("stages %v, indexes %v, multikey %v, keys examined %d, docs examined %d, returned %d",
		p.Stages, p.Indexes, p.MultiKey, p.KeysExamined, p.DocsExamined, p.Returned)
}

// ErrNotMongoDB is Parse's answer to an explain reply without MongoDB's
// query planner output (FerretDB's, for one).
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
