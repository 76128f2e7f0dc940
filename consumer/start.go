package consumer

import (
	"context"
	"sync"
)

// startMarker writes "this refresh is running" on lease documents before the
// refreshes begin, batching the users that start at about the same time into
// one round trip (group commit: whoever finds no write in flight writes for
// everyone waiting, the others wait for that write). The mark is what lets a
// takeover after a crash charge the users that were running and nobody else.
type startMarker struct {
	leases *leaseStore

	mu      sync.Mutex
	pending []lease
	waiters []chan struct{}
	writing bool
}

// mark returns once the leases are marked, or the attempt failed (the refresh
// goes ahead either way: a missing mark only means a crash in this refresh
// would not be charged to its user).
func (m *startMarker) mark(ctx context.Context, ls ...lease) error {
	done := make(chan struct{})
	m.mu.Lock()
	m.pending = append(m.pending, ls...)
	m.waiters = append(m.waiters, done)
	if m.writing {
		m.mu.Unlock()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m.writing = true
	var err error
	for len(m.pending) > 0 {
		batch, waiters := m.pending, m.waiters
		m.pending, m.waiters = nil, nil
		m.mu.Unlock()
		err = m.leases.markRunning(ctx, batch)
		for _, w := range waiters {
			close(w)
		}
		m.mu.Lock()
	}
	m.writing = false
	m.mu.Unlock()
	return err
}
