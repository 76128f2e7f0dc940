package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
	work work
	// err is the refresh's error; nil means the refresh succeeded and the
	// entries are acknowledged.
	err error
	// release means the refresh never ran (shutdown, or no entries left):
	// hand the user back untouched, no attempt counted.
	release bool
	// transient means err came from MongoDB being unreachable, slow or
	// electing: back off, but count no attempt (see transient.go).
	transient bool
	// solo means the user's batch failed as a whole: its next refresh runs
	// in a batch of its own, so only the user that breaks a batch is
	// charged for it (see runBatch).
	solo bool
}

// completer settles finished users in batches, river's BatchCompleter idea: a
// flush happens AckInterval after the first outcome of a batch, or at once
// when AckBatchSize users are waiting. One flush costs a fixed number of
// round trips whatever its size:
//
//	dead letters      3 (read originals, insert copies, delete), only if any
//	                  (a read per entry on FerretDB, see deadLetterer.read)
//	ack               1 delete command for every acknowledged entry: one
//	                  statement per _id up to maxIDStatements, as a plain
//	                  _id is the only filter FerretDB pushes down to storage
//	                  (an $in deleteMany would scan its whole queue); $in
//	                  lists past that (deleteStatements)
//	release leases    1 deleteMany of acked, dead-lettered and released users
//	back off          1 bulk update of failed users, only if any
//
// Every step is safe to repeat (deletes are idempotent, dead letters keep the
// original _id, lease writes are fenced by the claim token), so a failed flush
// retries the steps not yet done, with backoff, until they succeed: nothing is
// dropped, and the users stay held (and their leases renewed) until then. A
// failing step does not hold up the others.
//
// Dead letters (malformed entries, users out of attempts) go through a
// completer of their own (deadLane), on its own goroutine, so moving them,
// however slow, never delays an acknowledgement. There each flush tries its
// dead letters once, and an entry that fails is postponed on its own (see
// flush.deadLetters): one that cannot be written never holds back another.
type completer struct {
	queue       *mongo.Collection
	leases      *leaseStore
	dead        *deadLetterer
	clock       clock.Clock // what flushes wait on
	serverTime  clock.Nower // backoffs and dead letters are dated on the server's clock
	metrics     *metrics.Consumer
	log         *slog.Logger
	maxAttempts int
	retryDelay  Backoff // backoff of a failed user before its next refresh
	interval    time.Duration
	batchSize   int
	onSettled   func(users []lease) // the users are no longer held
	afterFlush  func(err error)     // each flush attempt's outcome (readiness)
	byUser      *atomic.Bool        // name each entry's user in its delete (deleteStatements)

	mu        sync.Mutex
	outcomes  []outcome
	malformed map[string]malformed // by _id: the same bad entry seen by several claim rounds is moved once
	deadRetry map[string]deadRetry // by _id: malformed entries whose dead letter failed, not retried before then
	kick      signal
	rnd       *rand.Rand
	carry     *flush // a flush cut short by shutdown, finished by the next flushAll

	laneOnce sync.Once
	lane     *completer // see deadLane
	isLane   bool
}

func (c *completer) add(o outcome) {
	if lane := c.deadLane(); lane != nil && c.outOfAttempts(o) {
		lane.add(o)
		return
	}
	c.mu.Lock()
	c.outcomes = append(c.outcomes, o)
	n := len(c.outcomes)
	c.mu.Unlock()
	if n == 1 || n >= c.batchSize {
		c.kick.notify()
	}
}

func (c *completer) addMalformed(ms []malformed) {
	if len(ms) == 0 {
		return
	}
	if lane := c.deadLane(); lane != nil {
		lane.addMalformed(ms)
		return
	}
	now := c.serverTime.Now()
	c.mu.Lock()
	for _, m := range ms {
		k := idKey(m.ID)
		if r, ok := c.deadRetry[k]; ok && now.Before(r.notBefore) {
			continue // its dead letter failed recently: it waits its turn in the queue
		}
		c.malformed[k] = m
	}
	c.mu.Unlock()
	c.kick.notify()
}

