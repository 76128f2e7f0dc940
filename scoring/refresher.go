package scoring

import (
	"context"
	"fmt"
	"time"
)

// Refresher refreshes one user's score document: a full recompute from the
// source collections, then an OCC write.
type Refresher struct {
	rec   *Recomputer
	store *Store
}

// NewRefresher returns a Refresher computing with rec and writing to store.
func NewRefresher(rec *Recomputer, store *Store) *Refresher {
	return &Refresher{rec: rec, store: store}
}

// Refresh recomputes username's score and stores it as of startedAt, the
// moment this refresh began (before any of its reads). Losing to a newer
// refresh already stored is success: that document reflects at least as much.
func (r *Refresher) Refresh(ctx context.Context, username string, startedAt time.Time) error {
	res, err := r.rec.Recompute(ctx, username, startedAt)
	if err != nil {
		return fmt.Errorf("refreshing score of %q: %w", username, err)
	}
	if _, err := r.store.Write(ctx, username, res, startedAt); err != nil {
		return fmt.Errorf("storing refreshed score: %w", err) // names the user
	}
	return nil
}
