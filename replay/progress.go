package replay

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/planner"
)

// Meter is what one progress line shows. Only Label and Done are required.
type Meter struct {
	Label string
	Unit  string        // what Done counts, e.g. "entries"
	Done  func() int64  // work done so far
	Total func() int64  // expected total (an estimate is fine); nil or 0: unknown, no bar or ETA
	Bytes func() int64  // bytes moved so far; nil: not shown
	Extra func() string // appended to the line; nil: nothing
}

// Progress redraws a bar in place on a terminal, about five times a second,
// and prints a plain line every five seconds otherwise (a log file or CI),
// where carriage returns would make a mess.
type Progress struct {
	w      io.Writer
	m      Meter
	tty    bool
	start  time.Time
	once   sync.Once
	cancel context.CancelFunc // ends the redraw loop
	done   sync.WaitGroup
	recent []progressPoint // the last recentWindow of (time, done), for the rate and ETA
}

type progressPoint struct {
	at   time.Time
	done int64
}

// recentWindow is how far back the rate looks: a drain's pace changes as
// the backlog's shape does, and an ETA from the whole run's average would
// lag behind.
const recentWindow = 30 * time.Second

// StartProgress shows m on w (nil: nothing) until Stop.
func StartProgress(w io.Writer, m Meter) *Progress {
	p := &Progress{w: w, m: m, start: time.Now()}
	if w == nil {
		return p
	}
	every := 5 * time.Second
	if f, ok := w.(*os.File); ok {
		st, err := f.Stat()
		p.tty = err == nil && st.Mode()&os.ModeCharDevice != 0
	}
	if p.tty {
		every = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.done.Go(func() { clock.Every(ctx, clock.Real{}, every, func(context.Context) { p.draw(false) }) })
	return p
}

// Stop prints the final line; calling it again does nothing.
func (p *Progress) Stop() {
	p.once.Do(func() {
		if p.w != nil {
			p.cancel()
			p.done.Wait()
			p.draw(true)
		}
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
// rate (per second), ETA at that rate, elapsed time and the extra text.
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
		if s := m.Extra(); s != "" {
			b.WriteString("  " + s)
		}
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
