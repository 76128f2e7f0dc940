package scoring

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// WriteBatch is Write for results, in two round trips per chunk of MaxBatchUsers
// (a find of every version, an unordered bulk write guarding each; one more when
// a write was lost or refused, see settle). outcomes holds each user written or
// skipped (newer, as in Write), retry those to retry with Write (lost races, with
// OnConflict, or refusals); unless err is set every user is in exactly one.
func (s *Store) WriteBatch(ctx context.Context, results map[string]Result, refreshedAt time.Time) (outcomes map[string]WriteOutcome, retry []string, err error) {
	return s.WriteBatchAfter(ctx, nil, results, refreshedAt) // nil: read in each chunk
}

// WriteBatchAfter is WriteBatch over prior, as WriteAfter is Write's, in one round trip; a user whose
// document was written since is in retry, never skipped by its stamp (the caller's WriteAfter says why).
func (s *Store) WriteBatchAfter(ctx context.Context, prior Prior, results map[string]Result, refreshedAt time.Time) (outcomes map[string]WriteOutcome, retry []string, err error) {
	outcomes = make(map[string]WriteOutcome, len(results))
	for _, chunk := range sortedChunks(slices.Collect(maps.Keys(results))) {
		r, err := s.writeChunk(ctx, prior, chunk, results, refreshedAt, outcomes)
		if retry = append(retry, r...); err != nil {
			return outcomes, retry, err
		}
	}
	return outcomes, retry, nil
}

// writeChunk is WriteBatch for users, sorted.
func (s *Store) writeChunk(ctx context.Context, prior Prior, users []string, results map[string]Result, refreshedAt time.Time, outcomes map[string]WriteOutcome) (retry []string, err error) {
	unlock, err := s.locks.lock(ctx, users...)
	if err != nil {
		return nil, fmt.Errorf("waiting for other writes of the scores of %d users: %w", len(users), err)
	}
	defer unlock()

	stored := map[string]ScoreDoc(prior)
	if prior == nil {
		if stored, err = s.readMany(ctx, users, bson.D{{Key: "version", Value: 1}, {Key: "refreshedAt", Value: 1}}); err != nil {
			return nil, err
		}
	}
	var docs []ScoreDoc
	for _, u := range users {
		doc := newScoreDoc(u, results[u], refreshedAt)
		cur, found := stored[u]
		if prior != nil {
			doc = causalAfter(doc, cur, found)
		}
		if found && cur.RefreshedAt.After(doc.RefreshedAt) {
			s.skipped(u, cur.RefreshedAt, doc.RefreshedAt)
			outcomes[u] = WriteSkippedNewer
			continue
		}
		doc.Version = cur.Version + 1 // 1 when absent
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		return nil, nil
	}
	return s.bulkGuarded(ctx, docs, prior != nil, outcomes)
}

// readMany reads users' score documents (projected) in one find: a batch size
// above what can match, so the server closes the cursor after the first reply.
func (s *Store) readMany(ctx context.Context, users []string, projection bson.D) (map[string]ScoreDoc, error) {
	noteRoundTrip(ctx)
	opts := options.Find().SetBatchSize(int32(len(users) + 1))
	if projection != nil {
		opts.SetProjection(projection)
	}
	var docs []ScoreDoc
	cur, err := s.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: users}}}}, opts)
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the score documents of %d users: %w", len(users), err)
	}
	byUser := make(map[string]ScoreDoc, len(docs))
	for _, d := range docs {
		byUser[d.Username] = d
	}
	return byUser, nil
}

// bulkGuarded writes each of docs with an upsert guarded by {_id, version: read}
// (absent: 0), all in one command: a guard that no longer matches makes the upsert
// insert a second _id, a duplicate key error that says whose write lost the race.
func (s *Store) bulkGuarded(ctx context.Context, docs []ScoreDoc, after bool, outcomes map[string]WriteOutcome) (retry []string, err error) {
	// Unknown (the server did not answer) reads as MongoDB: the bulk
	// upsert is correct anywhere, only slower on FerretDB.
	_ = s.cfg.Traits.Probe(ctx, s.coll.Database())
	if s.cfg.Traits.CheapUpserts() {
		return s.bulkWrite(ctx, docs, false, after, outcomes)
	}
	// FerretDB takes ~150 ms for each upsert that inserts (measured on the
	// embedded server): new users' documents go in an insert of their own.
	for _, insert := range []bool{true, false} {
		part := slices.DeleteFunc(slices.Clone(docs), func(d ScoreDoc) bool { return (d.Version == 1) != insert })
		if len(part) == 0 {
			continue
		}
		r, err := s.bulkWrite(ctx, part, insert, after, outcomes)
		if retry = append(retry, r...); err != nil {
			return retry, err
		}
	}
	return retry, nil
}

