package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/queuestate"
)

// Runner is the consumer (app.Service): Run drains until ctx ends, then shuts down gracefully.
type Runner interface {
	Run(ctx context.Context) error
}

// Why a drain stopped.
const (
	StopDrained     = "drained"     // the queue was empty and nothing more was to arrive
	StopUntil       = "until"       // --until elapsed first
	StopInterrupted = "interrupted" // the operator interrupted the replay
	StopConsumer    = "consumer stopped"
	StopLoadFailed  = "load failed"
)

// DrainConfig says what to drain and how to watch it.
type DrainConfig struct {
	Queue    *mongo.Collection
	Consumer Runner
	Metrics  *metrics.Consumer // the consumer's own counters, read in-process
	Interval time.Duration     // timeline resolution; default 1s
	Until    time.Duration     // stop after this long even if entries remain; 0: until empty
	Arrived  func() int64      // paced: the entries inserted so far
	LoadDone <-chan error      // paced: the result of the queue's load, which runs alongside
	Expected int64             // entries the drain should see through, for the progress bar
	Progress io.Writer         // progress line; nil: none
}

// DrainResult is what a drain measured.
type DrainResult struct {
	Start, End time.Time
	Timeline   []planner.Sample
	Final      planner.Sample // the last sample, measured
	Reason     string         // one of the Stop constants
	Err        error          // why the consumer or the load stopped, for those reasons
}

// Drain runs the consumer, sampling the timeline, until the queue is empty and
// nothing more is to arrive, or cfg.Until or ctx ends; then stops it and samples.
func Drain(ctx context.Context, cfg DrainConfig) (*DrainResult, error) {
	res := &DrainResult{Start: time.Now()}
	s := newSampler(cfg.Queue, cfg.Metrics, cfg.Arrived, res.Start)
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- cfg.Consumer.Run(runCtx) }()

	var last atomic.Pointer[planner.Sample]
	last.Store(&planner.Sample{})
	defer StartProgress(cfg.Progress, Meter{Label: "draining", Unit: "entries",
		Done:  func() int64 { l := last.Load(); return int64(l.Acked + l.DeadLetters) },
		Total: func() int64 { return cfg.Expected },
		Extra: func() string {
			s := last.Load()
			if s.T == 0 {
				return "starting the consumer"
			}
			out := fmt.Sprintf("%.0f acked/s  %s refreshes  depth %s", s.AckedPerSec, planner.Thousands(int64(s.Refreshes)), planner.Thousands(s.Depth))
			if s.Measured {
				out += "  oldest " + (time.Duration(s.OldestAge) * time.Second).String()
			}
			if s.Arrived > 0 {
				out += "  arrived " + planner.Thousands(s.Arrived)
			}
			return out
		},
	})()

	consumerDone := watch(ctx, cfg, s, done, res, &last)
	res.End = cmp.Or(res.End, time.Now())
	stop()
	if !consumerDone {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			res.Err = errors.Join(res.Err, fmt.Errorf("consumer shutdown: %w", err))
		}
	}
	// The final figures are taken after the consumer finished its in-flight
	// work, with a fresh context: an interrupt must still get its report.
	finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	final, err := s.runOnce(finalCtx, time.Now(), true)
	res.Final = final
	if err != nil {
		return res, fmt.Errorf("measuring the queue after the drain: %w", err)
	}
	return res, nil
}

// watch samples into res until the drain stops, records why, and says whether the consumer returned.
func watch(ctx context.Context, cfg DrainConfig, s *sampler, done <-chan error, res *DrainResult, last *atomic.Pointer[planner.Sample]) (consumerDone bool) {
	t := time.NewTicker(cmp.Or(cfg.Interval, time.Second))
	defer t.Stop()
	var deadline <-chan time.Time
	if cfg.Until > 0 {
		deadline = time.After(cfg.Until)
	}
	loadDone, loading := cfg.LoadDone, cfg.LoadDone != nil
	for {
		select {
		case <-ctx.Done():
			res.Reason = StopInterrupted
			return false
		case <-deadline:
			res.Reason = StopUntil
			return false
		case err := <-done:
			res.Reason, res.Err = StopConsumer, cmp.Or(err, errors.New("the consumer returned with the queue not drained"))
			return true
		case err := <-loadDone:
			loading, loadDone = false, nil
			if err != nil {
				res.Reason, res.Err = StopLoadFailed, err
				return false
			}
		case now := <-t.C:
			// A failed query still yields the counters: the row stays, unmeasured.
			smp, _ := s.runOnce(ctx, now, false)
			res.Timeline = append(res.Timeline, smp)
			last.Store(&smp)
			if smp.Measured && smp.Depth == 0 && !loading {
				res.Reason, res.End = StopDrained, now
				return false
			}
		}
	}
}

// sampler takes timeline samples: the consumer's counters, and depth and
// oldest age from a queuestate read. That read costs a millisecond on
// MongoDB but half a second at 20,000 entries on FerretDB, which scans, so
// it waits five times its cost; samples in between derive the depth from the
// counters, and a derived zero is checked.
type sampler struct {
	queue    *queuestate.Reader
	m        *metrics.Consumer
	arrived  func() int64
	start    time.Time
	base     planner.Sample // the counters when the drain began
	prev     planner.Sample
	measured planner.Sample // the last measured sample
	nextScan time.Time
}

