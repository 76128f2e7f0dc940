package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StaleLeaseTTL is how long after its leaseUntil the TTL monitor removes a
// lease document (a backoff whose entries another replica acknowledged).
const StaleLeaseTTL = 24 * time.Hour

// Capabilities is what the server turned out to support, logged once at start.
type Capabilities struct{ TTLIndexes, PartialIndexes bool }

// IndexSpec is one index the pipeline relies on, with the query it serves
// (`scorerefresh doctor` checks this list). Fallback is built when the
// server rejects Model (TTL); Optional indexes are skipped instead.
type IndexSpec struct {
	Name     string // stable identifier, one of the Index* constants
	Coll     *mongo.Collection
	Model    mongo.IndexModel
	Fallback *mongo.IndexModel
	Optional bool
	Serves   string
}

// Names of the IndexSpecs.
const (
	IndexClaimWindow  = "queue.claim_window"
	IndexAbsorb       = "queue.absorb"
	IndexLeaseUntil   = "claims.lease_until"
	IndexAttempts     = "claims.attempts"
	IndexDeadLetterAt = "deadletter.at"
)

// IndexSpecs returns the indexes EnsureIndexes builds, in build order.
func IndexSpecs(colls Collections) []IndexSpec {
	leaseUntil := bson.D{{Key: "leaseUntil", Value: 1}}
	return []IndexSpec{
		{Name: IndexClaimWindow, Coll: colls.Queue,
			Model:  mongo.IndexModel{Keys: windowIndex},
			Serves: "claim window: oldest entries of claimable users, sorted and filtered on the index alone; SLI oldest age"},
		{Name: IndexAbsorb, Coll: colls.Queue,
			Model:  mongo.IndexModel{Keys: absorbIndex},
			Serves: "absorb: every pending entry of the users just claimed"},
		{Name: IndexLeaseUntil, Coll: colls.Claims,
			Model:    mongo.IndexModel{Keys: leaseUntil, Options: options.Index().SetExpireAfterSeconds(int32(StaleLeaseTTL.Seconds()))},
			Fallback: &mongo.IndexModel{Keys: leaseUntil},
			Serves:   "live leases and backoffs, read by every claim round; TTL removes stale ones"},
		{Name: IndexAttempts, Coll: colls.Claims, Optional: true,
			Model: mongo.IndexModel{Keys: bson.D{{Key: "attempts", Value: 1}}, Options: options.Index().
				SetPartialFilterExpression(bson.D{{Key: "attempts", Value: bson.D{{Key: "$gt", Value: 0}}}})},
			Serves: "operators listing users that are failing (only those are indexed)"},
		{Name: IndexDeadLetterAt, Coll: colls.DeadLetter,
			Model:  mongo.IndexModel{Keys: bson.D{{Key: "deadLetter.at", Value: 1}}},
			Serves: "dead letters by time, for operators"},
	}
}

// RetiredIndex is an index an earlier release built and this one uses only
// while ReplacedBy is missing. Never dropped (the release before may still
// run during a rollout): `scorerefresh doctor` names it for an operator.
type RetiredIndex struct {
	Coll       *mongo.Collection
	Keys       bson.D
	ReplacedBy bson.D
	LastUsedBy string // the last release that builds and hints it
	Serves     string // what it served
}

// RetiredIndexes lists the indexes earlier releases built and this one does not.
func RetiredIndexes(colls Collections) []RetiredIndex {
	return []RetiredIndex{
		{Coll: colls.Queue, Keys: legacyAbsorbIndex, ReplacedBy: absorbIndex, LastUsedBy: "0.2.0", Serves: "absorb"},
	}
}

// EnsureIndexes creates the indexes the queries need (idempotent; without one a
// query is only slower) and reports the server's optional index features. It
// fails only when the server is unreachable or ctx ended: call again later (not
// so a build running or aborted, which starting again would keep from ever
// existing). Each build is waited for, untimed: run it beside the consumer.
func EnsureIndexes(ctx context.Context, colls Collections, log *slog.Logger) (Capabilities, error) {
	caps := Capabilities{TTLIndexes: true, PartialIndexes: true}
	var unreachable error
	for _, s := range IndexSpecs(colls) {
		where := []any{"collection", s.Coll.Name(), "keys", fmt.Sprint(s.Model.Keys)}
		name, err := createIndex(ctx, s, s.Model, log)
		outcome := classifyBuild(err)
		if outcome == buildRefused && s.Fallback != nil {
			caps.TTLIndexes = false
			log.Info("index option not supported by this server; building the index without it", append(where, "err", err)...)
			name, err = createIndex(ctx, s, *s.Fallback, log)
			if outcome = classifyBuild(err); outcome != buildUnreachable {
				outcome = buildRefused // only an unreachable server is retried; any other answer is judged by its error below
			}
		}
		switch {
		case outcome == buildUnreachable:
			if ctx.Err() != nil {
				return caps, fmt.Errorf("creating index on %s: %w", s.Coll.Name(), ctx.Err())
			}
			unreachable = fmt.Errorf("creating index on %s: %w", s.Coll.Name(), err)
		case outcome == buildRunning:
			log.Info("index build already running on the server; not starting another, the queries use the index once it is built", append(where, "err", err)...)
		case outcome == buildInterrupted:
			log.Warn("the server aborted this index build (interrupted: killOp, dropIndexes, a maxTimeMS or a client that went away); not starting it again, queries still work, slower; build it by hand (docs/runbook.md, Building the indexes before a deploy)",
				append(where, "serves", s.Serves, "err", err)...)
		case err != nil && s.Optional:
			caps.PartialIndexes = false
			log.Info("optional index not supported by this server; skipped", append(where, "serves", s.Serves, "err", err)...)
		case err != nil:
			log.Warn("index not created; queries still work, slower", append(where, "serves", s.Serves, "err", err)...)
		default:
			log.Debug("index ready", "collection", s.Coll.Name(), "index", name)
		}
	}
	return caps, unreachable
}