// bulkWrite sends docs in one unordered command: inserts of first documents, or guarded upserts.
func (s *Store) bulkWrite(ctx context.Context, docs []ScoreDoc, insert, after bool, outcomes map[string]WriteOutcome) (retry []string, err error) {
	models := make([]mongo.WriteModel, len(docs))
	for i, d := range docs {
		if insert {
			models[i] = &mongo.InsertOneModel{Document: d}
			continue
		}
		// Plain equality, not $eq: a username is a string, never read as an
		// operator, and servers that push only plain _id equality down to
		// storage (FerretDB) would otherwise scan the collection per statement.
		models[i] = s.cfg.Traits.UpdateByID(bson.D{{Key: "_id", Value: d.Username}, {Key: "version", Value: d.Version - 1}}, scoreSet(d), true)
	}
	noteRoundTrip(ctx)
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	switch {
	case err == nil && res.InsertedCount+res.MatchedCount+res.UpsertedCount == int64(len(docs)):
		upserted := slices.Collect(maps.Values(res.UpsertedIDs)) // the usernames
		for _, d := range docs {
			outcomes[d.Username] = writtenOutcome(insert || slices.Contains(upserted, any(d.Username)))
		}
		return nil, nil
	case err == nil || errors.As(err, &bwe) && bwe.WriteConcernError == nil:
		return s.settle(ctx, docs, after, outcomes)
	}
	if insert {
		return nil, fmt.Errorf("inserting the first scores of %d users: %w", len(docs), err)
	}
	return nil, fmt.Errorf("writing the scores of %d users: %w", len(docs), err)
}

// settle reads docs back to learn which a bulk write that reported lost or refused
// writes wrote (FerretDB 1.24 stops an unordered update at its first error, reports
// it at the wrong index and counts nothing). A document holding what we sent is
// ours; one whose version moved is a conflict, skipped if from a recompute begun no
// earlier (a retry would write twice for one refresh). The rest are retried; after
// a prior read (after), all not ours are, as stamps order nothing (see Prior).
func (s *Store) settle(ctx context.Context, docs []ScoreDoc, after bool, outcomes map[string]WriteOutcome) (retry []string, err error) {
	users := make([]string, len(docs))
	for i, d := range docs {
		users[i] = d.Username
	}
	stored, err := s.readMany(ctx, users, nil)
	if err != nil {
		return nil, fmt.Errorf("checking which score writes of a bulk write happened: %w", err)
	}
	for _, d := range docs {
		cur, found := stored[d.Username]
		switch {
		case found && sameDoc(cur, d):
			outcomes[d.Username] = writtenOutcome(d.Version == 1)
			continue
		case found && cur.Version != d.Version-1 && !after:
			s.cfg.OnConflict()
			if !cur.RefreshedAt.Before(d.RefreshedAt) {
				s.skipped(d.Username, cur.RefreshedAt, d.RefreshedAt)
				outcomes[d.Username] = WriteSkippedNewer
				continue
			}
		}
		retry = append(retry, d.Username)
	}
	return retry, nil
}

func writtenOutcome(inserted bool) WriteOutcome {
	if inserted {
		return WriteInserted
	}
	return WriteUpdated
}

// sameDoc reports whether a and b hold the same score at the same version.
func sameDoc(a, b ScoreDoc) bool {
	return a.Version == b.Version && a.RefreshedAt.Equal(b.RefreshedAt) && sameFloat(a.Score, b.Score) &&
		maps.EqualFunc(a.Components, b.Components, sameFloat)
}

// sameFloat is == except that NaN equals NaN: a NaN score read back is the NaN we wrote.
func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
