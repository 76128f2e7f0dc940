package scoring

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Refresher refreshes users' score documents: a full recompute from the
// source collections, then an OCC write; one user at a time (Refresh) or a
// batch at a time (RefreshBatch).
type Refresher struct {
	scorer  Scorer
	store   *Store
	observe func(RefreshStats)
}

// RefreshStats describes one Refresh or RefreshBatch call, for metrics.
type RefreshStats struct {
	Users int // distinct users the call refreshed: 1 for Refresh
	// RoundTrips counts the MongoDB commands the call sent: component
	// queries (batched and per-user), score reads and writes, conflict
	// retries, including those of failed calls.
	RoundTrips int
}

// RefresherOption configures a Refresher.
type RefresherOption func(*Refresher)

// WithRefreshObserver has f called once at the end of every Refresh and
// RefreshBatch call, whatever its outcome.
func WithRefreshObserver(f func(RefreshStats)) RefresherOption {
	return func(r *Refresher) { r.observe = f }
}

// NewRefresher returns a Refresher scoring with scorer (the rules'
// Recomputer, or a team's own) and writing to store.
func NewRefresher(scorer Scorer, store *Store, opts ...RefresherOption) *Refresher {
	r := &Refresher{scorer: scorer, store: store}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Refresh recomputes username's score and stores it as of startedAt, the
// moment this refresh began (before any of its reads). Losing to a newer
// refresh already stored is success: that document reflects at least as much.
func (r *Refresher) Refresh(ctx context.Context, username string, startedAt time.Time) error {
	ctx, trips := withRoundTrips(ctx)
	defer r.report(1, trips)
	prior, err := r.store.ReadPrior(ctx, []string{username})
	if err != nil {
		return fmt.Errorf("refreshing score of %q: %w", username, err)
	}
	results, failed, err := r.scorer.Score(ctx, []string{username}, startedAt)
	if err == nil {
		err = failed[username]
	}
	if err != nil {
		return fmt.Errorf("refreshing score of %q: %w", username, err)
	}
	res, ok := results[username]
	if !ok {
		return fmt.Errorf("refreshing score of %q: the scorer returned no score for this user", username)
	}
	if _, err := r.store.WriteAfter(ctx, prior, username, res, startedAt); err != nil {
		return fmt.Errorf("storing refreshed score: %w", err) // names the user
	}
	return nil
}

// RefreshBatch is Refresh for several users at once, all as of startedAt:
// RecomputeBatch then WriteBatch, so a batch costs one round trip per
// component plus two, instead of that per user. Users whose batched write
// lost a race (or was refused) are retried one by one with Write, which backs
// off.
//
// The result has an entry for every distinct user of users: nil when the
// user's score was stored (or left alone because a newer one was), else why
// not. A failed component query fails every user of the batch with the same
// error, as does a failed batch read or write for the users it left
// unsettled; a failed individual retry fails that user only.
func (r *Refresher) RefreshBatch(ctx context.Context, users []string, startedAt time.Time) map[string]error {
	users = uniqueUsers(users)
	errs := make(map[string]error, len(users))
	if len(users) == 0 {
		return errs
	}
	ctx, trips := withRoundTrips(ctx)
	defer r.report(len(users), trips)

	// The stored documents first: a refresh supersedes what it read before
	// its recompute, whatever the replicas' clocks say (see Prior).
	prior, err := r.store.ReadPrior(ctx, users)
	var results map[string]Result
	var failed map[string]error
	if err == nil {
		results, failed, err = r.scorer.Score(ctx, users, startedAt)
	}
	if err != nil {
		err = fmt.Errorf("refreshing a batch of %d users: %w", len(users), err)
		for _, u := range users {
			errs[u] = err
		}
		return errs
	}
	// Only the users the scorer scored are written; the others fail alone.
	scored := make(map[string]Result, len(results))
	for _, u := range users {
		switch res, ok := results[u]; {
		case failed[u] != nil:
			errs[u] = fmt.Errorf("refreshing score of %q: %w", u, failed[u])
		case !ok:
			errs[u] = fmt.Errorf("refreshing score of %q: the scorer returned no score for this user", u)
		default:
			scored[u] = res
		}
	}
	if len(scored) == 0 {
		return errs
	}
	outcomes, retry, err := r.store.WriteBatchAfter(ctx, prior, scored, startedAt)
	for u := range outcomes {
		errs[u] = nil
	}
	for _, u := range retry {
		errs[u] = nil
		// Write, not WriteAfter: a user to retry mostly lost a race with a
		// refresh running alongside, which only refreshedAt can order.
		if _, werr := r.store.Write(ctx, u, scored[u], startedAt); werr != nil {
			errs[u] = fmt.Errorf("storing refreshed score: %w", werr) // names the user
		}
	}
	for u := range scored {
		if _, settled := errs[u]; !settled {
			errs[u] = fmt.Errorf("storing the refreshed scores of a batch of %d users: %w", len(users), err)
		}
	}
	return errs
}

func (r *Refresher) report(users int, trips *atomic.Int64) {
	if r.observe != nil {
		r.observe(RefreshStats{Users: users, RoundTrips: int(trips.Load())})
	}
}
