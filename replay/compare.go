package replay

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/scorerefresh/scorerefresh/planner"
)

// metric is one figure of a report, with how to print it and which way is
// better (+1 higher, -1 lower, 0 neither).
type metric struct {
	name   string
	value  func(*Report) float64
	format func(float64) string
	better int
}

func count(v float64) string   { return planner.Thousands(int64(math.Round(v))) }
func rate(v float64) string    { return fmt.Sprintf("%.1f", v) }
func seconds(v float64) string { return fmt.Sprintf("%.1fs", v) }

var reportMetrics = []metric{
	{"entries", func(r *Report) float64 { return float64(r.Entries) }, count, 0},
	{"distinct users", func(r *Report) float64 { return float64(r.DistinctUsers) }, count, 0},
	{"coalescing factor", func(r *Report) float64 { return r.CoalescingFactor }, rate, 0},
	{"duration", func(r *Report) float64 { return r.DurationSeconds }, seconds, -1},
	{"entries/s", func(r *Report) float64 { return r.EntriesPerSecond }, rate, +1},
	{"users/s", func(r *Report) float64 { return r.UsersPerSecond }, rate, +1},
	{"max depth", func(r *Report) float64 { return float64(r.MaxDepth) }, count, -1},
	{"max oldest age", func(r *Report) float64 { return r.MaxOldestAgeSeconds }, seconds, -1},
	{"dead letters", func(r *Report) float64 { return r.DeadLetters }, count, -1},
	{"left in the queue", func(r *Report) float64 { return float64(r.FinalDepth) }, count, -1},
}

// settings are the configuration lines of a comparison.
var settings = []struct {
	name  string
	value func(*Report) string
}{
	{"REFRESH_CONCURRENCY", func(r *Report) string { return fmt.Sprint(r.Settings.RefreshConcurrency) }},
	{"MAX_USERS_IN_FLIGHT", func(r *Report) string { return fmt.Sprint(r.Settings.MaxUsersInFlight) }},
	{"CLAIM_WINDOW", func(r *Report) string { return fmt.Sprint(r.Settings.ClaimWindow) }},
	{"ADAPTIVE_CONCURRENCY", func(r *Report) string { return fmt.Sprint(r.Settings.AdaptiveConcurrency) }},
	{"rules", func(r *Report) string { return fmt.Sprintf("%s (%d)", r.Settings.Rules, r.Settings.Components) }},
	{"arrival", func(r *Report) string { return fmt.Sprintf("%s ×%g", r.Arrival, r.Speed) }},
	{"server", func(r *Report) string { return r.Settings.Server }},
	{"version", func(r *Report) string { return r.Settings.Version }},
	{"drained", func(r *Report) string { return fmt.Sprint(r.Drained) }},
}

// Compare prints two reports side by side, with the change from a to b and
// whether it is for the better.
func Compare(w io.Writer, a, b *Report, nameA, nameB string) error {
	nameWidth := 0
	for _, m := range reportMetrics {
		nameWidth = max(nameWidth, utf8.RuneCountInString(m.name))
	}
	for _, s := range settings {
		nameWidth = max(nameWidth, utf8.RuneCountInString(s.name))
	}
	// Names to the left, figures to the right, as a person reads a table;
	// one block of columns for both parts, so the separator has cells.
	tw := tabwriter.NewWriter(w, 0, 0, 0, ' ', tabwriter.AlignRight)
	row := func(name, va, vb, note string) {
		if note != "" {
			note = "  " + note
		}
		fmt.Fprintf(tw, "%-*s\t  %s\t  %s\t%s\n", nameWidth, name, va, vb, note)
	}
	row("", nameA, nameB, "change")
	for _, m := range reportMetrics {
		va, vb := m.value(a), m.value(b)
		row(m.name, m.format(va), m.format(vb), change(va, vb, m.better))
	}
	fmt.Fprint(tw, "\t\t\t\n")
	for _, s := range settings {
		va, vb := s.value(a), s.value(b)
		mark := ""
		if va != vb {
			mark = "changed"
		}
		row(s.name, va, vb, mark)
	}
	return tw.Flush()
}

// change describes b relative to a: a percentage and, for figures with a
// better direction, whether b is better or worse.
func change(a, b float64, better int) string {
	if a == b {
		return "="
	}
	var pct string
	if a == 0 {
		pct = "new"
	} else {
		pct = fmt.Sprintf("%+.1f%%", (b-a)/math.Abs(a)*100)
	}
	switch {
	case better == 0:
		return pct
	case (b > a) == (better > 0):
		return pct + " better"
	default:
		return pct + " worse"
	}
}
