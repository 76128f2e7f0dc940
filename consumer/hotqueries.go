package consumer

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// HotQuery is one of the queries the pipeline runs on every claim round or
// flush, as the command document MongoDB's explain takes, with the index
// meant to serve it. `scorerefresh doctor` explains them; hotqueries_test.go
// checks that their shapes (filter fields and operators, sort, projection)
// are the ones claim.go, lease.go and ack.go really send, so the two cannot
// drift apart unnoticed.
type HotQuery struct {
	Name    string
	Coll    *mongo.Collection
	Command bson.D // a find or delete command, without $db
	Index   string // the IndexSpec name meant to serve it, or IDIndex
}

// DoctorQuery is a HotQuery as the pipeline sends it: with the hints it
// sends and whether its plan is meant to be covered. The doctor explains
// each with the hint production sends, so that it judges the plan
// production runs, not one the planner would pick unhinted.
type DoctorQuery struct {
	HotQuery // Command carries no hint: add Hints[i] to it
	// Hints are the indexes the pipeline hints, in the order it falls back
	// through them when the server refuses one (see hints); after the last
	// it runs unhinted. Nil: the pipeline never hints this query.
	Hints []bson.D
	// Covered: docs/query-plans.md promises the index alone answers it (no
	// document is read).
	Covered bool
}

// IDIndex names the _id index every collection has.
const IDIndex = servertraits.IDIndexName

// Names of the HotQueries.
const (
	QueryClaimWindow = "claim window"
	QueryWindowPaged = "claim window, paging past a blocked head"
	QueryAbsorb      = "absorb"
	QueryAck         = "ack delete by _id"
	QueryLeaseRead   = "lease read of the window's users"
	QueryMalformed   = "malformed-entry scan"
)

// DoctorQueries returns the hot queries as they run on MongoDB (where
// usernames are length-filtered on the server), with placeholder values (a
// username no producer writes, a fresh ObjectId) where the pipeline has real
// ones, and the hints the pipeline sends: the window's list
// (newHints(windowIndex) in New) for the window, its paged form and the
// malformed scan; absorb's list (newHints(absorbIndex, legacyAbsorbIndex));
// the lease read's idIndex (blockedAmong). The ack delete is never hinted.
func DoctorQueries(colls Collections, claimWindow int, now time.Time) []DoctorQuery {
	probe := bson.A{"\x00scorerefresh-doctor"}
	return []DoctorQuery{
		{HotQuery: HotQuery{Name: QueryClaimWindow, Coll: colls.Queue, Index: IndexClaimWindow, Command: bson.D{
			{Key: "find", Value: colls.Queue.Name()},
			{Key: "filter", Value: windowFilter([]string{"\x00scorerefresh-doctor"}, true, nil)},
			{Key: "sort", Value: queueOrder}, {Key: "projection", Value: entryProjection}, {Key: "limit", Value: int64(claimWindow)},
		}}, Hints: []bson.D{windowIndex}, Covered: true},
		{HotQuery: HotQuery{Name: QueryWindowPaged, Coll: colls.Queue, Index: IndexClaimWindow, Command: bson.D{
			{Key: "find", Value: colls.Queue.Name()},
			{Key: "filter", Value: windowFilter([]string{"\x00scorerefresh-doctor"}, true, &position{createdAt: now, id: objectIDValue(bson.NewObjectID())})},
			{Key: "sort", Value: queueOrder}, {Key: "projection", Value: entryProjection}, {Key: "limit", Value: int64(claimWindow)},
		}}, Hints: []bson.D{windowIndex}, Covered: true},
		{HotQuery: HotQuery{Name: QueryMalformed, Coll: colls.Queue, Index: IndexClaimWindow, Command: bson.D{
			{Key: "find", Value: colls.Queue.Name()},
			{Key: "filter", Value: malformedFilter(&now)},
			{Key: "sort", Value: queueOrder}, {Key: "projection", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "limit", Value: int64(malformedScanLimit)},
		}}, Hints: []bson.D{windowIndex}},
		{HotQuery: HotQuery{Name: QueryAbsorb, Coll: colls.Queue, Index: IndexAbsorb, Command: bson.D{
			{Key: "find", Value: colls.Queue.Name()},
			{Key: "filter", Value: bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: probe}}}}},
			{Key: "sort", Value: queueOrder}, {Key: "projection", Value: entryProjection}, {Key: "limit", Value: int64(AbsorbLimit)},
		}}, Hints: []bson.D{absorbIndex, legacyAbsorbIndex}, Covered: true},
		{HotQuery: HotQuery{Name: QueryAck, Coll: colls.Queue, Index: IDIndex, Command: bson.D{
			{Key: "delete", Value: colls.Queue.Name()},
			{Key: "deletes", Value: bson.A{bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: bson.NewObjectID()}}}, {Key: "limit", Value: int32(1)}}}},
		}}},
		{HotQuery: HotQuery{Name: QueryLeaseRead, Coll: colls.Claims, Index: IDIndex, Command: bson.D{
			{Key: "find", Value: colls.Claims.Name()},
			{Key: "filter", Value: blockedFilter(probe, now)},
			{Key: "projection", Value: blockedProjection},
		}}, Hints: []bson.D{idIndex}},
	}
}

func objectIDValue(id bson.ObjectID) bson.RawValue {
	return bson.RawValue{Type: bson.TypeObjectID, Value: id[:]}
}
