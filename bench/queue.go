package bench

import (
	"context"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/queuestate"
)

// How the bench reads the queue while a consumer drains it: its depth and
// the age of its oldest entry, on the direct connection.

// sample is the queue as the bench saw it at one moment of a run.
type sample struct {
	T         float64 `json:"t"`          // seconds since the consumer started
	Depth     int64   `json:"depth"`      // entries in the queue
	OldestAge float64 `json:"oldest_age"` // seconds; 0 when empty
	Progress  float64 `json:"progress"`   // entries done (see running.progress)
	Arrived   int64   `json:"arrived"`    // entries the producer has enqueued
}

// sample reads the queue's depth and oldest age on the direct connection
// (no proxy, not counted against the consumer).
func (b *Bench) sample(ctx context.Context, queue *mongo.Collection, elapsed time.Duration, c running, arrived *atomic.Int64) sample {
	s := sample{T: elapsed.Seconds(), Progress: c.progress(), Arrived: arrived.Load()}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A failed read leaves the figure at 0 for this sample: the row stays
	// and the timeline stays regular.
	if st, err := queuestate.New(queue, nil).Read(sctx); err == nil {
		s.Depth = st.Depth
		s.OldestAge = st.OldestAge(time.Now()).Seconds()
	}
	return s
}
