package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/queuestate"
)

// progress prints one line a second while the queue drains.
type progress struct {
	svc        *app.Service
	out        io.Writer
	start, end time.Time
}

// untilDrained reports once a second until the queue is empty (true), ctx
// ends (false) or the service stops on its own (its error).
func (p *progress) untilDrained(ctx context.Context, done <-chan error) (bool, error) {
	t, queue := time.NewTicker(time.Second), queuestate.New(p.svc.Colls.Queue, nil)
	defer t.Stop()
	lastAcked, lastUsers, last := 0.0, 0.0, p.start
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case err := <-done:
			return false, errors.Join(errors.New("the service stopped before the queue drained"), err)
		case now := <-t.C:
			st, err := queue.Read(ctx)
			if err != nil {
				fmt.Fprintf(p.out, "%6.1fs  (queue unreadable: %v)\n", now.Sub(p.start).Seconds(), err)
				continue
			}
			acked := metrics.Read(p.svc.Metrics.EntriesAcked)
			users := metrics.Read(p.svc.Metrics.Refreshes.WithLabelValues(metrics.OutcomeOK))
			dt := now.Sub(last).Seconds()
			fmt.Fprintf(p.out, "%6.1fs  depth %6d  oldest %7.1fs  %8.1f entries/s  %6.1f users/s  in flight %3.0f\n",
				now.Sub(p.start).Seconds(), st.Depth, st.OldestAge(now).Seconds(), (acked-lastAcked)/dt, (users-lastUsers)/dt,
				metrics.Read(p.svc.Metrics.UsersInFlight))
			lastAcked, lastUsers, last = acked, users, now
			if st.Depth == 0 {
				p.end = now
				return true, nil
			}
		}
	}
}

func (p *progress) summary(entries, users int) {
	m := p.svc.Metrics
	secs := p.end.Sub(p.start).Seconds()
	acked := metrics.Read(m.EntriesAcked)
	refreshes := metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeOK))
	fmt.Fprintf(p.out, "\ndrained %d entries of %d users in %.1fs: %.0f entries/s, %.1f users/s\n",
		entries, users, secs, acked/secs, refreshes/secs)
	fmt.Fprintf(p.out, "refreshes %.0f ok, %.0f failed; coalescing factor %.1f entries per refresh; OCC conflicts %.0f; dead letters %.0f\n",
		refreshes, metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeError)), acked/math.Max(refreshes, 1),
		metrics.Read(m.OCCConflicts),
		metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed))+metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts))+
			metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonTooLarge)))
	p.commands(acked)
	fmt.Fprintln(p.out, "(the progress line's counters are approximate: a line shows the entries acknowledged in that second, in flushes of up to 100 users)")
}

// commands prints the MongoDB round trips by command, per acknowledged entry.
func (p *progress) commands(acked float64) {
	mfs, err := p.svc.Registry.Gather()
	if err != nil {
		return
	}
	fmt.Fprint(p.out, "MongoDB commands (count, total server+network time):")
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "scorerefresh_mongo_command_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			total += float64(h.GetSampleCount())
			fmt.Fprintf(p.out, " %s %d/%.1fs", m.GetLabel()[0].GetValue(), h.GetSampleCount(), h.GetSampleSum())
		}
	}
	fmt.Fprintf(p.out, "; %.2f per entry\n", total/math.Max(acked, 1))
}
