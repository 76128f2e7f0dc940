package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// LeaseDoc is a document of the claims collection, one per user held or
// backing off, as the consumer and the operator commands read it:
//
//	{_id: <username>, token, owner, leaseUntil, attempts, lastError, claimedAt, running, solo}
//
// A user is claimable when it has no lease document or its leaseUntil has
// passed (State); a failed refresh keeps it with token null and leaseUntil at
// the end of the backoff: one condition, one index. Queue entries are never
// modified (FerretDB's updateMany is pathologically slow). Fields are read
// raw: a document this release did not write must fail no other user.
type LeaseDoc struct {
	ID         bson.RawValue `bson:"_id"`
	Token      bson.RawValue `bson:"token"`
	Owner      bson.RawValue `bson:"owner"`
	LeaseUntil bson.RawValue `bson:"leaseUntil"`
	Attempts   bson.RawValue `bson:"attempts"`
	LastError  bson.RawValue `bson:"lastError"`
	ClaimedAt  bson.RawValue `bson:"claimedAt"`
	Running    bson.RawValue `bson:"running"` // the token whose refresh has started (mark)
	Solo       bson.RawValue `bson:"solo"`    // refresh alone: its last batch failed as a whole (runBatch)
}

// The states of a user's lease document (State).
const (
	LeaseHeld       = "held"        // a token, and leaseUntil ahead
	LeaseBackingOff = "backing_off" // no token, and leaseUntil ahead
	LeaseClaimable  = "claimable"   // leaseUntil passed, missing or not a date
)

// User is the username leased; false when _id is not a string.
func (d LeaseDoc) User() (string, bool) { return d.ID.StringValueOK() }

// Until is leaseUntil; false when it is missing or not a date.
func (d LeaseDoc) Until() (time.Time, bool) { return d.LeaseUntil.TimeOK() }

// State is what the document means for its user at now.
func (d LeaseDoc) State(now time.Time) string {
	until, ok := d.Until()
	switch {
	case !ok || !until.After(now):
		return LeaseClaimable
	case d.Token.Type == bson.TypeString:
		return LeaseHeld
	}
	return LeaseBackingOff
}

// OwnerName is the replica that wrote the lease, "" if unknown.
func (d LeaseDoc) OwnerName() string { s, _ := d.Owner.StringValueOK(); return s }

// LastErrorText is the error of the last failed refresh, "" if none.
func (d LeaseDoc) LastErrorText() string { s, _ := d.LastError.StringValueOK(); return s }

// ClaimedAtTime is when the lease was won; zero if unknown.
func (d LeaseDoc) ClaimedAtTime() time.Time { t, _ := d.ClaimedAt.TimeOK(); return t }

// HeldFilter matches the live, held leases (on the leaseUntil index).
func HeldFilter(now time.Time) bson.D {
	return bson.D{live(now), {Key: "token", Value: bson.D{{Key: "$ne", Value: nil}}}}
}

// BackingOffFilter matches the users backing off (on the leaseUntil index).
func BackingOffFilter(now time.Time) bson.D { return bson.D{live(now), {Key: "token", Value: nil}} }

func live(now time.Time) bson.E {
	return bson.E{Key: "leaseUntil", Value: bson.D{{Key: "$gt", Value: now}}}
}

// blockedFilter and blockedProjection are blockedAmong's (QueryLeaseRead).
func blockedFilter(users any, now time.Time) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: users}}}, live(now)}
}

var blockedProjection = bson.D{{Key: "_id", Value: 1}, {Key: "leaseUntil", Value: 1}, {Key: "token", Value: 1}}

// lease is a user this consumer holds, fenced by its claim's token: every
// later write matches {_id, token}, so it cannot touch a new holder's document.
type lease struct {
	User     string
	Token    string
	Attempts int  // failed refreshes so far, carried across takeovers
	Solo     bool // refresh in a batch of its own (leaseDoc.Solo)
}

