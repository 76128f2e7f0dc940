package scoring

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// WriteBatch stores results, computed by a recompute that began at
// refreshedAt, under the same optimistic concurrency as Write, in two round
// trips for the whole batch: one find reads every user's version and
// refreshedAt, one unordered bulk write sends a guarded write per user.
//
// outcomes has an entry for each user written or skipped (a stored document
// from a newer recompute is left alone, counted with OnSkip and logged, as in
// Write). retry lists the users whose write did not happen: those that lost a
// race with another writer (OnConflict is called for each) and those whose
// write the server refused. The caller retries each with Write, which has the
// backoff and reports the error of a refused write. Users are in exactly one
// of outcomes and retry unless err is set: then the users in neither were not
// written, or not known to be.
//
// A batch above MaxBatchUsers users is written in chunks of two round trips
// each; a batch with any lost or refused write costs one more find (see
// settle).
func (s *Store) WriteBatch(ctx context.Context, results map[string]Result, refreshedAt time.Time) (outcomes map[string]WriteOutcome, retry []string, err error) {
	return s.writeBatch(ctx, nil, results, refreshedAt)
}

// WriteBatchAfter is WriteBatch for a refresh that read prior (ReadPrior)
// before its recompute, as WriteAfter is Write's: documents still at the
// version prior holds are replaced and stamped past their refreshedAt, and
// the batch costs one round trip, the read having been done. A user whose
// document was written since is in retry, never skipped by its stamp: the
// caller writes it with WriteAfter, which reports it superseded (and calls
// OnConflict) when it was, and the error of a refused write when not.
func (s *Store) WriteBatchAfter(ctx context.Context, prior Prior, results map[string]Result, refreshedAt time.Time) (outcomes map[string]WriteOutcome, retry []string, err error) {
	return s.writeBatch(ctx, prior, results, refreshedAt)
}

func (s *Store) writeBatch(ctx context.Context, prior Prior, results map[string]Result, refreshedAt time.Time) (outcomes map[string]WriteOutcome, retry []string, err error) {
	outcomes = make(map[string]WriteOutcome, len(results))
	for _, chunk := range sortedChunks(results) {
		r, err := s.writeChunk(ctx, prior, chunk, results, refreshedAt, outcomes)
		retry = append(retry, r...)
		if err != nil {
			return outcomes, retry, err
		}
	}
	return outcomes, retry, nil
}

// writeChunk is WriteBatch for users, sorted.
func (s *Store) writeChunk(ctx context.Context, prior Prior, users []string, results map[string]Result, refreshedAt time.Time, outcomes map[string]WriteOutcome) (retry []string, err error) {
	// The batch holds every user's lock, as Write does, for the two reasons
	// userLocks exists: a Write of the same user in this process racing the
	// batch would otherwise cost both a conflict, and on FerretDB, whose
	// guarded update is not an atomic compare-and-set, both could "win" the
	// same version and one write would vanish with the version moved by 1 for
	// two writes. Sorted order (lockAll) keeps two batches sharing users from
	// deadlocking.
	unlock, err := s.locks.lockAll(ctx, users)
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

// readMany reads the score documents of users (projected) in one find.
func (s *Store) readMany(ctx context.Context, users []string, projection bson.D) (map[string]ScoreDoc, error) {
	noteRoundTrip(ctx)
	// One more than can match, so the first reply holds them all and the
	// server closes the cursor: no getMore.
	opts := options.Find().SetBatchSize(int32(len(users) + 1))
	if projection != nil {
		opts.SetProjection(projection)
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: users}}}}, opts)
	if err != nil {
		return nil, fmt.Errorf("reading the score documents of %d users: %w", len(users), err)
	}
	var docs []ScoreDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("reading the score documents of %d users: %w", len(users), err)
	}
	byUser := make(map[string]ScoreDoc, len(docs))
	for _, d := range docs {
		byUser[d.Username] = d
	}
	return byUser, nil
}

// bulkGuarded writes each of docs over the version before its own, in one
// unordered bulk write.
//
// Every write is an update with upsert, guarded by {_id, version: read}; an
// absent document reads as version 0, so its upsert inserts version 1. All
// writes being updates, the driver sends one update command (inserts would go
// in a second command: the driver groups an unordered bulk write by kind). A
// guard that no longer matches makes the upsert insert a second document with
// the same _id, which the unique _id refuses: a lost race is a duplicate key
// error, reported per write, where a plain update would only lower the
// batch's matched count without saying whose write missed.
func (s *Store) bulkGuarded(ctx context.Context, docs []ScoreDoc, after bool, outcomes map[string]WriteOutcome) (retry []string, err error) {
	// Unknown (the server did not answer) reads as MongoDB: the bulk
	// upsert is correct anywhere, only slower on FerretDB.
	_ = s.cfg.Traits.Probe(ctx, s.coll.Database())
	if s.cfg.Traits.CheapUpserts() {
		return s.bulkUpsert(ctx, docs, after, outcomes)
	}
	// FerretDB takes ~150 ms for each upsert that inserts (measured on the
	// embedded server): new users' documents go in an insert of their own,
	// so a batch mixing new and known users costs one more command there.
	var absent, present []ScoreDoc
	for _, d := range docs {
		if d.Version == 1 {
			absent = append(absent, d)
		} else {
			present = append(present, d)
		}
	}
	if len(absent) > 0 {
		if retry, err = s.insertNew(ctx, absent, after, outcomes); err != nil {
			return nil, err
		}
	}
	if len(present) == 0 {
		return retry, nil
	}
	retryU, err := s.bulkUpsert(ctx, present, after, outcomes)
	return append(retry, retryU...), err
}

