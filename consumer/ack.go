package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
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
}

// completer settles finished users in batches, river's BatchCompleter idea: a
// flush happens AckInterval after the first outcome of a batch, or at once
// when AckBatchSize users are waiting. One flush costs a fixed number of
// round trips whatever its size:
//
//	dead letters      3 (read originals, insert copies, delete), only if any
//	ack               1 deleteMany of every acknowledged entry
//	release leases    1 deleteMany of acked, dead-lettered and released users
//	back off          1 bulk update of failed users, only if any
//
// Every step is safe to repeat (deletes are idempotent, dead letters keep the
// original _id, lease writes are fenced by the claim token), so a failed flush
// is retried whole with backoff until it succeeds: nothing is dropped, and the
// users stay held (and their leases renewed) until it does.
type completer struct {
	queue       *mongo.Collection
	leases      *leaseStore
	dead        *deadLetterer
	clock       Clock
	metrics     *metrics.Consumer
	log         *slog.Logger
	maxAttempts int
	retryDelay  Backoff // backoff of a failed user before its next refresh
	interval    time.Duration
	batchSize   int
	onSettled   func(users []lease) // the users are no longer held

	mu        sync.Mutex
	outcomes  []outcome
	malformed map[string]malformed // by _id: the same bad entry seen by several claim rounds is moved once
	kick      signal
	rnd       *rand.Rand
}

func (c *completer) add(o outcome) {
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
	c.mu.Lock()
	for _, m := range ms {
		c.malformed[idKey(m.ID)] = m
	}
	c.mu.Unlock()
	c.kick.notify()
}

// run flushes until ctx ends, then returns; call flushAll after it for the
// final flush at shutdown.
func (c *completer) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
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
				case <-timer.C:
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
	return len(c.outcomes) + len(c.malformed)
}

// flushAll flushes everything pending, retrying with backoff until it
// succeeds or ctx ends. It returns the last error if ctx ended first.
func (c *completer) flushAll(ctx context.Context) error {
	c.mu.Lock()
	batch := c.outcomes
	bad := c.malformed
	c.outcomes = nil
	c.malformed = map[string]malformed{}
	c.mu.Unlock()
	if len(batch) == 0 && len(bad) == 0 {
		return nil
	}
	f := newFlush(batch, bad, c)
	for attempt := 1; ; attempt++ {
		err := f.run(ctx)
		if err == nil {
			c.onSettled(f.settled)
			return nil
		}
		c.metrics.AckFlushErrors.Inc()
		c.log.Error("flushing finished users failed; will retry", "op", "ack flush", "users", len(batch), "attempt", attempt, "err", err)
		delay := Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}.Delay(attempt, nil)
		select {
		case <-ctx.Done():
			// Hand the batch back so a final flush can still try it.
			c.mu.Lock()
			c.outcomes = append(batch, c.outcomes...)
			for k, m := range bad {
				c.malformed[k] = m
			}
			c.mu.Unlock()
			return errors.Join(err, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// flush is one batch on its way to MongoDB; each step remembers that it is
// done so a retry does not repeat it.
type flush struct {
	c                                   *completer
	acked, releases, exhausted, settled []lease
	ackIDs                              bson.A
	ackEntries                          []int
	retries                             []retry
	dead                                []deadLetter
	deadDone, ackDone, releaseDone      bool
	backOffDone                         bool
}

func newFlush(batch []outcome, bad map[string]malformed, c *completer) *flush {
	f := &flush{c: c}
	now := c.clock.Now()
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
			}
		case o.transient:
			c.mu.Lock()
			delay := c.retryDelay.Delay(1, c.rnd)
			c.mu.Unlock()
			f.retries = append(f.retries, retry{lease: l, notBefore: now.Add(delay), err: truncate(o.err.Error(), 1024)})
		case l.Attempts+1 >= c.maxAttempts:
			f.exhausted = append(f.exhausted, l)
			for _, e := range o.work.entries {
				f.dead = append(f.dead, deadLetter{ID: e.ID, Reason: metrics.ReasonMaxAttempts, Detail: o.err.Error(), Attempts: l.Attempts + 1})
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

func (f *flush) run(ctx context.Context) error {
	c := f.c
	if !f.deadDone {
		counts, err := c.dead.move(ctx, f.dead, c.clock.Now())
		for reason, n := range counts {
			c.metrics.EntriesDeadLettered.WithLabelValues(reason).Add(float64(n))
		}
		if err != nil {
			return err
		}
		f.dead = nil // counted; a retry must not count them again
		f.deadDone = true
	}
	if !f.ackDone {
		if len(f.ackIDs) > 0 {
			res, err := c.queue.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: f.ackIDs}}}})
			if err != nil {
				return fmt.Errorf("acknowledging %d entries of %d users: %w", len(f.ackIDs), len(f.acked), err)
			}
			c.metrics.EntriesAcked.Add(float64(res.DeletedCount))
			for _, n := range f.ackEntries {
				c.metrics.CoalescedEntries.Observe(float64(n))
			}
			c.log.Debug("ack flush", "users", len(f.acked), "entries", res.DeletedCount)
		}
		f.ackDone = true
	}
	if !f.releaseDone {
		all := append(append(append([]lease{}, f.acked...), f.exhausted...), f.releases...)
		n, err := c.leases.release(ctx, all)
		if err != nil {
			return err
		}
		if n < len(all) {
			c.metrics.LeasesLost.Add(float64(len(all) - n))
			c.log.Warn("leases were taken over while held (expired during a stall); those users may be refreshed twice, which is harmless",
				"op", "ack flush", "released", n, "held", len(all))
		}
		f.releaseDone = true
	}
	if !f.backOffDone {
		if err := c.leases.backOff(ctx, f.retries); err != nil {
			return err
		}
		f.backOffDone = true
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
