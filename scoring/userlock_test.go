package scoring

import (
	"context"
	"errors"
	"testing"
)

func TestUserLocks(t *testing.T) {
	t.Parallel()
	var l userLocks
	unlockA, err := l.lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	// Other users are independent.
	unlockB, err := l.lock(context.Background(), "b")
	if err != nil {
		t.Fatalf("locking another user: %v", err)
	}
	unlockB()

	// A held lock makes a second locker wait until its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.lock(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("lock of a held user with a cancelled context = %v, want context.Canceled", err)
	}

	unlockA()
	unlockA2, err := l.lock(context.Background(), "a")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlockA2()
	if n := len(l.held); n != 0 {
		t.Errorf("%d lock entries remain after every unlock, want 0", n)
	}
}
