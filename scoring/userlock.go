package scoring

import (
	"context"
	"sync"
)

// userLocks serialises the writes of one user within a process. Optimistic
// concurrency still guards against other processes; this keeps writers in
// the same process from wasting round trips on conflicts with each other, and
// it is what keeps writes correct on FerretDB 1.24, whose updateOne is not an
// atomic compare-and-set: it finds the matching document, then replaces it by
// _id, so two concurrent updates guarded by the same version can both match.
type userLocks struct {
	mu   sync.Mutex
	held map[string]*userLock
}

type userLock struct {
	slot    chan struct{} // holds a token while the lock is held
	waiters int           // holders and waiters; the entry goes at 0
}

// lock blocks until username's lock is free or ctx is done; on success the
// caller must call unlock.
func (l *userLocks) lock(ctx context.Context, username string) (unlock func(), err error) {
	l.mu.Lock()
	if l.held == nil {
		l.held = map[string]*userLock{}
	}
	ul := l.held[username]
	if ul == nil {
		ul = &userLock{slot: make(chan struct{}, 1)}
		l.held[username] = ul
	}
	ul.waiters++
	l.mu.Unlock()

	select {
	case ul.slot <- struct{}{}:
		return func() {
			<-ul.slot
			l.release(username, ul)
		}, nil
	case <-ctx.Done():
		l.release(username, ul)
		return nil, ctx.Err()
	}
}

func (l *userLocks) release(username string, ul *userLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ul.waiters--
	if ul.waiters == 0 {
		delete(l.held, username)
	}
}

// lockAll takes the locks of users, which must be sorted and free of repeats,
// one after another in that order; on failure it releases those it took.
//
// The fixed order is what rules out deadlock: two holders of several locks
// each wait only for a lock later in the same order than all they hold, so no
// cycle of waiting can form. (Batch A holding x and waiting for y while batch
// B holds y and waits for x needs B to take y before x, against the order.)
func (l *userLocks) lockAll(ctx context.Context, users []string) (unlock func(), err error) {
	unlocks := make([]func(), 0, len(users))
	unlock = func() {
		for _, u := range unlocks {
			u()
		}
	}
	for _, u := range users {
		un, err := l.lock(ctx, u)
		if err != nil {
			unlock()
			return nil, err
		}
		unlocks = append(unlocks, un)
	}
	return unlock, nil
}
