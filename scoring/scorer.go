package scoring

import (
	"context"
	"time"
)

// Scorer computes users' scores: the part of a refresh a team may bring of
// its own. The service keeps everything around it (claims, coalescing,
// concurrency, the OCC store, retries, charging, dead letters, metrics) and
// asks a Scorer only for the numbers. The rules (Recomputer) are one
// Scorer; an external one over HTTP (HTTPScorer) is another.
//
// Score is called with at most REFRESH_BATCH_SIZE distinct users, at most
// REFRESH_CONCURRENCY calls at once, and asOf the moment the refresh began
// by the database server's clock: it must read data at least as fresh as
// that. Every user must come back in exactly one of results or failed: a
// user in failed failed alone (charged to that user, backed off, and
// dead-lettered after MAX_ATTEMPTS with the error's text). A non-nil err
// fails the whole call: nobody is charged for it and every user is retried
// (a user refreshed alone whose calls fail while others' succeed is
// charged then).
type Scorer interface {
	Score(ctx context.Context, users []string, asOf time.Time) (results map[string]Result, failed map[string]error, err error)
}

// Score is the rules' Scorer: RecomputeBatch, whose queries for a user
// alone are per-user ones and for several one per component.
func (r *Recomputer) Score(ctx context.Context, users []string, asOf time.Time) (map[string]Result, map[string]error, error) {
	results, err := r.RecomputeBatch(ctx, users, asOf)
	return results, nil, err // for a user alone, the caller names the user
}