// run flushes until ctx ends, then returns; call flushAll after it for the
// final flush at shutdown.
func (c *completer) run(ctx context.Context) {
	if lane := c.deadLane(); lane != nil {
		done := make(chan struct{})
		go func() { defer close(done); lane.run(ctx) }()
		defer func() { <-done }()
	}
	timer := c.clock.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
			if c.pending() < c.batchSize {
				// Wait a little so the users finishing around now share a
				// flush; a full batch goes at once.
				timer.Reset(c.interval)
				select {
				case <-ctx.Done():
					return
				case <-timer.C():
				case <-c.kick:
					timer.Stop()
				}
			}
			c.flushAll(ctx)
		}
	}
}

func (c *completer) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.outcomes) + len(c.malformed)
	if c.carry != nil {
		n += len(c.carry.settled)
	}
	return n
}

// flushAll flushes everything pending, retrying with backoff until it
// succeeds or ctx ends, acknowledgements first, then dead letters. It
// returns the last error if ctx ended first.
func (c *completer) flushAll(ctx context.Context) error {
	err := c.flushOwn(ctx)
	if lane := c.deadLane(); lane != nil {
		err = errors.Join(err, lane.flushAll(ctx))
	}
	return err
}

func (c *completer) flushOwn(ctx context.Context) error {
	c.mu.Lock()
	carried := c.carry
	c.carry = nil
	batch := c.outcomes
	bad := c.malformed
	c.outcomes = nil
	c.malformed = map[string]malformed{}
	c.mu.Unlock()
	if carried != nil {
		// A flush cut short by shutdown: finish it with its steps' state,
		// so nothing done is redone (or miscounted as a lost lease).
		if err := c.settle(ctx, carried); err != nil {
			c.handBack(batch, bad)
			return err
		}
	}
	if len(batch) == 0 && len(bad) == 0 {
		return nil
	}
	return c.settle(ctx, newFlush(batch, bad, c))
}

// settle runs f until it succeeds or ctx ends; then f is kept for the next
// flushAll (the final one at shutdown).
func (c *completer) settle(ctx context.Context, f *flush) error {
	for attempt := 1; ; attempt++ {
		err := f.run(ctx)
		if err == nil {
			c.onSettled(f.settled)
			c.afterFlush(nil)
			return nil
		}
		if ctx.Err() == nil {
			// (A flush cut short by shutdown is not a failure: the final
			// flush finishes it.)
			c.metrics.AckFlushErrors.Inc()
			c.afterFlush(err)
			c.log.Error("flushing finished users failed; will retry", "op", "ack flush", "users", len(f.settled), "attempt", attempt, "err", err)
		}
		delay := Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}.Delay(attempt, nil)
		if clock.Sleep(ctx, c.clock, delay) != nil {
			c.mu.Lock()
			c.carry = f
			c.mu.Unlock()
			return errors.Join(err, ctx.Err())
		}
	}
}

// handBack returns outcomes not yet flushed to the pending batch.
func (c *completer) handBack(batch []outcome, bad map[string]malformed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcomes = append(batch, c.outcomes...)
	for k, m := range bad {
		c.malformed[k] = m
	}
}

// flush is one batch on its way to MongoDB; each step remembers that it is
// done so a retry does not repeat it.
type flush struct {
	c                                   *completer
	acked, releases, exhausted, settled []lease
	ackIDs                              bson.A
	ackUsers                            []string // ackIDs' usernames, in the same order
	ackEntries                          []int
	retries                             []retry
	dead                                []deadLetter
	deadDone, ackDone, releaseDone      bool
	exhaustedDone, backOffDone          bool
	releaseTried, exhaustedTried        bool
}

