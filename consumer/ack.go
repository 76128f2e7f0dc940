package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// outcome is how one claimed user ended.
type outcome struct {
	work      work
	err       error // nil: refreshed, acknowledge the entries
	release   bool  // never refreshed (shutdown, no entries left): hand back, no attempt counted
	transient bool  // back off, but count no attempt (see transient)
	solo      bool  // its batch failed as a whole: refresh alone next time (settleBatchFailure)
}

// acker settles finished users in batches (settler). One flush costs a
// fixed number of round trips whatever its size:
//
//	ack               1 delete command for every acknowledged entry (deleteStatements)
//	release leases    1 deleteMany of acked and released users
//	back off          1 bulk update of failed users, only if any
type acker struct {
	settler
	queue       *mongo.Collection
	dead        *deadLane
	maxAttempts int
	byUser      *atomic.Bool // name each entry's user in its delete (deleteStatements)
}

// settler is the batching the acker and the dead-letter lane share (river's
// BatchCompleter): a flush waits AckFlushInterval for company after its
// first item, or goes at once with AckFlushBatch waiting.
type settler struct {
	leases     *leaseStore
	clock      clock.Clock
	serverTime clock.Nower
	metrics    *metrics.Consumer
	log        *slog.Logger
	retryDelay Backoff             // a failed user's backoff
	interval   time.Duration       // AckFlushInterval
	onSettled  func(users []lease) // the users are no longer held
	afterFlush func(err error)     // each flush attempt's outcome (readiness)
	kick       signal
	build      func([]outcome, map[string]malformed) *flushRun // the acker's or the lane's newFlush

	mu        sync.Mutex
	outcomes  []outcome
	malformed map[string]malformed // the lane's, by IDKey: a bad entry seen by several rounds is moved once
	carry     *flushRun            // cut short by shutdown, finished by the next flush
}

// flushRun is one batch on its way to MongoDB: first (the acker's deletes or
// the lane's dead letters), the release of leases whose entries are gone, the
// backoff of failed users. Each step is safe to repeat (idempotent deletes,
// fenced lease writes): a retry runs those not done, its users held meanwhile.
type flushRun struct {
	first   func(ctx context.Context) error
	release []lease // deleted once first succeeds
	retries []retry
	settled []lease // no longer held once every step succeeds

	firstDone, releaseDone, backedOff, releaseTried bool
}

func (s *settler) add(o outcome) {
	s.mu.Lock()
	s.outcomes = append(s.outcomes, o)
	n := len(s.outcomes)
	s.mu.Unlock()
	if n == 1 || n >= AckFlushBatch { // the first starts the wait, a full batch goes
		s.kick.notify()
	}
}

func (a *acker) add(o outcome) {
	if !o.release && o.err != nil && !o.transient && o.work.lease.Attempts+1 >= a.maxAttempts {
		a.dead.add(o) // out of attempts: its entries are dead-lettered
		return
	}
	a.settler.add(o)
}

func (a *acker) newFlush(batch []outcome, _ map[string]malformed) *flushRun {
	r := &flushRun{}
	var acked []work
	var released []lease
	now := a.serverTime.Now()
	for _, o := range batch {
		l := o.work.lease
		r.settled = append(r.settled, l)
		switch {
		case o.release:
			released = append(released, l)
		case o.err == nil:
			acked = append(acked, o.work)
			r.release = append(r.release, l)
		case o.transient:
			r.retries = append(r.retries, retry{lease: l, notBefore: now.Add(a.retryDelay.Delay(1)), err: truncate(o.err.Error(), 1024), solo: o.solo})
		default:
			r.retries = append(r.retries, retry{lease: l, notBefore: now.Add(a.retryDelay.Delay(l.Attempts + 1)), err: truncate(o.err.Error(), 1024), charge: 1})
		}
	}
	r.release = append(r.release, released...)
	r.first = func(ctx context.Context) error { return a.ack(ctx, acked) }
	return r
}

// runFlush does every step of r not yet done.
func (s *settler) runFlush(ctx context.Context, r *flushRun) error {
	var errs []error
	step(&errs, &r.firstDone, func() error { return r.first(ctx) })
	if r.firstDone {
		// Fewer deleted than held means leases were taken over, on the first
		// try only (a retry may find its own delete done).
		step(&errs, &r.releaseDone, func() error {
			n, err := s.leases.release(ctx, r.release)
			if err == nil && n < len(r.release) && !r.releaseTried {
				s.metrics.LeasesLost.Add(float64(len(r.release) - n))
				s.log.Warn("leases were taken over while held (expired during a stall); those users may be refreshed twice, which is harmless",
					"op", "ack flush", "released", n, "held", len(r.release))
			}
			r.releaseTried = true
			return err
		})
	}
	step(&errs, &r.backedOff, func() error { return s.leases.backOff(ctx, r.retries) })
	return errors.Join(errs...)
}

// step runs fn unless done, and notes it done or adds its error to errs
// (errors.Join drops the nils).
func step(errs *[]error, done *bool, fn func() error) {
	if !*done {
		err := fn()
		*errs, *done = append(*errs, err), err == nil
	}
}

