package clocktest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fired reports whether c has a value, and which.
func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestTimerFiresOnceAtItsDeadline(t *testing.T) {
	f := NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second - time.Nanosecond)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("timer fired before its deadline")
	}
	f.Advance(time.Nanosecond)
	if at, ok := fired(tm.C()); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("timer at its deadline: fired %v at %v, want at %v", ok, at, start.Add(time.Second))
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok || f.Waiters() != 0 {
		t.Fatalf("timer fired twice (%v) or stays pending (%d waiters)", ok, f.Waiters())
	}
}

func TestAdvanceFiresInDeadlineOrderAtEachDeadline(t *testing.T) {
	f := NewFake(start)
	late, early := f.NewTimer(3*time.Second), f.NewTimer(time.Second)
	tick := f.NewTicker(2 * time.Second)
	f.Advance(5 * time.Second)
	if at, _ := fired(early.C()); !at.Equal(start.Add(time.Second)) {
		t.Errorf("early timer fired at %v", at)
	}
	if at, _ := fired(late.C()); !at.Equal(start.Add(3 * time.Second)) {
		t.Errorf("late timer fired at %v", at)
	}
	// Two periods passed, but like a time.Ticker the channel holds one tick.
	if at, _ := fired(tick.C()); !at.Equal(start.Add(2 * time.Second)) {
		t.Errorf("ticker's kept tick is from %v, want the first, at 2s", at)
	}
	if _, ok := fired(tick.C()); ok {
		t.Error("ticker queued more than one tick")
	}
	if now := f.Now(); !now.Equal(start.Add(5 * time.Second)) {
		t.Errorf("now = %v after advancing 5s", now)
	}
	f.Advance(time.Second) // 6s: the ticker's third period
	if at, _ := fired(tick.C()); !at.Equal(start.Add(6 * time.Second)) {
		t.Errorf("ticker's next tick at %v, want 6s", at)
	}
}

func TestStopAndResetLeaveNoStaleValue(t *testing.T) {
	f := NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second) // fired, not received
	if tm.Stop() {
		t.Error("Stop of a fired timer reported it active")
	}
	if _, ok := fired(tm.C()); ok {
		t.Error("a stopped timer's channel still held a value")
	}
	if tm.Reset(time.Second) {
		t.Error("Reset of a stopped timer reported it active")
	}
	if !tm.Stop() {
		t.Error("Stop of a pending timer reported it inactive")
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Error("a stopped timer fired")
	}

	tick := f.NewTicker(time.Second)
	f.Advance(time.Second)
	tick.Reset(time.Minute)
	if _, ok := fired(tick.C()); ok {
		t.Error("a reset ticker's channel kept its old tick")
	}
	f.Advance(59 * time.Second)
	if _, ok := fired(tick.C()); ok {
		t.Error("a ticker reset to 1m ticked before a minute")
	}
	f.Advance(time.Second)
	if _, ok := fired(tick.C()); !ok {
		t.Error("a ticker reset to 1m did not tick after a minute")
	}
	tick.Stop()
	if f.Waiters() != 0 {
		t.Errorf("%d waiters after stopping everything", f.Waiters())
	}
}

func TestBlockUntilReturnsOnceTheCodeWaits(t *testing.T) {
	f := NewFake(start)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	slept := make(chan error)
	go func() { slept <- clock.Sleep(ctx, f, time.Second) }()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the sleeper never waited: %v", err)
	}
	f.Advance(time.Second)
	if err := <-slept; err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if f.Waiters() != 0 {
		t.Errorf("Sleep left %d waiters", f.Waiters())
	}

	short, cancelShort := context.WithCancel(t.Context())
	cancelShort()
	if err := f.BlockUntil(short, 1); err == nil {
		t.Error("BlockUntil with nothing waiting returned nil when ctx ended")
	}
}

func TestSleepEndsWithContextAndDropsItsTimer(t *testing.T) {
	f := NewFake(start)
	ctx, cancel := context.WithCancel(t.Context())
	slept := make(chan error)
	go func() { slept <- clock.Sleep(ctx, f, time.Hour) }()
	if err := f.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-slept; err != context.Canceled {
		t.Fatalf("Sleep after cancel = %v, want context.Canceled", err)
	}
	if f.Waiters() != 0 {
		t.Errorf("an abandoned Sleep left %d waiters", f.Waiters())
	}
}

func TestEveryCallsOncePerIntervalUntilCancelled(t *testing.T) {
	f := NewFake(start)
	ctx, cancel := context.WithCancel(t.Context())
	calls := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		defer close(done)
		clock.Every(ctx, f, time.Second, func(context.Context) { calls <- f.Now() })
	}()
	for i := 1; i <= 3; i++ {
		if err := f.BlockUntil(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-calls:
			t.Fatalf("call at %v before the interval passed", at)
		default:
		}
		f.Advance(time.Second)
		if at := <-calls; !at.Equal(start.Add(time.Duration(i) * time.Second)) {
			t.Fatalf("call %d at %v", i, at)
		}
	}
	cancel()
	<-done
	if f.Waiters() != 0 {
		t.Errorf("Every left %d waiters", f.Waiters())
	}
}

func TestAutoRunsThroughSleepsAndRecordsThem(t *testing.T) {
	f := NewAuto(start)
	for _, d := range []time.Duration{time.Second, time.Minute} {
		if err := clock.Sleep(t.Context(), f, d); err != nil {
			t.Fatal(err)
		}
	}
	if now := f.Now(); !now.Equal(start.Add(61 * time.Second)) {
		t.Errorf("now = %v after sleeping 1s and 1m", now)
	}
	if got, want := f.Armed(), []time.Duration{time.Second, time.Minute}; !slices.Equal(got, want) {
		t.Errorf("Armed() = %v, want %v", got, want)
	}
}

func TestPendingListsTimeLeft(t *testing.T) {
	f := NewFake(start)
	f.NewTimer(3 * time.Second)
	f.NewTicker(time.Second)
	f.Advance(500 * time.Millisecond)
	if got, want := f.Pending(), []time.Duration{500 * time.Millisecond, 2500 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("Pending() = %v, want %v", got, want)
	}
}

func TestBlockUntilWaitingPicksOutOneWait(t *testing.T) {
	f := NewFake(start)
	f.NewTicker(time.Second) // something else waiting all along
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	slept := make(chan error)
	go func() { slept <- clock.Sleep(ctx, f, 7*time.Second) }()
	if err := f.BlockUntilWaiting(ctx, 7*time.Second); err != nil {
		t.Fatalf("the 7s wait never began: %v", err)
	}
	f.Advance(7 * time.Second)
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	// The ticker now has 1s left again, after Advance moved it on.
	if err := f.BlockUntilWaiting(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestZeroTimerFiresAtOnce(t *testing.T) {
	f := NewFake(start)
	if _, ok := fired(f.After(0)); !ok {
		t.Error("After(0) did not fire at once")
	}
	tm := f.NewTimer(time.Second)
	tm.Reset(-time.Second)
	if _, ok := fired(tm.C()); !ok {
		t.Error("a timer reset to a negative duration did not fire at once")
	}
	if f.Waiters() != 0 || len(f.Armed()) != 1 {
		t.Errorf("%d waiters, armed %v; want none pending and only the 1s wait armed", f.Waiters(), f.Armed())
	}
}

// Waiters is how many timers and tickers are pending.
func (f *Fake) Waiters() int { return len(f.Pending()) }