func newFlush(batch []outcome, bad map[string]malformed, c *completer) *flush {
	f := &flush{c: c}
	now := c.serverTime.Now()
	for _, m := range bad {
		f.dead = append(f.dead, deadLetter{ID: m.ID, Reason: metrics.ReasonMalformed, Detail: m.Detail})
	}
	for _, o := range batch {
		l := o.work.lease
		f.settled = append(f.settled, l)
		switch {
		case o.release:
			f.releases = append(f.releases, l)
		case o.err == nil:
			f.acked = append(f.acked, l)
			f.ackEntries = append(f.ackEntries, len(o.work.entries))
			for _, e := range o.work.entries {
				f.ackIDs = append(f.ackIDs, e.ID)
				f.ackUsers = append(f.ackUsers, e.Username)
			}
		case o.transient:
			c.mu.Lock()
			delay := c.retryDelay.Delay(1, c.rnd)
			c.mu.Unlock()
			f.retries = append(f.retries, retry{lease: l, notBefore: now.Add(delay), err: truncate(o.err.Error(), 1024), solo: o.solo})
		case l.Attempts+1 >= c.maxAttempts:
			f.exhausted = append(f.exhausted, l)
			for _, e := range o.work.entries {
				f.dead = append(f.dead, deadLetter{ID: e.ID, User: e.Username, Reason: metrics.ReasonMaxAttempts, Detail: o.err.Error(), Attempts: l.Attempts + 1})
			}
		default:
			c.mu.Lock()
			delay := c.retryDelay.Delay(l.Attempts+1, c.rnd)
			c.mu.Unlock()
			f.retries = append(f.retries, retry{lease: l, notBefore: now.Add(delay), err: truncate(o.err.Error(), 1024), countAttempt: true})
		}
	}
	return f
}

// run does every step not yet done. The steps are independent except that an
// exhausted user's lease is released only once its entries are dead-lettered;
// one failing step does not stop the others.
func (f *flush) run(ctx context.Context) error {
	c := f.c
	var errs []error
	if !f.ackDone {
		if err := f.ack(ctx); err != nil {
			errs = append(errs, err)
		} else {
			f.ackDone = true
		}
	}
	if !f.releaseDone && f.ackDone {
		if err := f.release(ctx, append(append([]lease{}, f.acked...), f.releases...), &f.releaseTried); err != nil {
			errs = append(errs, err)
		} else {
			f.releaseDone = true
		}
	}
	if !f.deadDone {
		if err := f.deadLetters(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if !f.exhaustedDone && f.deadDone {
		if err := f.release(ctx, f.exhausted, &f.exhaustedTried); err != nil {
			errs = append(errs, err)
		} else {
			f.exhaustedDone = true
		}
	}
	if !f.backOffDone {
		if err := c.leases.backOff(ctx, f.retries); err != nil {
			errs = append(errs, err)
		} else {
			f.backOffDone = true
		}
	}
	return errors.Join(errs...)
}

// ack deletes the acknowledged entries in one delete command (the driver
// splits it only past maxWriteBatchSize); see deleteStatements for its shape.
func (f *flush) ack(ctx context.Context) error {
	c := f.c
	if len(f.ackIDs) == 0 {
		return nil
	}
	var users []string
	if c.byUser.Load() {
		users = f.ackUsers
	}
	models := deleteStatements(f.ackIDs, users...)
	res, err := c.queue.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return fmt.Errorf("acknowledging %d entries of %d users: %w", len(f.ackIDs), len(f.acked), err)
	}
	c.metrics.EntriesAcked.Add(float64(res.DeletedCount))
	for _, n := range f.ackEntries {
		c.metrics.CoalescedEntries.Observe(float64(n))
	}
	c.log.Debug("ack flush", "users", len(f.acked), "entries", res.DeletedCount)
	return nil
}

// deleteStatements delete queue entries by _id (an ack, a batch of dead
// letters) in one command. Up to
// maxIDStatements entries, one statement per _id: on MongoDB that is an
// index lookup each, like $in, and servers that push only plain _id
// equality down to storage (FerretDB) would otherwise read the whole queue
// for a flush of three entries, many times a second. Past that (a firehose
// user's backlog absorbed by one refresh), $in lists: one statement per
// 50,000 ids costs MongoDB less per entry than thousands of statements, and
// FerretDB one queue scan instead of thousands of queries.
//
// users, when given (through a mongos only), holds each entry's username,
// "" where it is unknown (a malformed entry): each statement then names its
// user too, so on a queue sharded on a key that starts with username it goes
// to the one shard that holds the entry instead of to every shard. It still
// matches the one entry: the username is the one read from it. The _id index
// is hinted, as the username's index would read all of that user's entries.
// Without users the statements are plain _id lookups: MongoDB's
// planner-free _id path, and the only filter FerretDB pushes down to its
// storage (docs/query-plans.md measures both forms there).
func deleteStatements(ids bson.A, users ...string) []mongo.WriteModel {
	if len(ids) > maxIDStatements {
		return deleteInLists(ids, users)
	}
	models := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		filter := bson.D{{Key: "_id", Value: id}}
		m := mongo.NewDeleteOneModel()
		if u := userAt(users, i); u != "" {
			filter = append(filter, bson.E{Key: "username", Value: u})
			m.SetHint(indexName(idIndex))
		}
		models[i] = m.SetFilter(filter)
	}
	return models
}

