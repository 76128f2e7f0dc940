package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scorerefresh/scorerefresh/metrics"
)

func TestRoomWakeWaitsForAnEighthOfTheRoom(t *testing.T) {
	t.Parallel()
	c := New(Config{MaxUsersInFlight: 64, BatchSize: 16}, Collections{}, Deps{Limiter: NewFixedLimiter(16), Metrics: metrics.NewConsumer(prometheus.NewRegistry())})
	c.backlog = true
	for held, want := range map[int]bool{63: false, 57: false, 56: true, 10: true} {
		c.held = map[string]lease{}
		for i := range held {
			c.held[fmt.Sprint(i)] = lease{}
		}
		select { // drain a wake-up left by the previous case
		case <-c.wake:
		default:
		}
		c.roomWake()
		if got := len(c.wake) == 1; got != want {
			t.Errorf("%d of 64 held: woke %v, want %v (room floor %d)", held, got, want, c.roomFloor())
		}
	}
}

func TestRoomFloorIsOneForSmallConsumers(t *testing.T) {
	t.Parallel()
	c := New(Config{MaxUsersInFlight: 64, BatchSize: 1}, Collections{}, Deps{Limiter: NewFixedLimiter(1), Metrics: metrics.NewConsumer(prometheus.NewRegistry())})
	if got := c.roomFloor(); got != 1 {
		t.Errorf("room floor %d with 4 users in flight at most, want 1", got)
	}
}

func TestContendedRounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		picked, won int
		want        bool
	}{
		{0, 0, false}, {3, 0, false}, // too few picks to tell
		{4, 1, true}, {64, 31, true},
		{4, 2, false}, {64, 32, false}, {64, 64, false},
	} {
		r := claimResult{picked: tc.picked, won: tc.won}
		if got := r.contended(); got != tc.want {
			t.Errorf("won %d of %d picks: contended %v, want %v", tc.won, tc.picked, got, tc.want)
		}
	}
}

func TestContentionDelayDoublesUpToThePollInterval(t *testing.T) {
	t.Parallel()
	c := &Consumer{cfg: Config{PollInterval: time.Second}, claimRnd: rand.New(rand.NewPCG(1, 2))}
	for k, ceiling := range map[int]time.Duration{1: 50 * time.Millisecond, 2: 100 * time.Millisecond, 4: 400 * time.Millisecond, 5: 800 * time.Millisecond, 6: time.Second, 40: time.Second} {
		c.contention = k
		var longest time.Duration
		for range 2000 {
			d := c.contentionDelay()
			if d < 0 || d > ceiling {
				t.Fatalf("contention %d: delay %s outside [0, %s]", k, d, ceiling)
			}
			longest = max(longest, d)
		}
		if longest < ceiling*9/10 {
			t.Errorf("contention %d: longest of 2000 delays %s, want close to %s (spread over the whole range)", k, longest, ceiling)
		}
	}
}

func TestLeasesOutlastAStretchedRound(t *testing.T) {
	t.Parallel()
	c := &claimer{lease: time.Minute}
	if got := c.leaseFor(t.Context()); got != time.Minute {
		t.Errorf("no deadline: lease %s, want LEASE_DURATION", got)
	}
	short, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if got := c.leaseFor(short); got != time.Minute {
		t.Errorf("30s round: lease %s, want LEASE_DURATION", got)
	}
	long, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if got := c.leaseFor(long); got < 4*time.Minute {
		t.Errorf("4m round: lease %s, want it to outlast the round", got)
	}
}