// leaseStore is the claims collection.
type leaseStore struct {
	coll   *mongo.Collection
	owner  string
	traits *servertraits.Traits

	mu      sync.Mutex // guards mark's group commit:
	pending []lease
	waiters []chan struct{}
	writing bool
}

// blockedAmong returns which of users are held (by anyone) or backing off,
// reading only their documents by _id: its cost follows the window, not the fleet.
func (s *leaseStore) blockedAmong(ctx context.Context, users []string, now time.Time) (map[string]LeaseDoc, error) {
	if len(users) == 0 {
		return nil, nil
	}
	// Hinted: the leaseUntil index, winning the trial while few leases are
	// live, reads the fleet's. +1: a batch filled exactly leaves the cursor open.
	docs, err := s.find(ctx, blockedFilter(users, now), options.Find().SetProjection(blockedProjection).
		SetBatchSize(int32(len(users))+1).SetHint(IDIndex), fmt.Sprintf("reading the leases of %d users in the window", len(users)))
	if err != nil {
		return nil, err
	}
	blocked := make(map[string]LeaseDoc, len(users))
	for _, d := range docs {
		if user, ok := d.User(); ok && d.State(now) != LeaseClaimable {
			blocked[user] = d
		}
	}
	return blocked, nil
}

// acquire claims users for token: one insert per user in one round trip, then
// the takeover of those with a lease document (duplicate key). A round's token is
// new, never retried: after an insert of unknown outcome, what it may have written is deleted.
func (s *leaseStore) acquire(ctx context.Context, users []string, token string, now time.Time, d time.Duration) ([]lease, error) {
	if len(users) == 0 {
		return nil, nil
	}
	until := now.Add(d)
	docs := mapped(users, func(u string) any {
		return bson.D{{Key: "_id", Value: u}, {Key: "token", Value: token}, {Key: "owner", Value: s.owner},
			{Key: "leaseUntil", Value: until}, {Key: "attempts", Value: 0}, {Key: "claimedAt", Value: now}, {Key: "running", Value: nil}}
	})
	_, err := s.coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if err != nil && (!errors.As(err, &bwe) || bwe.WriteConcernError != nil) {
		return nil, s.abandon(ctx, users, token, fmt.Errorf("inserting %d leases: %w", len(users), err))
	}
	dup := map[int]bool{}
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we) {
			return nil, s.abandon(ctx, users, token, fmt.Errorf("inserting lease for a user: %w", err))
		}
		dup[we.Index] = true
	}
	var contested []string
	won := make([]lease, 0, len(users))
	for i, u := range users {
		if dup[i] {
			contested = append(contested, u)
		} else {
			won = append(won, lease{User: u, Token: token})
		}
	}
	if len(contested) == 0 {
		return won, nil
	}
	taken, err := s.takeOver(ctx, contested, token, now, until)
	if err != nil {
		// Nobody would renew or release this token's leases.
		return nil, s.abandon(ctx, users, token, err)
	}
	return append(won, taken...), nil
}

// abandon deletes what a failed acquire may have written; it returns cause.
func (s *leaseStore) abandon(ctx context.Context, users []string, token string, cause error) error {
	held := mapped(users, func(u string) lease { return lease{User: u, Token: token} })
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimCleanup)
	defer cancel()
	if _, err := s.release(rctx, held); err != nil {
		return errors.Join(cause, fmt.Errorf("deleting this round's leases after the failure (they expire instead): %w", err))
	}
	return cause
}