func counters(m *metrics.Consumer) planner.Sample {
	return planner.Sample{
		Acked:     metrics.Read(m.EntriesAcked),
		Refreshes: metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeOK)),
		DeadLetters: metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)) +
			metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts)),
	}
}

func newSampler(queue *mongo.Collection, m *metrics.Consumer, arrived func() int64, start time.Time) *sampler {
	if arrived == nil {
		arrived = func() int64 { return 0 }
	}
	return &sampler{queue: queuestate.New(queue, nil), m: m, arrived: arrived, start: start, base: counters(m)}
}

// runOnce takes the sample for now; force queries the queue whatever the budget says.
func (s *sampler) runOnce(ctx context.Context, now time.Time, force bool) (planner.Sample, error) {
	c := counters(s.m)
	smp := planner.Sample{T: now.Sub(s.start).Seconds(), OldestAge: -1, Arrived: s.arrived(),
		Acked: c.Acked - s.base.Acked, Refreshes: c.Refreshes - s.base.Refreshes, DeadLetters: c.DeadLetters - s.base.DeadLetters}
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

// Meter is what one progress line shows. Only Label and Done are required.
type Meter struct {
	Label string
	Unit  string        // what Done counts, e.g. "entries"
	Done  func() int64  // work done so far
	Total func() int64  // expected total (an estimate is fine); nil or 0: unknown, no bar or ETA
	Bytes func() int64  // bytes moved so far; nil: not shown
	Extra func() string // appended to the line (never empty); nil: nothing
}

// Progress redraws a bar in place on a terminal five times a second, else
// (a log file, CI: no carriage returns) prints a line every five seconds.
type Progress struct {
	w      io.Writer
	m      Meter
	tty    bool
	start  time.Time
	recent []progressPoint // the last recentWindow of (time, done), for the rate and ETA
}

type progressPoint struct {
	at   time.Time
	done int64
}

// recentWindow is how far back the rate looks: a drain's pace changes with
// the backlog's shape, and the whole run's average would lag behind.
const recentWindow = 30 * time.Second

// StartProgress shows m on w (nil: nothing) until stop, which ends the
// redraw loop and draws the last line, once however often it is called.
func StartProgress(w io.Writer, m Meter) (stop func()) {
	if w == nil {
		return func() {}
	}
	p := &Progress{w: w, m: m, start: time.Now()}
	every := 5 * time.Second
	if f, ok := w.(*os.File); ok {
		st, err := f.Stat()
		p.tty = err == nil && st.Mode()&os.ModeCharDevice != 0
	}
	if p.tty {
		every = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	var loop sync.WaitGroup
	loop.Go(func() { clock.Every(ctx, clock.Real{}, every, func(context.Context) { p.draw(false) }) })
	return sync.OnceFunc(func() {
		cancel()
		loop.Wait()
		p.draw(true)
	})
}

func (p *Progress) draw(final bool) {
	now := time.Now()
	p.recent = append(p.recent, progressPoint{now, p.m.Done()})
	for len(p.recent) > 2 && now.Sub(p.recent[1].at) >= recentWindow {
		p.recent = p.recent[1:]
	}
	elapsed := now.Sub(p.start)
	first, last := p.recent[0], p.recent[len(p.recent)-1]
	rate := float64(last.done) / elapsed.Seconds()
	if !final && last.at.Sub(first.at) >= 5*time.Second {
		rate = float64(last.done-first.done) / last.at.Sub(first.at).Seconds()
	}
	line := formatProgress(p.m, elapsed, rate, p.tty)
	if p.tty {
		line = "\r" + line + "\x1b[K"
	}
	if final || !p.tty {
		line += "\n"
	}
	fmt.Fprint(p.w, line)
}

// formatProgress renders one line: label, bar, percentage, counts, bytes,
// rate per second, ETA at that rate, elapsed time and m.Extra.
func formatProgress(m Meter, elapsed time.Duration, rate float64, bar bool) string {
	done, total := m.Done(), int64(0)
	if m.Total != nil {
		total = m.Total()
	}
	var b strings.Builder
	b.WriteString(m.Label)
	if total > 0 {
		frac := min(float64(done)/float64(total), 1)
		if bar {
			n := int(frac * 24)
			b.WriteString(" [" + strings.Repeat("=", n) + strings.Repeat(" ", 24-n) + "]")
		}
		fmt.Fprintf(&b, " %3.0f%% %s/%s", frac*100, planner.Thousands(done), planner.Thousands(total))
	} else {
		fmt.Fprintf(&b, " %s", planner.Thousands(done))
	}
	if m.Unit != "" {
		b.WriteString(" " + m.Unit)
	}
	if m.Bytes != nil {
		b.WriteString("  " + byteSize(m.Bytes()))
	}
	if elapsed > 0 {
		fmt.Fprintf(&b, "  %s/s", planner.Thousands(int64(rate+0.5)))
		if total > done && rate > 0 {
			eta := time.Duration(float64(total-done) / rate * float64(time.Second))
			b.WriteString("  ETA " + eta.Round(time.Second).String())
		}
	}
	fmt.Fprintf(&b, "  %s", elapsed.Round(100*time.Millisecond))
	if m.Extra != nil {
		b.WriteString("  " + m.Extra())
	}
	return b.String()
}

func byteSize(n int64) string {
	for i, unit := range []string{"GiB", "MiB", "KiB"} {
		if d := int64(1) << (30 - 10*i); n >= d {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(d), unit)
		}
	}
	return fmt.Sprintf("%d B", n)
}