// deleteInLists is deleteStatements past maxIDStatements: $in lists of at
// most maxInIDs ids and about maxInBytes of them (an _id may be any value,
// and a thousand 20 KB ones would make one list past the 16 MiB a statement
// may hold, refused on every retry), one user's each when users are given.
func deleteInLists(ids bson.A, users []string) []mongo.WriteModel {
	byUser := map[string]bson.A{}
	var order []string
	for i, id := range ids {
		u := userAt(users, i)
		if _, ok := byUser[u]; !ok {
			order = append(order, u)
		}
		byUser[u] = append(byUser[u], id)
	}
	var models []mongo.WriteModel
	for _, u := range order {
		for _, chunk := range idChunks(byUser[u], maxInIDs, maxInBytes) {
			filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: chunk}}}}
			m := mongo.NewDeleteManyModel()
			if u != "" {
				filter = append(filter, bson.E{Key: "username", Value: u})
				m.SetHint(indexName(idIndex))
			}
			models = append(models, m.SetFilter(filter))
		}
	}
	return models
}

func userAt(users []string, i int) string {
	if i < len(users) {
		return users[i]
	}
	return ""
}

// maxIDStatements is the most entries deleted with one statement per _id.
const maxIDStatements = 1000

// release deletes leases. Fewer deleted than held means leases were taken
// over, but only on the first try: a retry after an error may find its own
// earlier delete already done.
func (f *flush) release(ctx context.Context, leases []lease, tried *bool) error {
	c := f.c
	first := !*tried
	*tried = true
	n, err := c.leases.release(ctx, leases)
	if err != nil {
		return err
	}
	if n < len(leases) && first {
		c.metrics.LeasesLost.Add(float64(len(leases) - n))
		c.log.Warn("leases were taken over while held (expired during a stall); those users may be refreshed twice, which is harmless",
			"op", "ack flush", "released", n, "held", len(leases))
	}
	return nil
}

// deadLetters moves this flush's dead letters, once. An entry that fails is
// postponed on its own rather than retried with the flush, so a dead letter
// that cannot be written holds back neither the others nor any
// acknowledgement: its failure is counted and logged, not returned. Only a
// move cut short by shutdown returns an error, leaving the unfinished
// entries to the final flush.
func (f *flush) deadLetters(ctx context.Context) error {
	c := f.c
	counts, failed, err := c.dead.move(ctx, f.dead, c.serverTime.Now())
	for reason, n := range counts {
		c.metrics.EntriesDeadLettered.WithLabelValues(reason).Add(float64(n))
	}
	if err != nil && ctx.Err() != nil {
		f.dead = failed // the others are done and counted
		return err
	}
	c.noteDeadLetters(f.dead, failed)
	if err != nil {
		c.metrics.AckFlushErrors.Inc()
		c.log.Error("dead letters failed; postponed, the entries stay in the queue",
			"op", "dead letter", "failed", len(failed), "entries", len(f.dead), "err", err)
		f.postponeDeadLetters(failed)
	}
	f.dead, f.deadDone = nil, true
	return nil
}

