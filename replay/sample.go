package replay

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/queuestate"
)

// sampler takes timeline samples. Counters come from the consumer's metrics
// in-process; depth and oldest age are a queuestate read (three queries of
// bounded cost). On MongoDB they cost a millisecond; on a server that scans
// whole collections (FerretDB: half a second each at 20,000 entries) they
// would compete with
// the drain they measure, so a query that took more than a fifth of the
// interval is repeated only after five times its cost, and the samples in
// between derive the depth from the counters. A derived depth of zero is
// always checked by a query: only a measured zero ends a drain.
type sampler struct {
	queue    *queuestate.Reader
	m        *metrics.Consumer
	arrived  func() int64
	start    time.Time
	base     counters
	prev     planner.Sample
	measured planner.Sample // the last measured sample
	nextScan time.Time
}

type counters struct{ acked, refreshes, deadLetters float64 }

func readCounters(m *metrics.Consumer) counters {
	return counters{
		acked:     metrics.Read(m.EntriesAcked),
		refreshes: metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeOK)),
		deadLetters: metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)) +
			metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts)),
	}
}

func newSampler(queue *mongo.Collection, m *metrics.Consumer, arrived func() int64, start time.Time) *sampler {
	if arrived == nil {
		arrived = func() int64 { return 0 }
	}
	return &sampler{queue: queuestate.New(queue, nil), m: m, arrived: arrived, start: start, base: readCounters(m)}
}

// runOnce takes the sample for now. force measures the queue even when the
// budget says to wait (the drain's final figures).
func (s *sampler) runOnce(ctx context.Context, now time.Time, force bool) (planner.Sample, error) {
	c := readCounters(s.m)
	smp := planner.Sample{
		T:           now.Sub(s.start).Seconds(),
		OldestAge:   -1,
		Acked:       c.acked - s.base.acked,
		Refreshes:   c.refreshes - s.base.refreshes,
		DeadLetters: c.deadLetters - s.base.deadLetters,
		Arrived:     s.arrived(),
	}
	if dt := smp.T - s.prev.T; dt > 0 {
		smp.AckedPerSec = (smp.Acked - s.prev.Acked) / dt
	}
	m := s.measured
	smp.Depth = max(0, m.Depth+int(smp.Arrived-m.Arrived)-int(smp.Acked-m.Acked)-int(smp.DeadLetters-m.DeadLetters))
	s.prev = smp
	if !force && now.Before(s.nextScan) && smp.Depth > 0 {
		return smp, nil
	}
	began := time.Now()
	st, err := s.queue.Read(ctx)
	if err != nil {
		return smp, err
	}
	if cost := time.Since(began); cost > 0 {
		s.nextScan = now.Add(5 * cost)
	}
	smp.Depth, smp.OldestAge, smp.Measured = int(st.Depth), st.OldestAge(now).Seconds(), true
	s.prev, s.measured = smp, smp
	return smp, nil
}