// ack deletes the acknowledged users' entries in one command.
func (a *acker) ack(ctx context.Context, acked []work) error {
	var ids bson.A
	var users []string // ids' usernames, through a mongos only
	byUser := a.byUser.Load()
	for _, w := range acked {
		for _, e := range w.entries {
			ids = append(ids, e.ID)
			if byUser {
				users = append(users, e.Username)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	res, err := a.queue.BulkWrite(ctx, deleteStatements(ids, users...), options.BulkWrite().SetOrdered(false))
	if err != nil {
		return fmt.Errorf("acknowledging %d entries of %d users: %w", len(ids), len(acked), err)
	}
	a.metrics.EntriesAcked.Add(float64(res.DeletedCount))
	for _, w := range acked {
		a.metrics.CoalescedEntries.Observe(float64(len(w.entries)))
	}
	a.log.Debug("ack flush", "users", len(acked), "entries", res.DeletedCount)
	return nil
}

// deleteStatements delete queue entries by _id in one command: up to
// maxIDStatements one statement per _id, the only filter FerretDB pushes down
// (an $in reads its whole queue); past that (a firehose user's backlog) $in
// lists, one scan instead of thousands of queries. users, given through a
// mongos only, are the entries' usernames ("" if malformed): a statement
// naming its user goes to one shard, hinting the _id index (the username's
// would read all that user's entries). docs/query-plans.md measures both.
func deleteStatements(ids bson.A, users ...string) []mongo.WriteModel {
	users = append(users, make([]string, len(ids)-len(users))...) // "": no user named
	del := func(id any, u string) (filter bson.D, hint any) {
		filter = bson.D{{Key: "_id", Value: id}}
		if u != "" {
			filter, hint = append(filter, bson.E{Key: "username", Value: u}), IDIndex
		}
		return filter, hint
	}
	models := make([]mongo.WriteModel, 0, len(ids))
	if len(ids) <= maxIDStatements {
		for i, id := range ids {
			filter, hint := del(id, users[i])
			models = append(models, &mongo.DeleteOneModel{Filter: filter, Hint: hint})
		}
		return models
	}
	// $in lists of at most maxInIDs ids and about maxInBytes (an _id may be
	// any value, and a list past 16 MiB is refused on every retry), one user's each.
	byUser := map[string]bson.A{}
	var order []string
	for i, id := range ids {
		if _, ok := byUser[users[i]]; !ok {
			order = append(order, users[i])
		}
		byUser[users[i]] = append(byUser[users[i]], id)
	}
	for _, u := range order {
		for _, chunk := range idChunks(byUser[u], maxInIDs, maxInBytes) {
			filter, hint := del(bson.D{{Key: "$in", Value: chunk}}, u)
			models = append(models, &mongo.DeleteManyModel{Filter: filter, Hint: hint})
		}
	}
	return models
}

const (
	maxIDStatements = 1000   // most entries deleted with one statement per _id
	maxInIDs        = 50_000 // ids in one $in: ~1 MB of 20-byte ids, far below 16 MiB
)

// run flushes until ctx ends; flushAll after it is the final flush.
func (s *settler) run(ctx context.Context) {
	timer := s.clock.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			if s.pending() < AckFlushBatch { // wait for the users finishing around now
				timer.Reset(s.interval)
				select {
				case <-ctx.Done():
					return
				case <-timer.C():
				case <-s.kick:
					timer.Stop()
				}
			}
			_ = s.flushAll(ctx) // failures are retried, logged and counted by settle
		}
	}
}

func (s *settler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.outcomes) + len(s.malformed)
}

// flushAll finishes a flush kept from shutdown, with its steps' state
// (nothing done is redone or miscounted), then settles what is pending.
func (s *settler) flushAll(ctx context.Context) error {
	s.mu.Lock()
	carried := s.carry
	s.carry = nil
	s.mu.Unlock()
	if carried != nil {
		if err := s.settle(ctx, carried); err != nil {
			return err
		}
	}
	s.mu.Lock()
	batch, bad := s.outcomes, s.malformed
	s.outcomes, s.malformed = nil, nil
	s.mu.Unlock()
	if len(batch) == 0 && len(bad) == 0 {
		return nil
	}
	return s.settle(ctx, s.build(batch, bad))
}

// settle retries r until it succeeds, or ctx ends: then r waits for flushAll.
func (s *settler) settle(ctx context.Context, r *flushRun) error {
	for attempt := 1; ; attempt++ {
		err := s.runFlush(ctx, r)
		if err == nil {
			s.onSettled(r.settled)
			s.afterFlush(nil)
			return nil
		}
		if ctx.Err() == nil { // (one cut short by shutdown is not a failure)
			s.metrics.AckFlushErrors.Inc()
			s.afterFlush(err)
			s.log.Error("flushing finished users failed; will retry", "op", "ack flush", "users", len(r.settled), "attempt", attempt, "err", err)
		}
		if clock.Sleep(ctx, s.clock, Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}.Delay(attempt)) != nil {
			s.mu.Lock()
			s.carry = r
			s.mu.Unlock()
			return errors.Join(err, ctx.Err())
		}
	}
}

// truncate cuts s to n bytes on a character boundary, marked (lastError must be valid UTF-8).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return prefix(s, n) + "…"
}
