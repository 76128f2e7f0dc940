package deadline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestStretchDoublesWhileTimingOutAndResetsOnSuccess(t *testing.T) {
	t.Parallel()
	s := Stretch{Base: 30 * time.Second, Max: 4 * time.Minute}
	timeout := fmt.Errorf("reading the window: %w", context.DeadlineExceeded)
	steps := []struct {
		err     error
		timeout bool
		next    time.Duration
	}{
		{nil, false, 30 * time.Second},
		{timeout, true, time.Minute},
		{timeout, true, 2 * time.Minute},
		{errors.New("unauthorized"), false, 2 * time.Minute}, // says nothing about time
		{timeout, true, 4 * time.Minute},
		{timeout, true, 4 * time.Minute}, // capped
		{nil, false, 30 * time.Second},
	}
	if got := s.Next(); got != 30*time.Second {
		t.Fatalf("first deadline %s, want the base", got)
	}
	for i, st := range steps {
		if got := s.Observe(st.err); got != st.timeout {
			t.Errorf("step %d: Observe(%v) = %v, want %v", i, st.err, got, st.timeout)
		}
		if got := s.Next(); got != st.next {
			t.Errorf("step %d: next deadline %s, want %s", i, got, st.next)
		}
	}
}

func TestStretchMaxBelowBaseKeepsTheBase(t *testing.T) {
	t.Parallel()
	s := Stretch{Base: time.Second}
	s.Observe(context.DeadlineExceeded)
	if got := s.Next(); got != time.Second {
		t.Errorf("deadline %s with no Max, want the base", got)
	}
}
