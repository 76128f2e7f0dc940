package scoring

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// Refresher refreshes users' score documents a batch at a time: a recompute, then an OCC write.
type Refresher struct {
	scorer  Scorer
	store   *Store
	observe func(RefreshStats)
}

// RefreshStats describes one Refresh or RefreshBatch call, for metrics.
type RefreshStats struct {
	Users      int // distinct users the call refreshed: 1 for Refresh
	RoundTrips int // MongoDB commands the call sent (queries, score reads and writes, retries), failed or not
}

// RefresherOption configures a Refresher.
type RefresherOption func(*Refresher)

// WithRefreshObserver has f called after every Refresh and RefreshBatch, whatever the outcome.
func WithRefreshObserver(f func(RefreshStats)) RefresherOption {
	return func(r *Refresher) { r.observe = f }
}

// NewRefresher returns a Refresher scoring with scorer (Recomputer, or a team's own) into store.
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

// RefreshBatch recomputes users' scores and stores them as of startedAt, when this refresh began
// (before any of its reads): ReadPrior, the scorer, then WriteBatchAfter (WriteAfter for a user
// alone). A user superseded meanwhile (ErrSuperseded) is refreshed again after a backoff, up to
// MaxConflictRetries times (see Prior). The result holds, per distinct user, nil once stored or
// else why not; a failed scorer call, batch read or batch write fails every user it left unsettled.
func (r *Refresher) RefreshBatch(ctx context.Context, users []string, startedAt time.Time) map[string]error {
	users = uniqueUsers(users)
	errs := make(map[string]error, len(users))
	if len(users) == 0 {
		return errs
	}
	trips := new(atomic.Int64) // the round trips of the calls below (noteRoundTrip)
	ctx = context.WithValue(ctx, roundTripsKey{}, trips)
	defer func(n int) { // the users asked for, not those refreshed again
		if r.observe != nil {
			r.observe(RefreshStats{Users: n, RoundTrips: int(trips.Load())})
		}
	}(len(users))
	for recomputes := 1; ; recomputes++ {
		superseded := r.refresh(ctx, users, startedAt, errs)
		if len(superseded) == 0 {
			return errs
		}
		err := fmt.Errorf("gave up after %d recomputes, each superseded by another refresh's write: %w", recomputes, ErrConflict)
		if recomputes < r.store.cfg.MaxConflictRetries {
			err = clock.Sleep(ctx, r.store.cfg.Clock, r.store.backoff(recomputes))
		}
		if err != nil {
			for _, u := range superseded {
				errs[u] = fmt.Errorf("refreshing score of %q again: %w", u, err)
			}
			return errs
		}
		users = superseded
	}
}

// refresh is one pass of RefreshBatch: it records each user's outcome in
// errs, except the users it returns, whose documents were superseded.
func (r *Refresher) refresh(ctx context.Context, users []string, startedAt time.Time, errs map[string]error) (superseded []string) {
	// The stored documents first: a refresh supersedes what it read before its recompute.
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
		return nil
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
	return r.write(ctx, prior, scored, startedAt, errs)
}

// write stores the scored results over prior, recording outcomes in errs: WriteBatchAfter for
// several, then WriteAfter for each user left (or alone). It returns the users superseded.
func (r *Refresher) write(ctx context.Context, prior Prior, scored map[string]Result, startedAt time.Time, errs map[string]error) (superseded []string) {
	retry := slices.Collect(maps.Keys(scored))
	var err error
	if len(scored) > 1 {
		var outcomes map[string]WriteOutcome
		outcomes, retry, err = r.store.WriteBatchAfter(ctx, prior, scored, startedAt)
		for u := range outcomes {
			errs[u] = nil
		}
	}
	for _, u := range retry {
		switch _, werr := r.store.WriteAfter(ctx, prior, u, scored[u], startedAt); {
		case errors.Is(werr, ErrSuperseded):
			superseded = append(superseded, u)
		case werr != nil:
			errs[u] = fmt.Errorf("storing refreshed score: %w", werr) // names the user
		default:
			errs[u] = nil
		}
	}
	for u := range scored {
		if _, settled := errs[u]; !settled && !slices.Contains(superseded, u) {
			errs[u] = fmt.Errorf("storing the refreshed scores of a batch of %d users: %w", len(scored), err)
		}
	}
	return superseded
}

// Scorer computes users' scores: the part of a refresh a team may bring of its own
// (docs/scorers.md); Recomputer and HTTPScorer are two. Score gets at most REFRESH_BATCH_SIZE
// distinct users, at most REFRESH_CONCURRENCY calls at once, and asOf, when the refresh began by
// the server's clock: it must read data at least as fresh. Every user comes back in exactly one of
// results or failed; one in failed failed alone (charged, backed off, dead-lettered after
// MAX_ATTEMPTS with the error's text). A non-nil err fails the call: nobody is charged, every user
// is retried (a user alone whose calls keep failing while others' succeed is charged then).
type Scorer interface {
	Score(ctx context.Context, users []string, asOf time.Time) (results map[string]Result, failed map[string]error, err error)
}

// Score is the rules' Scorer: RecomputeBatch.
func (r *Recomputer) Score(ctx context.Context, users []string, asOf time.Time) (map[string]Result, map[string]error, error) {
	results, err := r.RecomputeBatch(ctx, users, asOf)
	return results, nil, err // for a user alone, the caller names the user
}

// roundTripsKey carries a refresh's round-trip tally in its context: a Recomputer or Store
// shared by concurrent refreshes has no other per-call place to keep it.
type roundTripsKey struct{}

// noteRoundTrip records one command about to be sent, if ctx is tallied: every answer
// here fits in the first reply (the getMore of one beyond 16 MiB is not counted).
func noteRoundTrip(ctx context.Context) {
	if n, ok := ctx.Value(roundTripsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}
