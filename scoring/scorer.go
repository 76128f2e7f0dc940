package scoring

import (
	"context"
	"time"
)

// Scorer computes users' scores: the part of a refresh a team may bring of
// its own; the service keeps everything around it (claims, concurrency, the
// OCC store, retries, dead letters, metrics). The rules (Recomputer) are one
// Scorer, an external one over HTTP (HTTPScorer) another.
//
// Score is called with at most REFRESH_BATCH_SIZE distinct users, at most
// REFRESH_CONCURRENCY calls at once, and asOf the moment the refresh began
// by the server's clock: it must read data at least as fresh. Every user
// comes back in exactly one of results or failed; a user in failed failed
// alone (charged, backed off, dead-lettered after MAX_ATTEMPTS with the
// error's text). A non-nil err fails the whole call: nobody is charged and
// every user is retried (a user alone whose calls keep failing while others'
// succeed is charged then).
type Scorer interface {
	Score(ctx context.Context, users []string, asOf time.Time) (results map[string]Result, failed map[string]error, err error)
}

// Score is the rules' Scorer: RecomputeBatch.
func (r *Recomputer) Score(ctx context.Context, users []string, asOf time.Time) (map[string]Result, map[string]error, error) {
	results, err := r.RecomputeBatch(ctx, users, asOf)
	return results, nil, err // for a user alone, the caller names the user
}