// takeOver wins expired leases in three round trips (read them, take them
// fenced by the token read, read back what was won). A lease that expired
// while its refresh was running is charged an attempt, so an entry killing
// every consumer ends in the dead letters; the holder's other users are not.
func (s *leaseStore) takeOver(ctx context.Context, users []string, token string, now, until time.Time) ([]lease, error) {
	// Not ours among them: a token this round just inserted is not expired.
	expired, err := s.find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: users}}}, {Key: "leaseUntil", Value: notAfter(now)}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "token", Value: 1}, {Key: "running", Value: 1}, {Key: "attempts", Value: 1}}),
		fmt.Sprintf("reading %d expired leases", len(users)))
	if err != nil || len(expired) == 0 {
		return nil, err
	}
	set := bson.D{{Key: "token", Value: token}, {Key: "owner", Value: s.owner}, {Key: "leaseUntil", Value: until}, {Key: "claimedAt", Value: now}, {Key: "running", Value: nil}}
	models := make([]mongo.WriteModel, 0, len(expired))
	for _, e := range expired {
		// Fenced by the token seen (null matches a missing one): a lease taken since matches nothing.
		seen := any(e.Token)
		if e.Token.Type == 0 {
			seen = nil
		}
		set := slices.Clone(set)
		charge := 0
		// The holder died (or hung) in this user's refresh: the mark carries its
		// writer's token, so an earlier holder's mark is not taken for it.
		t, ok := e.Token.StringValueOK()
		if r, _ := e.Running.StringValueOK(); ok && t != "" && r == t {
			set = append(set, bson.E{Key: "lastError", Value: "lease expired while its refresh was running (consumer crashed or hung)"})
			charge = 1
		}
		update := bson.D{{Key: "$set", Value: set}}
		switch _, ok := e.Count(); {
		case !ok:
			// Not a number: $inc would fail here and in every backoff after, so the count restarts.
			update = bson.D{{Key: "$set", Value: append(set, bson.E{Key: "attempts", Value: charge})}}
		case charge > 0:
			update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: "attempts", Value: charge}}})
		}
		models = append(models, s.traits.UpdateByID(
			bson.D{{Key: "_id", Value: e.ID}, {Key: "token", Value: seen}, {Key: "leaseUntil", Value: notAfter(now)}},
			update, false))
	}
	if err := s.bulk(ctx, models, "taking over %d expired leases"); err != nil {
		return nil, err
	}
	docs, err := s.find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: users}}}, {Key: "token", Value: token}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "attempts", Value: 1}, {Key: "solo", Value: 1}}), "reading back taken-over leases")
	if err != nil {
		return nil, err
	}
	won := make([]lease, 0, len(docs))
	for _, d := range docs {
		attempts, _ := d.Count()
		solo, _ := d.Solo.BooleanOK()
		if user, ok := d.User(); ok {
			won = append(won, lease{User: user, Token: token, Attempts: attempts, Solo: solo})
		}
	}
	return won, nil
}

// renew extends every lease in one round trip and reports how many were
// still ours (a lease taken over costs only a duplicate refresh).
func (s *leaseStore) renew(ctx context.Context, held []lease, until time.Time) (int, error) {
	res, err := s.coll.UpdateMany(ctx, fenceFilter(held), bson.D{{Key: "$set", Value: bson.D{{Key: "leaseUntil", Value: until}}}})
	if err != nil {
		return 0, fmt.Errorf("renewing %d leases: %w", len(held), err)
	}
	return int(res.MatchedCount), nil
}

// fenced updates l's document if it is still l's.
func (s *leaseStore) fenced(l lease, update bson.D) mongo.WriteModel {
	return s.traits.UpdateByID(bson.D{{Key: "_id", Value: l.User}, {Key: "token", Value: l.Token}}, update, false)
}

// bulk runs models unordered in one round trip; what names them, by count.
func (s *leaseStore) bulk(ctx context.Context, models []mongo.WriteModel, what string) error {
	if _, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf(what+": %w", len(models), err)
	}
	return nil
}

// release deletes leases in one round trip and returns how many were still
// ours (fewer: taken over, or a retry of a release that succeeded).
func (s *leaseStore) release(ctx context.Context, held []lease) (int, error) {
	if len(held) == 0 {
		return 0, nil
	}
	res, err := s.coll.DeleteMany(ctx, fenceFilter(held))
	if err != nil {
		return 0, fmt.Errorf("releasing %d leases: %w", len(held), err)
	}
	return int(res.DeletedCount), nil
}