const slowBuildNotice = 30 * time.Second // a createIndexes this long says its build is running

func createIndex(ctx context.Context, s IndexSpec, model mongo.IndexModel, log *slog.Logger) (string, error) {
	buildCtx, cancel := untimed(ctx)
	defer cancel()
	notice := time.AfterFunc(slowBuildNotice, func() {
		log.Info("index build running on the server; the consumer drains meanwhile, slower. On a deep queue, build the indexes before deploying (docs/runbook.md, Building the indexes before a deploy)",
			"collection", s.Coll.Name(), "keys", fmt.Sprint(model.Keys), "serves", s.Serves, "waited", slowBuildNotice)
	})
	defer notice.Stop()
	return s.Coll.Indexes().CreateOne(buildCtx, model)
}

// indexBuildDeadline overrides the caller's or the client's (timeoutMS): a deadline
// goes as maxTimeMS, which aborts a build, unless past the server's 2^31-1 ms (~24.9 days).
const indexBuildDeadline = 365 * 24 * time.Hour

// untimed returns the context of one index build: cancelled with parent (the
// driver closes the connection), with no deadline sent as maxTimeMS.
func untimed(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(parent), time.Now().Add(indexBuildDeadline))
	stop := context.AfterFunc(parent, cancel)
	return ctx, func() { stop(); cancel() }
}

// buildOutcome is what a createIndexes answer means for the caller.
type buildOutcome int

const (
	buildDone        buildOutcome = iota
	buildUnreachable              // the server could not be reached, or is electing or shutting down: try again later
	buildRunning                  // a build of this index is already running on the server
	buildInterrupted              // the server aborted the build
	buildRefused                  // the server will not build it (an option it lacks, a conflicting index)
)

// classifyBuild sorts a createIndexes answer. An aborted build is not "unreachable":
// someone stopped it, and starting it again would repeat that. InterruptedDueToReplStateChange
// and InterruptedAtShutdown stay transient: a createIndexes sent again waits for the build.
func classifyBuild(err error) buildOutcome {
	if err == nil {
		return buildDone
	}
	var se mongo.ServerError
	server := errors.As(err, &se)
	switch {
	case server && se.HasErrorCode(285): // IndexBuildAlreadyInProgress
		return buildRunning
	case server && slices.ContainsFunc([]int{276, 11601, 279, 50}, se.HasErrorCode): // IndexBuildAborted, Interrupted, ClientDisconnect, MaxTimeMSExpired
		return buildInterrupted
	case transient(err) || errors.Is(err, context.Canceled):
		return buildUnreachable
	}
	return buildRefused
}

// DetectChangeStreams reports whether the server can watch the queue.
func DetectChangeStreams(ctx context.Context, queue *mongo.Collection) bool {
	stream, err := queue.Watch(ctx, mongo.Pipeline{})
	if err != nil {
		return false
	}
	_ = stream.Close(ctx)
	return true
}

// HotQuery is a query run every claim round or flush, as the command explain
// takes, with the index meant to serve it (`scorerefresh doctor` explains them).
type HotQuery struct {
	Name    string
	Coll    *mongo.Collection
	Command bson.D // a find or delete command, without $db
	Index   string // the IndexSpec name meant to serve it, or IDIndex
}

// DoctorQuery is a HotQuery with the hints the pipeline sends, so the
// doctor judges the plan production runs, and whether it is meant covered.
type DoctorQuery struct {
	HotQuery          // Command carries no hint: add Hints[i] to it
	Hints    []bson.D // the indexes hinted in fallback order (see hints), then none; nil: never hinted
	Covered  bool     // docs/query-plans.md promises the index alone answers it
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

// DoctorQueries returns the hot queries as they run on MongoDB (usernames
// length-filtered on the server), with placeholders (a username no producer
// writes, a fresh ObjectId) for the pipeline's values, and the hints it sends.
func DoctorQueries(colls Collections, claimWindow int, now time.Time) []DoctorQuery {
	probe := bson.A{"\x00scorerefresh-doctor"}
	nin := []string{"\x00scorerefresh-doctor"}
	find := func(name, index string, filter, projection bson.D, limit int, covered bool, hints ...bson.D) DoctorQuery {
		return DoctorQuery{HotQuery: HotQuery{Name: name, Coll: colls.Queue, Index: index, Command: bson.D{
			{Key: "find", Value: colls.Queue.Name()}, {Key: "filter", Value: filter},
			{Key: "sort", Value: queueOrder}, {Key: "projection", Value: projection}, {Key: "limit", Value: int64(limit)},
		}}, Hints: hints, Covered: covered}
	}
	oid := bson.NewObjectID()
	paged := &position{createdAt: now, id: bson.RawValue{Type: bson.TypeObjectID, Value: oid[:]}}
	return []DoctorQuery{
		find(QueryClaimWindow, IndexClaimWindow, windowFilter(nin, true, nil), entryProjection, claimWindow, true, windowIndex),
		find(QueryWindowPaged, IndexClaimWindow, windowFilter(nin, true, paged), entryProjection, claimWindow, true, windowIndex),
		find(QueryMalformed, IndexClaimWindow, malformedFilter(&now), bson.D{{Key: "_id", Value: 1}}, malformedScanLimit, false, windowIndex),
		find(QueryAbsorb, IndexAbsorb, bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: probe}}}}, entryProjection, AbsorbLimit,
			true, absorbIndex, legacyAbsorbIndex),
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
