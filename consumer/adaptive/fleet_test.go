package adaptive

import (
	"maps"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
)

// names counts commands by name.
func names(cmds []queryplan.Command) map[string]int {
	n := map[string]int{}
	for _, c := range cmds {
		n[c.Name]++
	}
	return n
}

// TestFleetBaselinesExchangeThroughTheClaimsCollection runs three replicas'
// exchanges against the real server: each sees the lowest fresh baseline,
// stale ones are ignored, and one exchange is two round trips. (That
// claiming leaves the documents alone is the consumer's test.)
func TestFleetBaselinesExchangeThroughTheClaimsCollection(t *testing.T) {
	t.Parallel()
	var cmds queryplan.Recorder
	claims := mongotest.Database(t, mongotest.Options{Monitor: cmds.Monitor()}).Collection("score_claims")
	clock := clocktest.NewFake(time.Now())
	a := NewFleetBaselines(claims, "a", time.Minute, clock)
	c := NewFleetBaselines(claims, "c", time.Minute, clock)
	ctx := t.Context()

	if got, err := a.Exchange(ctx, 0); err != nil || got != (Fleet{0, 1}) {
		t.Fatalf("empty fleet: %+v, %v; want no baseline, 1 replica (itself)", got, err)
	}
	if got, err := a.Exchange(ctx, 300*time.Millisecond); err != nil || got != (Fleet{300 * time.Millisecond, 1}) {
		t.Fatalf("a alone: %+v, %v; want its own 300ms, 1 replica", got, err)
	}
	cmds.Take()
	got, err := c.Exchange(ctx, 500*time.Millisecond)
	if err != nil || got != (Fleet{300 * time.Millisecond, 2}) {
		t.Fatalf("c: %+v, %v; want the lowest, a's 300ms, 2 replicas", got, err)
	}
	if n := names(cmds.Take()); !maps.Equal(n, map[string]int{"update": 1, "find": 1}) {
		t.Errorf("one exchange sent %v, want one update and one find", n)
	}
	// A third replica, not yet measured: counted, and told the bar.
	d := NewFleetBaselines(claims, "d", time.Minute, clock)
	if got, err := d.Exchange(ctx, 0); err != nil || got != (Fleet{300 * time.Millisecond, 3}) {
		t.Fatalf("d: %+v, %v; want a's 300ms, 3 replicas (itself included)", got, err)
	}
	if _, err := d.Exchange(ctx, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// a and d go away; their figures go stale while c keeps publishing.
	clock.Advance(2 * time.Minute)
	if got, err := c.Exchange(ctx, 500*time.Millisecond); err != nil || got != (Fleet{500 * time.Millisecond, 1}) {
		t.Fatalf("after a and d left: %+v, %v; want c's own 500ms, 1 replica", got, err)
	}
}