// backOff blocks each user until its retry time, in one round trip.
func (s *leaseStore) backOff(ctx context.Context, failed []retry) error {
	if len(failed) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, len(failed))
	for i, f := range failed {
		set := bson.D{{Key: "token", Value: nil}, {Key: "leaseUntil", Value: f.notBefore}, {Key: "lastError", Value: f.err}, {Key: "running", Value: nil}}
		if f.solo {
			set = append(set, bson.E{Key: "solo", Value: true})
		}
		models[i] = s.fenced(f.lease, bson.D{{Key: "$set", Value: set}, {Key: "$inc", Value: bson.D{{Key: "attempts", Value: f.charge}}}})
	}
	return s.bulk(ctx, models, "backing off %d failed users")
}

// Count is the attempts so far: 0 to maxCount, or absent (0); ok is false for
// a string, a negative count (never reaching MAX_ATTEMPTS), a huge double.
func (d LeaseDoc) Count() (n int, ok bool) {
	if d.Attempts.Type == 0 || d.Attempts.Type == bson.TypeNull {
		return 0, true
	}
	f, ok := d.Attempts.AsFloat64OK()      // int32, int64, double: exact for any plausible count
	if !ok || !(f >= 0 && f <= maxCount) { // also NaN
		return 0, false
	}
	return int(f), true
}

const maxCount = 1 << 30 // far above any MAX_ATTEMPTS

// find reads lease documents; what names the read in its error.
func (s *leaseStore) find(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder, what string) ([]LeaseDoc, error) {
	var docs []LeaseDoc
	cur, err := s.coll.Find(ctx, filter, opts)
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return docs, nil
}

// retry is a failed user to back off.
type retry struct {
	lease     lease
	notBefore time.Time
	err       string
	charge    int  // attempts it counts: 0 for transient failures, which never dead-letter
	solo      bool // set the document's solo flag; it goes with the user's next success
}

// idIndex is the index every collection has, on _id.
var idIndex = bson.D{{Key: "_id", Value: 1}}

// fenceFilter matches exactly the given leases: tokens are unique per round
// and a user is won at most once per round.
func fenceFilter(held []lease) bson.D {
	users := mapped(held, func(l lease) string { return l.User })
	tokens := slices.Compact(slices.Sorted(slices.Values(mapped(held, func(l lease) string { return l.Token }))))
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: users}}}, {Key: "token", Value: bson.D{{Key: "$in", Value: tokens}}}}
}

// notAfter matches a leaseUntil not after t, or missing, null or not a
// date: with {$lte: t} such a document would block its user for good (not
// blocked by $gt, its insert a duplicate, never taken over).
func notAfter(t time.Time) bson.D {
	return bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: t}}}}
}

// mark marks lease documents running before their refreshes begin, so a
// takeover after a crash charges them and nobody else, in one round trip for
// the users starting together (group commit: whoever finds no write in
// flight writes for everyone waiting). A failure leaves a crash uncharged.
func (s *leaseStore) mark(ctx context.Context, ls ...lease) error {
	done := make(chan struct{})
	s.mu.Lock()
	s.pending = append(s.pending, ls...)
	s.waiters = append(s.waiters, done)
	if s.writing {
		s.mu.Unlock()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.writing = true
	var err error
	for len(s.pending) > 0 {
		batch, waiters := s.pending, s.waiters
		s.pending, s.waiters = nil, nil
		s.mu.Unlock()
		// One statement per _id: FerretDB would scan the claims for an $in.
		models := mapped(batch, func(l lease) mongo.WriteModel {
			return s.fenced(l, bson.D{{Key: "$set", Value: bson.D{{Key: "running", Value: l.Token}}}})
		})
		err = s.bulk(ctx, models, "marking %d refreshes as running")
		for _, w := range waiters {
			close(w)
		}
		s.mu.Lock()
	}
	s.writing = false
	s.mu.Unlock()
	return err
}
