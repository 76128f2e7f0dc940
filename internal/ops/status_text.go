package ops

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/scorerefresh/scorerefresh/consumer"
)

// WriteStatus prints s for a human.
func WriteStatus(w io.Writer, s *Status) error {
	p := &printer{w: w}
	p.f("scorerefresh status: database %s, %s (server clock)\n\n", s.Database, stamp(s.At))
	writeQueue(p, s)
	writeTopUsers(p, s)
	writeLeases(p, s)
	writeDeadLetters(p, s)
	writeRates(p, s.Rates)
	return p.err
}

func writeQueue(p *printer, s *Status) {
	q := s.Queue
	p.f("queue %s\n", q.Collection)
	p.f("  depth                %s\n", count(q.Depth, q.DepthExact))
	if q.OldestCreatedAt == nil {
		p.f("  oldest entry         none (empty)\n")
	} else {
		p.f("  oldest entry         %s (age %s)\n", stamp(*q.OldestCreatedAt), (time.Duration(q.OldestAgeSeconds) * time.Second).Round(time.Second))
	}
	p.f("  pending, last minute %s (still waiting, createdAt within the last minute)\n\n", count(q.PendingLastMinute, q.PendingLastMinuteExact))
}

func writeTopUsers(p *printer, s *Status) {
	t := s.TopUsers
	scope := "the whole queue"
	if !t.WholeQueue {
		scope = "a window: the queue holds more; --window reads more"
	}
	p.f("top users among the oldest %d entries (%s)\n", t.Read, scope)
	tw := p.table()
	fmt.Fprintf(tw, "  USER\tENTRIES\tOLDEST\tSTATE\n")
	for _, u := range t.Users {
		state := u.State
		switch {
		case u.State == consumer.LeaseHeld:
			state = fmt.Sprintf("held by %s until %s", u.Owner, stamp(*u.Until))
		case u.Until != nil:
			state = fmt.Sprintf("backing off until %s", stamp(*u.Until))
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", clip(u.Username, 40), u.Entries, stamp(u.OldestCreatedAt), state)
	}
	p.flush(tw)
	if t.Malformed > 0 {
		p.f("  %d entries in the window have no usable username (the consumer dead-letters them as malformed)\n", t.Malformed)
	}
	p.f("\n")
}

func writeLeases(p *printer, s *Status) {
	l := s.Leases
	more := ""
	if l.Truncated {
		more = " (at least: only the first --lease-limit were read)"
	}
	p.f("leases held: %d%s\n", l.Held, more)
	if len(l.Owners) > 0 {
		tw := p.table()
		fmt.Fprintf(tw, "  OWNER (REPLICA)\tHELD\tOLDEST CLAIM\tNEXT EXPIRY\n")
		for _, o := range l.Owners {
			oldest := "-"
			if o.OldestClaimedAt != nil {
				oldest = stamp(*o.OldestClaimedAt)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", o.Owner, o.Held, oldest, stamp(o.NextExpiry))
		}
		p.flush(tw)
	}
	b := s.Backoffs
	p.f("users backing off: %s\n", count(b.Count, b.CountExact))
	if len(b.Users) > 0 {
		tw := p.table()
		fmt.Fprintf(tw, "  USER\tNEXT ATTEMPT\tATTEMPTS\tLAST ERROR\n")
		for _, u := range b.Users {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", clip(u.Username, 40), stamp(u.NextAttemptAt), u.Attempts, clip(u.LastError, 80))
		}
		p.flush(tw)
	}
	p.f("\n")
}

func writeDeadLetters(p *printer, s *Status) {
	d := s.DeadLetters
	p.f("dead letters %s: %s", d.Collection, count(d.Count, d.CountExact))
	if d.OldestAt != nil {
		p.f(", oldest %s, newest %s", stamp(*d.OldestAt), stamp(*d.NewestAt))
	}
	p.f("\n")
	if len(d.ByReason) > 0 {
		scope := "all of them"
		if !d.WholeSet {
			scope = fmt.Sprintf("the newest %d only", d.Read)
		}
		p.f("  by reason (%s):\n", scope)
		tw := p.table()
		fmt.Fprintf(tw, "  REASON\tCOUNT\tOLDEST\tNEWEST\n")
		for _, r := range d.ByReason {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", r.Reason, r.Count, stamp(r.OldestAt), stamp(r.NewestAt))
		}
		p.flush(tw)
	}
	p.f("\n")
}

func writeRates(p *printer, r *Rates) {
	if r == nil {
		p.f("rates: not sampled (--sample 0)\n")
		return
	}
	p.f("rates over %.1fs (lower bounds: entries enqueued and acknowledged between the two samples are in neither):\n", r.SampleSeconds)
	p.f("  arrivals       %7.1f/s (%d)\n", r.ArrivalsPerSecond, r.Arrived)
	p.f("  acknowledged   %7.1f/s (%d, removals %d minus dead letters)\n", r.AckedPerSecond, r.Acked, r.Removed)
	p.f("  dead-lettered  %7.1f/s (%d)\n", r.DeadLetteredPerSecond, r.DeadLettered)
	if !r.Exact {
		p.f("  (from estimated counts: the collections are past --exact-limit)\n")
	}
}

// printer keeps the first write error, so the callers stay readable.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *printer) table() *tabwriter.Writer { return tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0) }

func (p *printer) flush(tw *tabwriter.Writer) {
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

func count(n int64, exact bool) string {
	if exact {
		return fmt.Sprintf("%d", n)
	}
	return fmt.Sprintf("~%d (estimated)", n)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// clip shortens s for a table cell and keeps it on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
