// Package serverclock estimates a MongoDB server's clock from this process.
//
// Replicas that decide "is this lease expired?" or "is this write newer?" with their own clocks
// disagree as much as their clocks do: one ten minutes fast sees every other replica's lease as
// expired and stamps its writes ten minutes ahead. Instead of a round trip per decision, the
// offset to the server's clock is sampled now and then (hello's localTime, corrected by half the
// round trip, keeping the sample with the shortest round trip, as NTP does) and applied to the
// local monotonic clock. The error is at most half the best round trip plus the drift between
// samples: milliseconds.
package serverclock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// Clock is the server's time as seen from here. The zero offset (before the
// first successful sample) is the local clock. Safe for concurrent use.
type Clock struct {
	db    *mongo.Database
	local clock.Clock

	mu      sync.Mutex
	offset  time.Duration // server − local
	bestRTT time.Duration // round trip of the sample the offset came from; 0 = none yet
	sampled time.Time     // local time of that sample
}

// New returns a clock for the server behind db. local is the clock to
// correct, and the one Run waits on (nil: the wall clock).
func New(db *mongo.Database, local clock.Clock) *Clock { return &Clock{db: db, local: clock.Or(local)} }

func (c *Clock) Now() time.Time { return c.local.Now().Add(c.Offset()) }

// Offset is the current estimate of server − local.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// sampleMaxAge is how long a sample with a short round trip is preferred to a fresher one: long
// enough to ride out a slow minute, short enough that clock drift (ppm) stays far below 1 ms.
const sampleMaxAge = 10 * time.Minute

// Sync takes one sample, adopts it when its round trip is the shortest seen
// within sampleMaxAge, and returns its offset.
func (c *Clock) Sync(ctx context.Context) (time.Duration, error) {
	sent := c.local.Now()
	var reply struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := c.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&reply); err != nil {
		return 0, fmt.Errorf("reading the server's clock (hello): %w", err)
	}
	received := c.local.Now()
	if reply.LocalTime.IsZero() {
		return 0, fmt.Errorf("reading the server's clock: hello has no localTime")
	}
	rtt := received.Sub(sent)
	// The server read its clock somewhere in the round trip: assume the
	// middle. BSON dates hold milliseconds, hence the half-millisecond.
	offset := reply.LocalTime.Add(500 * time.Microsecond).Sub(sent.Add(rtt / 2))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bestRTT == 0 || rtt <= c.bestRTT || received.Sub(c.sampled) > sampleMaxAge {
		c.offset, c.bestRTT, c.sampled = offset, max(rtt, time.Nanosecond), received
	}
	return offset, nil
}

// Run samples every interval until ctx ends, handing errors to onErr (not nil); the last good offset stays.
func (c *Clock) Run(ctx context.Context, interval time.Duration, onErr func(error)) {
	clock.Every(ctx, c.local, interval, func(ctx context.Context) {
		if _, err := c.Sync(ctx); err != nil && ctx.Err() == nil {
			onErr(err)
		}
	})
}
