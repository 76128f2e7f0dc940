package queryplan

import (
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ErrNotExplainable is Explainable's answer for commands explain does not
// take (insert, getMore, …): they have no plan.
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

// statements names the array of statements of the write commands: explain
// takes exactly one statement per command.
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
		cmd := append(bson.D{}, base...)
		out = append(out, append(cmd, bson.E{Key: list, Value: bson.A{v}}))
	}
	return out, nil
}
