package scoring

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Refresher refreshes users' score documents: a full recompute from the
// source collections, then an OCC write, a batch of users at a time (a user
// alone is a batch of one).
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

// Refresh is RefreshBatch for username alone.
func (r *Refresher) Refresh(ctx context.Context, username string, startedAt time.Time) error {
	return r.RefreshBatch(ctx, []string{username}, startedAt)[username]
}

// RefreshBatch recomputes the scores of users and stores them as of
// startedAt, the moment this refresh began (before any of its reads): the
// scorer, then one WriteBatch for several users, so a batch costs one round
// trip per component plus two, instead of that per user. A user alone is a
// batch of one, written with Write. Users whose batched write lost a race
// (or was refused) are retried one by one with Write, which backs off.
// Losing to a newer refresh already stored is success: that document
// reflects at least as much.
//
// The result has an entry for every distinct user of users: nil when the
// user's score was stored (or left alone because a newer one was), else why
// not. A failed scorer call fails every user of the batch with the same
// error, as does a failed batch read or write for the users it left
// unsettled; a failed individual write fails that user only.
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
		what := fmt.Sprintf("a batch of %d users", len(users))
		if len(users) == 1 {
			what = fmt.Sprintf("score of %q", users[0])
		}
		err = fmt.Errorf("refreshing %s: %w", what, err)
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
	r.write(ctx, prior, scored, startedAt, errs)
	return errs
}

// write stores the scored users' results over prior and records each one's
// outcome in errs: several in one WriteBatchAfter, then Write for each user
// it could not settle (mostly a race lost to a refresh running alongside,
// which only refreshedAt can order); a user alone with WriteAfter, the
// commands a refresh of one user always sent.
func (r *Refresher) write(ctx context.Context, prior Prior, scored map[string]Result, startedAt time.Time, errs map[string]error) {
	var retry []string
	var err error
	if len(scored) > 1 {
		var outcomes map[string]WriteOutcome
		outcomes, retry, err = r.store.WriteBatchAfter(ctx, prior, scored, startedAt)
		for u := range outcomes {
			errs[u] = nil
		}
	}
	if len(scored) == 1 {
		for u, res := range scored {
			errs[u] = nil
			if _, werr := r.store.WriteAfter(ctx, prior, u, res, startedAt); werr != nil {
				errs[u] = fmt.Errorf("storing refreshed score: %w", werr) // names the user
			}
		}
	}
	for _, u := range retry {
		errs[u] = nil
		if _, werr := r.store.Write(ctx, u, scored[u], startedAt); werr != nil {
			errs[u] = fmt.Errorf("storing refreshed score: %w", werr) // names the user
		}
	}
	for u := range scored {
		if _, settled := errs[u]; !settled {
			errs[u] = fmt.Errorf("storing the refreshed scores of a batch of %d users: %w", len(scored), err)
		}
	}
}

func (r *Refresher) report(users int, trips *atomic.Int64) {
	if r.observe != nil {
		r.observe(RefreshStats{Users: users, RoundTrips: int(trips.Load())})
	}
}
