// Package queuestate reads how much work the score-event queue holds: its
// depth, the enqueue time of its oldest pending entry and, optionally, the
// dead-letter collection's depth, in the same few round trips whatever the
// queue's size: it can run every second while the queue is in trouble.
//
// Depth is estimatedDocumentCount, collection metadata: it can drift after
// an unclean shutdown and counts orphans during a sharded migration, an error
// of a few entries, where countDocuments would scan the whole index each time.
//
// An entry is dated as the consumer dates it: by createdAt when that is a
// date, by its ObjectId _id's timestamp when createdAt is missing or null.
// One with neither is malformed (the consumer dead-letters it): counted in
// the depth, left out of the oldest age. The oldest entry is two one-document
// finds on the first keys of the queue's index {createdAt, _id, username}.
package queuestate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// Reader reads the queue's state; it is safe for concurrent use.
type Reader struct {
	queue, deadLetter *mongo.Collection
}

// New returns a reader of queue. deadLetter, when not nil, is counted too
// (State.DeadLetters), at one more round trip per Read.
func New(queue, deadLetter *mongo.Collection) *Reader {
	return &Reader{queue: queue, deadLetter: deadLetter}
}

// State is one reading of the queue.
type State struct {
	Depth       int64     // queue documents, estimated (see the package comment)
	Oldest      time.Time // enqueue time of the oldest pending entry; zero when none is dated
	DeadLetters int64     // dead-letter documents, estimated; 0 without a dead-letter collection
}

// OldestAge is how long the oldest pending entry has waited at now; 0 when
// there is none (and never negative: producers' clocks may run ahead).
func (s State) OldestAge(now time.Time) time.Duration {
	if s.Oldest.IsZero() {
		return 0
	}
	return max(0, now.Sub(s.Oldest))
}

// Read takes one reading of the queue and, with a reader of them, the dead letters.
func (r *Reader) Read(ctx context.Context) (State, error) {
	var st State
	var err error
	if st.Depth, err = r.queue.EstimatedDocumentCount(ctx); err != nil {
		return State{}, fmt.Errorf("counting queue entries: %w", err)
	}
	if st.Oldest, err = r.Oldest(ctx); err != nil {
		return State{}, err
	}
	if r.deadLetter != nil {
		if st.DeadLetters, err = r.deadLetter.EstimatedDocumentCount(ctx); err != nil {
			return State{}, fmt.Errorf("counting dead letters: %w", err)
		}
	}
	return st, nil
}

// Oldest returns the enqueue time of the oldest pending entry, dated or
// undated (zero if none).
func (r *Reader) Oldest(ctx context.Context) (time.Time, error) {
	var dated struct {
		CreatedAt time.Time `bson:"createdAt"`
	}
	err := r.queue.FindOne(ctx,
		bson.D{{Key: "createdAt", Value: bson.D{{Key: "$type", Value: "date"}}}},
		options.FindOne().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
			SetProjection(bson.D{{Key: "createdAt", Value: 1}})).Decode(&dated)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return time.Time{}, fmt.Errorf("reading the oldest entry: %w", err)
	}
	// The first entry without createdAt, by its ObjectId. Only ObjectId
	// _ids: other types sort before ObjectIds, and a malformed entry there
	// would hide the undated entries behind it until dead-lettered. Hinted:
	// a planner picking the _id index (which can win the trial while undated
	// entries sit at the head) reads the whole queue once they are gone,
	// every read, until it replans.
	var undated struct {
		ID bson.ObjectID `bson:"_id"`
	}
	query := bson.D{{Key: "createdAt", Value: nil}, {Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}}
	opts := options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}}).SetProjection(bson.D{{Key: "_id", Value: 1}})
	timeIndex := bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}}
	err = r.queue.FindOne(ctx, query, opts.SetHint(servertraits.IndexName(timeIndex))).Decode(&undated)
	if servertraits.RefusesHint(err) { // the index is missing (its build failed): plan freely
		err = r.queue.FindOne(ctx, query, opts.SetHint(nil)).Decode(&undated)
	}
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return dated.CreatedAt, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("reading the oldest undated entry: %w", err)
	case dated.CreatedAt.IsZero() || undated.ID.Timestamp().Before(dated.CreatedAt):
		return undated.ID.Timestamp(), nil
	}
	return dated.CreatedAt, nil
}