// postponeDeadLetters gives up on failed dead letters for now. The entries
// stay in the queue, so nothing is lost: a malformed one comes back with the
// first claim round that sees it after its backoff (noteDeadLetters), and an
// exhausted user with an entry left backs off and is dead-lettered again
// after it, without another refresh.
func (f *flush) postponeDeadLetters(failed []deadLetter) {
	c := f.c
	users := map[string]bool{}
	for _, b := range failed {
		if b.User != "" {
			users[b.User] = true
		}
	}
	if len(users) == 0 {
		return
	}
	if f.backOffDone { // (a final flush finishing a move cut short)
		f.retries, f.backOffDone = nil, false
	}
	now := c.serverTime.Now()
	kept := f.exhausted[:0]
	for _, l := range f.exhausted {
		if !users[l.User] {
			kept = append(kept, l)
			continue
		}
		f.retries = append(f.retries, retry{lease: l, notBefore: now.Add(c.retryDelay.Delay(l.Attempts, nil)), err: "dead-lettering failed; postponed"})
	}
	f.exhausted = kept
}

// deadLane returns the completer that moves this one's dead letters, built on
// first use with the same collaborators; it has no lane of its own (nil).
// Its flushes do not report to readiness (afterFlush), which says whether
// acknowledgements go through; its failures are logged and counted.
func (c *completer) deadLane() *completer {
	if c.isLane {
		return nil
	}
	c.laneOnce.Do(func() {
		c.lane = &completer{
			queue: c.queue, leases: c.leases, dead: c.dead, clock: c.clock, serverTime: c.serverTime, metrics: c.metrics, log: c.log,
			maxAttempts: c.maxAttempts, retryDelay: c.retryDelay, interval: c.interval, batchSize: c.batchSize,
			onSettled:  func(users []lease) { c.onSettled(users) },
			afterFlush: func(error) {},
			malformed:  map[string]malformed{},
			kick:       newSignal(),
			rnd:        rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
			isLane:     true,
		}
	})
	return c.lane
}

// outOfAttempts reports an outcome whose entries are to be dead-lettered
// (newFlush sorts it the same way).
func (c *completer) outOfAttempts(o outcome) bool {
	return !o.release && o.err != nil && !o.transient && o.work.lease.Attempts+1 >= c.maxAttempts
}

// deadRetry is when a malformed entry whose dead letter failed may be tried
// again.
type deadRetry struct {
	failures  int
	notBefore time.Time
}

// deadLetterBackoff spaces the tries of a malformed entry whose dead letter
// keeps failing, so it costs neither a round trip nor a log line per flush.
var deadLetterBackoff = Backoff{Base: time.Second, Max: 5 * time.Minute}

// maxDeadRetries bounds the malformed entries remembered as failing; past it
// one more is simply retried when a claim round sees it again.
const maxDeadRetries = 10_000

// noteDeadLetters records how a move of batch went for its malformed
// entries: the failed ones back off, the others are forgotten.
func (c *completer) noteDeadLetters(batch, failed []deadLetter) {
	bad := make(map[string]bool, len(failed))
	for _, b := range failed {
		bad[idKey(b.ID)] = true
	}
	now := c.serverTime.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadRetry == nil {
		c.deadRetry = map[string]deadRetry{}
	}
	for _, b := range batch {
		k := idKey(b.ID)
		r, known := c.deadRetry[k]
		switch {
		case b.User != "":
		case !bad[k]:
			delete(c.deadRetry, k)
		case known || len(c.deadRetry) < maxDeadRetries:
			r.failures++
			r.notBefore = now.Add(deadLetterBackoff.Delay(r.failures, nil))
			c.deadRetry[k] = r
		}
	}
}

// maxInIDs bounds one $in list: 50,000 ids of ~20 bytes stay far below the
// 16 MiB a statement may hold.
const maxInIDs = 50_000

// truncate is s cut to at most n bytes, on a character boundary, marked
// when cut: a lease's lastError is stored, and a cut through a character
// would store invalid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return prefix(s, n) + "…"
}
