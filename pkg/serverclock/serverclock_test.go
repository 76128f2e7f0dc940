package serverclock_test

import (
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/serverclock"
)

// TestSyncCorrectsASkewedLocalClock runs against a real server whose clock is
// this host's: a local clock ten minutes fast or slow must be corrected to
// within a second (the test server is on loopback, so the round trip is
// milliseconds; the bound only has to tell "corrected" from "ten minutes").
func TestSyncCorrectsASkewedLocalClock(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		c := serverclock.New(db, skewed{skew: skew})
		if got := time.Until(c.Now()); got < skew-time.Second || got > skew+time.Second {
			t.Fatalf("before any sample the clock should be the local one: off by %v, want %v", got, skew)
		}
		off, err := c.Sync(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d := off + skew; d < -time.Second || d > time.Second {
			t.Errorf("skew %v: offset %v does not cancel it", skew, off)
		}
		if d := time.Until(c.Now()); d < -time.Second || d > time.Second {
			t.Errorf("skew %v: corrected clock is %v off the server's", skew, d)
		}
	}
}

// skewed is the wall clock off by skew.
type skewed struct {
	clock.Real
	skew time.Duration
}

func (s skewed) Now() time.Time { return time.Now().Add(s.skew) }
