package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
)

// TestIndexBuildsCarryNoMaxTimeMS records the createIndexes commands
// EnsureIndexes sends on a client with a 30 s timeout (the suite's), under a
// caller's deadline: none may carry maxTimeMS, since MongoDB aborts a build
// whose createIndexes runs out of it, and on a deep queue every build does.
func TestIndexBuildsCarryNoMaxTimeMS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		deadline time.Duration // 0: none, the client's timeout only
	}{{"client timeout", 0}, {"caller deadline", 5 * time.Minute}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var rec queryplan.Recorder
			db := mongotest.Database(t, mongotest.Options{Monitor: rec.Monitor()})
			colls := Collections{Queue: db.Collection("score_events"), Claims: db.Collection("score_claims"), DeadLetter: db.Collection("score_events_dead")}
			ctx := t.Context()
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			if _, err := EnsureIndexes(ctx, colls, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			builds := 0
			for _, cmd := range rec.Take() {
				if cmd.Name != "createIndexes" {
					continue
				}
				builds++
				if v, err := cmd.Body.LookupErr("maxTimeMS"); err == nil {
					t.Errorf("createIndexes on %s carries maxTimeMS %v", cmd.Collection, v)
				}
			}
			if builds < len(IndexSpecs(colls)) {
				t.Errorf("%d createIndexes sent, want at least %d", builds, len(IndexSpecs(colls)))
			}
		})
	}
}

// TestIndexBuildStopsWaitingWhenCancelled: without a deadline, cancelling
// the caller's context is what ends the wait, and EnsureIndexes says it did
// not finish (the caller's loop then stops).
func TestIndexBuildStopsWaitingWhenCancelled(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	colls := Collections{Queue: db.Collection("score_events"), Claims: db.Collection("score_claims"), DeadLetter: db.Collection("score_events_dead")}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := EnsureIndexes(ctx, colls, testLogger(t))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("EnsureIndexes on a cancelled context: %v, want context.Canceled", err)
	}
}

// TestUntimedKeepsCancellationAndDropsTheDeadline pins what untimed gives
// the driver: no deadline it would send (none under 2^31 ms), and the
// parent's cancellation.
func TestUntimedKeepsCancellationAndDropsTheDeadline(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	ctx, stop := untimed(parent)
	defer stop()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < (1<<31-1)*time.Millisecond {
		t.Errorf("deadline %v (set %t): the driver would send it as maxTimeMS", d, ok)
	}
	cancel()
	<-ctx.Done() // blocks for good if cancellation is lost
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("after the parent's cancellation: %v", ctx.Err())
	}
}

// TestIndexBuildAnswersAreClassified: which createIndexes answers the
// caller retries (unreachable) and which it does not. The errors are built
// as the driver builds them from a server reply (mongo.CommandError, with
// the codes and names of MongoDB's src/mongo/base/error_codes.yml and the
// messages MongoDB writes), plus one a real server gives.
func TestIndexBuildAnswersAreClassified(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want buildOutcome
	}{
		{nil, buildDone},
		// Not retried: the server answered, the build is running or was stopped.
		{mongo.CommandError{Code: 285, Name: "IndexBuildAlreadyInProgress", Message: "Index build already in progress"}, buildRunning},
		{mongo.CommandError{Code: 276, Name: "IndexBuildAborted", Message: "Index build aborted: 5e2c...: operation was interrupted"}, buildInterrupted},
		{mongo.CommandError{Code: 11601, Name: "Interrupted", Message: "operation was interrupted"}, buildInterrupted},
		{mongo.CommandError{Code: 279, Name: "ClientDisconnect", Message: "operation was interrupted because a client disconnected"}, buildInterrupted},
		{mongo.CommandError{Code: 50, Name: "MaxTimeMSExpired", Message: "operation exceeded time limit"}, buildInterrupted},
		{fmt.Errorf("creating index: %w", mongo.CommandError{Code: 276, Name: "IndexBuildAborted"}), buildInterrupted},
		// Not retried: the server will not build this index.
		{mongo.CommandError{Code: 85, Name: "IndexOptionsConflict", Message: "Index with name: leaseUntil_1 already exists with different options"}, buildRefused},
		{mongo.CommandError{Code: 86, Name: "IndexKeySpecsConflict", Message: "An existing index has the same name as the requested index"}, buildRefused},
		{mongo.CommandError{Code: 67, Name: "CannotCreateIndex", Message: "expireAfterSeconds is not supported"}, buildRefused},
		// Retried: the server is away, electing or shutting down.
		{mongo.CommandError{Code: 11602, Name: "InterruptedDueToReplStateChange", Message: "operation was interrupted"}, buildUnreachable},
		{mongo.CommandError{Code: 11600, Name: "InterruptedAtShutdown", Message: "interrupted at shutdown"}, buildUnreachable},
		{mongo.CommandError{Code: 10107, Name: "NotWritablePrimary", Message: "not primary"}, buildUnreachable},
		{mongo.CommandError{Message: "connection reset", Labels: []string{"NetworkError"}}, buildUnreachable},
		{context.Canceled, buildUnreachable},
	} {
		if got := classifyBuild(c.err); got != c.want {
			t.Errorf("%v: classified %d, want %d", c.err, got, c.want)
		}
	}
}

// TestConflictingIndexIsNotRetried asks the embedded server for an index
// whose name is taken by another index: its real answer is a refusal, not
// a reason to retry.
func TestConflictingIndexIsNotRetried(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	coll := db.Collection("conflict")
	if _, err := coll.Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: bson.D{{Key: "a", Value: 1}}, Options: options.Index().SetName("taken")}); err != nil {
		t.Fatal(err)
	}
	_, err := coll.Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: bson.D{{Key: "b", Value: 1}}, Options: options.Index().SetName("taken")})
	if err == nil {
		t.Skip("this server accepts a second index under a taken name")
	}
	if got := classifyBuild(err); got != buildRefused {
		t.Errorf("%v: classified %d, want refused (%d)", err, got, buildRefused)
	}
}
