package planner

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText prints the plan for a person: the inputs, a table by replica
// count, the target, and the stability verdict.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	p.writeInputs(&b)
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	drain := "drain"
	if p.Arrival.Mode == ArrivalRate {
		drain = "backlog cleared"
	}
	fmt.Fprintf(tw, "replicas\tbound/s\tbinding\t%s\tpeak depth\tpeak oldest age\tpeak wait\trefreshes/s\tsustainable/s\t\n", drain)
	for _, r := range p.Rows {
		d := r.Run.DrainSeconds
		if p.Arrival.Mode == ArrivalRate {
			d = r.Run.ClearSeconds
		}
		done := Seconds(d)
		if d < 0 {
			done = "> " + Seconds(r.Run.EndSeconds)
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t\n", r.Replicas, r.Bounds.Lower, r.Bounds.Binding, done,
			Thousands(r.Run.PeakDepth), Seconds(r.Run.PeakOldestAge), Seconds(r.Run.PeakWait), r.Run.RefreshesPerSecond(), rateText(float64(r.Sustainable)))
	}
	tw.Flush()
	fmt.Fprintf(&b, "(bound: refreshes/s with every slot busy; peak wait: the longest an entry waited since the plan began;\n"+
		" sustainable: the highest arrival rate, with this backlog's mix of users, that keeps the oldest age within %s)\n\n", Seconds(p.TargetAge))
	if p.ReplicasForTarget > 0 {
		fmt.Fprintf(&b, "replicas for an oldest age within %s: %d\n", Seconds(p.TargetAge), p.ReplicasForTarget)
	} else {
		fmt.Fprintf(&b, "replicas for an oldest age within %s: more than %d (%s)\n", Seconds(p.TargetAge), len(p.Rows), p.whyNoTarget())
	}
	if q := p.Sequential; q != nil {
		fmt.Fprintf(&b, "for comparison, a one-at-a-time consumer (%d-entry window, %.0f distinct users in it) would drain %.1f entries/s here",
			SequentialWindow, q.WindowUsers, q.EntriesPerSecond)
		if p.Load > 0 && !q.KeepsUp {
			b.WriteString(": below the load, so it would wedge")
		}
		b.WriteString("\n")
	}
	p.writeStability(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (p *Plan) writeInputs(b *strings.Builder) {
	fmt.Fprintf(b, "backlog: %s entries of %s users over %s (%.1f entries per user; %.0f distinct users per %d-entry window)\n",
		Thousands(p.Entries), Thousands(p.Users), Seconds(p.SpanSecs), p.EntriesPerUser, p.WindowUsers, p.Config.ClaimWindow)
	a := p.Arrival
	switch a.Mode {
	case ArrivalMax:
		b.WriteString("arrival: max (the backlog is in the queue at the start; nothing follows)\n")
	case ArrivalOriginal:
		fmt.Fprintf(b, "arrival: original ×%g (%.1f entries/s on average over %s)\n", a.Speed, p.Load, Seconds(p.SpanSecs/a.Speed))
	case ArrivalRate:
		fmt.Fprintf(b, "arrival: the backlog, then %.1f entries/s for %s (%.0f%% of them from users the backlog has not seen)\n",
			a.Rate, Seconds(a.Duration), 100*p.Mix.New)
	}
	s := p.Server
	fmt.Fprintf(b, "round trip: RTT %s + server %s per command", ms(s.RTT), ms(s.Cost))
	if s.Capacity > 0 {
		fmt.Fprintf(b, "; server capacity %.0f commands/s", s.Capacity)
	}
	if s.Slope > 0 {
		fmt.Fprintf(b, "; +%s per command in flight past %d", ms(s.Slope), s.Knee)
	}
	if s.EntryCost > 0 {
		fmt.Fprintf(b, "; %.0fµs per entry an ack deletes", s.EntryCost*1e6)
	}
	if s.ScanCost > 0 {
		fmt.Fprintf(b, "; %.1fµs per queued entry per claim read", s.ScanCost*1e6)
	}
	c := p.Config
	comps := "components"
	if c.Components == 1 {
		comps = "component"
	}
	fmt.Fprintf(b, "\nrefresh: %d %s + 2 = %d round trips", c.Components, comps, p.RoundTrips)
	if c.Batch > 1 {
		fmt.Fprintf(b, " per batch of up to %d users spread over the free slots (%d with every slot busy)", c.Batch, c.SpreadBatch())
	}
	wake := "poll every " + Seconds(c.PollInterval)
	if c.ChangeStreams {
		wake = "change streams"
	}
	fmt.Fprintf(b, "\nconfig: REFRESH_CONCURRENCY %d, MAX_USERS_IN_FLIGHT %d, CLAIM_WINDOW %d, %d replica(s) now; wake-up: %s\n",
		c.Concurrency, c.MaxUsersInFlight, c.ClaimWindow, c.Replicas, wake)
}

func (p *Plan) whyNoTarget() string {
	if n := len(p.Rows); n > 1 && p.Rows[n-1].Bounds.Lower < 1.05*p.Rows[n-2].Bounds.Lower {
		return "the last replica added less than 5%: the server, not the fleet, is the limit"
	}
	return "try a larger --max-replicas"
}

func (p *Plan) writeStability(b *strings.Builder) {
	sp := p.Stability
	if sp == nil {
		return
	}
	fmt.Fprintf(b, "\nstability at %d replica(s)", sp.Replicas)
	if p.Load > 0 {
		fmt.Fprintf(b, ", load %.1f entries/s", p.Load)
	}
	fmt.Fprintf(b, ":\n  %s\n", sp.Assessment.Describe())
	if t := p.Transient; t.Active() {
		var what []string
		if t.RTTFactor > 1 && t.For > 0 {
			what = append(what, fmt.Sprintf("round trips ×%g for %s", t.RTTFactor, Seconds(t.For)))
		}
		if t.Burst > 0 {
			what = append(what, fmt.Sprintf("a burst of %s entries of new users", Thousands(t.Burst)))
		}
		fmt.Fprintf(b, "  transient (%s at %s): %s\n", strings.Join(what, " and "), Seconds(t.At), sp.Verdict)
	}
}

// Thousands formats n with comma separators: 20,000 reads faster than
// 20000. The replay's reports print their counts with it too.
func Thousands[N ~int | ~int64](n N) string {
	s := strconv.FormatInt(int64(n), 10)
	digits, sign := strings.CutPrefix(s, "-")
	for i := len(digits) - 3; i > 0; i -= 3 {
		digits = digits[:i] + "," + digits[i:]
	}
	if sign {
		return "-" + digits
	}
	return digits
}

func rateText(r float64) string {
	if math.IsInf(r, 1) {
		return "any"
	}
	return fmt.Sprintf("%.1f", r)
}

func ms(s float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", s*1000), "0"), ".") + "ms"
}