// insertNew inserts the first documents of users that had none, in one
// unordered insert; a duplicate key is a racing writer's insert: retried.
func (s *Store) insertNew(ctx context.Context, docs []ScoreDoc, after bool, outcomes map[string]WriteOutcome) (retry []string, err error) {
	batch := make([]any, len(docs))
	for i, d := range docs {
		batch[i] = d
	}
	noteRoundTrip(ctx)
	_, err = s.coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	switch {
	case err == nil:
		for _, d := range docs {
			outcomes[d.Username] = WriteInserted
		}
		return nil, nil
	case errors.As(err, &bwe) && bwe.WriteConcernError == nil:
		return s.settle(ctx, docs, after, outcomes)
	}
	return nil, fmt.Errorf("inserting the first scores of %d users: %w", len(docs), err)
}

// bulkUpsert is bulkGuarded where upserts are cheap.
func (s *Store) bulkUpsert(ctx context.Context, docs []ScoreDoc, after bool, outcomes map[string]WriteOutcome) (retry []string, err error) {
	models := make([]mongo.WriteModel, len(docs))
	for i, d := range docs {
		// Plain equality, not $eq: a username is a string, never read
		// as an operator, and servers that push only plain _id equality
		// down to storage (FerretDB) would otherwise scan the scores
		// collection once per statement.
		models[i] = s.cfg.Traits.UpdateByID(
			bson.D{{Key: "_id", Value: d.Username}, {Key: "version", Value: d.Version - 1}},
			bson.D{{Key: "$set", Value: bson.D{
				{Key: "score", Value: d.Score},
				{Key: "components", Value: d.Components},
				{Key: "refreshedAt", Value: d.RefreshedAt},
				{Key: "version", Value: d.Version},
			}}}, true)
	}
	noteRoundTrip(ctx)
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	switch {
	case err == nil && res.MatchedCount+res.UpsertedCount == int64(len(docs)):
		upserted := make(map[string]bool, len(res.UpsertedIDs))
		for _, id := range res.UpsertedIDs {
			if u, ok := id.(string); ok {
				upserted[u] = true
			}
		}
		for _, d := range docs {
			outcomes[d.Username] = writtenOutcome(upserted[d.Username])
		}
		return nil, nil
	case err == nil || errors.As(err, &bwe) && bwe.WriteConcernError == nil:
		return s.settle(ctx, docs, after, outcomes)
	}
	return nil, fmt.Errorf("writing the scores of %d users: %w", len(docs), err)
}

// settle finds out, by reading the documents back, which of docs were
// written after a bulk write that reported lost or refused writes.
//
// The per-write errors are not trusted for this: FerretDB 1.24 stops an
// unordered update at its first error, reports it at the wrong index and
// counts nothing. A document holding exactly what we sent, at the version we
// set, is ours (or an identical write's, which leaves the same document).
//
// A document whose version moved since the read is a conflict. When it holds
// a recompute that began no earlier than ours, it is settled as skipped, as
// Write skips a newer one: it is as fresh as ours, and our write may well be
// under it (ours landed, then the rival's), which the document cannot tell.
// Retrying would write a second time for one refresh, and with the
// refreshedAt of both recomputes equal to the millisecond, Write would not
// skip it. Any other document is a write to retry: a conflict if its version
// moved, a refused or unattempted write if not. After a prior read (after),
// stamps order nothing (see Prior): every document not ours is retried, and
// WriteAfter tells a conflict from a refusal.
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
			s.conflicted()
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
	if a.Version != b.Version || !a.RefreshedAt.Equal(b.RefreshedAt) || !sameFloat(a.Score, b.Score) || len(a.Components) != len(b.Components) {
		return false
	}
	for k, v := range a.Components {
		w, ok := b.Components[k]
		if !ok || !sameFloat(v, w) {
			return false
		}
	}
	return true
}

// sameFloat is == except that NaN equals NaN: a NaN score read back is the
// NaN we wrote.
func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
