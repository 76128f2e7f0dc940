package replay

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
	"github.com/scorerefresh/scorerefresh/planner"
)

// The files a report directory holds, and its JSON layout.
const (
	ReportFormat = "scorerefresh-drain-report/1"
	ReportFile   = "report.json"
	TimelineFile = "timeline.csv"
	ChartFile    = "chart.svg"
)

// Settings are the configuration a drain ran with, for comparisons.
type Settings struct {
	Server              string `json:"server"` // the redacted URI, or the embedded server
	Database            string `json:"database"`
	RefreshConcurrency  int    `json:"refreshConcurrency"`
	MaxUsersInFlight    int    `json:"maxUsersInFlight"`
	ClaimWindow         int    `json:"claimWindow"`
	AdaptiveConcurrency bool   `json:"adaptiveConcurrency"`
	MaxAttempts         int    `json:"maxAttempts"`
	Rules               string `json:"rules"`
	Components          int    `json:"components"`
	Version             string `json:"version,omitempty"`
}

// Report is report.json; its timeline goes to the CSV file and the chart.
type Report struct {
	Format       string    `json:"format"`
	Input        string    `json:"input"`
	StartedAt    time.Time `json:"startedAt"`
	Arrival      Arrival   `json:"arrival"`
	Speed        float64   `json:"speed"`
	ShiftSeconds float64   `json:"shiftSeconds"` // how far --shift-to-now moved times
	Settings     Settings  `json:"settings"`

	Entries             int64   `json:"entries"`             // queue entries loaded
	DistinctUsers       int     `json:"distinctUsers"`       // distinct usernames among them
	CoalescingFactor    float64 `json:"coalescingFactor"`    // entries acknowledged per successful refresh
	DurationSeconds     float64 `json:"durationSeconds"`     // drain start to empty queue (or stop)
	EntriesPerSecond    float64 `json:"entriesPerSecond"`    // acknowledged per second
	UsersPerSecond      float64 `json:"usersPerSecond"`      // successful refreshes per second
	MaxDepth            int64   `json:"maxDepth"`            // largest sampled queue depth
	MaxOldestAgeSeconds float64 `json:"maxOldestAgeSeconds"` // largest sampled oldest-entry age
	DeadLetters         float64 `json:"deadLetters"`         // entries dead-lettered during the drain
	Acked               float64 `json:"acked"`
	Refreshes           float64 `json:"refreshes"`
	Drained             bool    `json:"drained"`
	StopReason          string  `json:"stopReason"`
	Error               string  `json:"error,omitempty"`
	FinalDepth          int64   `json:"finalDepth"`
	Samples             int     `json:"samples"`
	MeasuredSamples     int     `json:"measuredSamples"` // samples that queried depth and oldest age (the rest derive depth)

	SkippedLines   int64          `json:"skippedLines"` // documents --skip-bad left out, all listed below up to MaxListedSkips
	Skipped        []SkippedLine  `json:"skipped,omitempty"`
	StrippedFields map[string]int `json:"strippedFields,omitempty"` // bookkeeping fields removed, by name
	OutOfOrder     int64          `json:"outOfOrder,omitempty"`     // entries older than one before them in the file

	Timeline []planner.Sample `json:"-"`
}

// NewReport summarises a drain of a loaded plan.
func NewReport(plan *Plan, d *DrainResult) *Report {
	r := &Report{
		Format: ReportFormat, StartedAt: d.Start.UTC(),
		Entries: plan.Entries, DistinctUsers: plan.DistinctUsers,
		SkippedLines: plan.SkippedTotal, Skipped: plan.Skipped, OutOfOrder: plan.OutOfOrder,
		DurationSeconds: d.End.Sub(d.Start).Seconds(),
		Acked:           d.Final.Acked, Refreshes: d.Final.Refreshes, DeadLetters: d.Final.DeadLetters,
		Drained: d.Reason == StopDrained, StopReason: d.Reason, FinalDepth: int64(d.Final.Depth),
		Timeline: d.Timeline, Samples: len(d.Timeline),
	}
	if d.Err != nil {
		r.Error = d.Err.Error()
	}
	if r.Refreshes > 0 {
		r.CoalescingFactor = r.Acked / r.Refreshes
	}
	if r.DurationSeconds > 0 {
		r.EntriesPerSecond = r.Acked / r.DurationSeconds
		r.UsersPerSecond = r.Refreshes / r.DurationSeconds
	}
	for _, s := range d.Timeline {
		r.MaxDepth = max(r.MaxDepth, int64(s.Depth))
		r.MaxOldestAgeSeconds = math.Max(r.MaxOldestAgeSeconds, s.OldestAge)
		if s.Measured {
			r.MeasuredSamples++
		}
	}
	return r
}

// WriteFiles writes the report, its timeline and its chart into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var timeline, chart bytes.Buffer // a buffer takes every write
	r.WriteCSV(&timeline)
	r.WriteSVG(&chart)
	return errors.Join(writeJSON(filepath.Join(dir, ReportFile), r),
		os.WriteFile(filepath.Join(dir, TimelineFile), timeline.Bytes(), 0o666),
		os.WriteFile(filepath.Join(dir, ChartFile), chart.Bytes(), 0o666))
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ReadReport reads a report.json (or the directory holding one).
func ReadReport(path string) (*Report, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, ReportFile)
	}
	var r Report
	if err := readJSON(path, &r); err != nil {
		return nil, err
	}
	if r.Format != ReportFormat {
		return nil, fmt.Errorf("%s: not a drain report (format %q, want %q)", path, r.Format, ReportFormat)
	}
	return &r, nil
}

// WriteCSV writes the timeline, one row per sample. measured is 1 where depth
// and oldest age were queried; elsewhere the depth is derived, the age empty.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"t_seconds", "depth", "oldest_age_seconds", "acked_per_second", "acked_total", "refreshes_total", "dead_letters_total", "arrived_total", "measured"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, s := range r.Timeline {
		age, measured := "", "0"
		if s.Measured {
			age, measured = strconv.FormatFloat(s.OldestAge, 'f', 3, 64), "1"
		}
		cw.Write([]string{strconv.FormatFloat(s.T, 'f', 3, 64), strconv.Itoa(s.Depth), age, strconv.FormatFloat(s.AckedPerSec, 'f', 1, 64),
			f(s.Acked), f(s.Refreshes), f(s.DeadLetters), strconv.FormatInt(s.Arrived, 10), measured})
	}
	cw.Flush()
	return cw.Error()
}

// WriteSummary prints the report for a person.
func (r *Report) WriteSummary(w io.Writer) {
	state := "drained"
	if !r.Drained {
		state = fmt.Sprintf("NOT drained (%s; %s entries left)", r.StopReason, planner.Thousands(r.FinalDepth))
	}
	fmt.Fprintf(w, "%s: %s entries of %s distinct users in %.1fs\n", state, planner.Thousands(r.Entries), planner.Thousands(int64(r.DistinctUsers)), r.DurationSeconds)
	fmt.Fprintf(w, "  %.1f entries/s, %.1f users/s, coalescing factor %.1f entries per refresh\n", r.EntriesPerSecond, r.UsersPerSecond, r.CoalescingFactor)
	fmt.Fprintf(w, "  max depth %s, max oldest age %.1fs, dead letters %.0f\n", planner.Thousands(r.MaxDepth), r.MaxOldestAgeSeconds, r.DeadLetters)
	if r.SkippedLines > 0 {
		fmt.Fprintf(w, "  %d bad lines skipped (listed in %s)\n", r.SkippedLines, ReportFile)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", r.Error)
	}
}

func count(v float64) string   { return planner.Thousands(int64(math.Round(v))) }
func rate(v float64) string    { return fmt.Sprintf("%.1f", v) }
func seconds(v float64) string { return fmt.Sprintf("%.1fs", v) }

// reportMetrics are the figures of a comparison, with how to print each and
// which way is better (+1 higher, -1 lower, 0 neither).
var reportMetrics = []struct {
	name   string
	value  func(*Report) float64
	format func(float64) string
	better int
}{
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

// Compare prints two reports side by side, with the change from a to b.
func Compare(w io.Writer, a, b *Report, nameA, nameB string) error {
	nameWidth := 0
	for _, m := range reportMetrics {
		nameWidth = max(nameWidth, utf8.RuneCountInString(m.name))
	}
	for _, s := range settings {
		nameWidth = max(nameWidth, utf8.RuneCountInString(s.name))
	}
	// Names to the left, figures to the right; one block of columns for
	// both parts, so the separator has cells.
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

// change describes b relative to a: a percentage and, for directed figures, better or worse.
func change(a, b float64, better int) string {
	if a == b {
		return "="
	}
	pct := "new"
	if a != 0 {
		pct = fmt.Sprintf("%+.1f%%", (b-a)/math.Abs(a)*100)
	}
	switch {
	case better == 0:
		return pct
	case (b > a) == (better > 0):
		return pct + " better"
	}
	return pct + " worse"
}

// WriteSVG draws the timeline (depth, oldest age, entries and users per
// second) under the summary, what was replayed where, the settings and peaks.
func (r *Report) WriteSVG(w io.Writer) error {
	state, s := fmt.Sprintf("drained in %.1fs", r.DurationSeconds), r.Settings
	if !r.Drained {
		state = fmt.Sprintf("not drained after %.1fs (%s)", r.DurationSeconds, r.StopReason)
	}
	_, err := io.WriteString(w, svgchart.Chart{
		Title: fmt.Sprintf("%s entries, %s users: %s — %.0f entries/s, %.1f users/s, coalescing ×%.1f",
			planner.Thousands(r.Entries), planner.Thousands(int64(r.DistinctUsers)), state, r.EntriesPerSecond, r.UsersPerSecond, r.CoalescingFactor),
		Subtitle: []string{
			fmt.Sprintf("%s · arrival %s ×%g · %s · started %s", r.Input, r.Arrival, r.Speed, s.Server, r.StartedAt.Format("2006-01-02 15:04:05 MST")),
			fmt.Sprintf("REFRESH_CONCURRENCY=%d MAX_USERS_IN_FLIGHT=%d CLAIM_WINDOW=%d ADAPTIVE_CONCURRENCY=%t · rules %s (%d components)",
				s.RefreshConcurrency, s.MaxUsersInFlight, s.ClaimWindow, s.AdaptiveConcurrency, s.Rules, s.Components),
			fmt.Sprintf("max depth %s · max oldest age %.1fs · dead letters %.0f · %s refreshes",
				planner.Thousands(r.MaxDepth), r.MaxOldestAgeSeconds, r.DeadLetters, planner.Thousands(int64(r.Refreshes))),
		},
		Panels: r.panels(), XUnit: "s", Footer: "time since the drain began (s); generated by scorerefresh replay",
	}.SVG())
	return err
}

// rateWindow is the moving average the rate panels draw: the consumer
// acknowledges in flushes, so per-second rates are spikes (the CSV keeps them).
const rateWindow = 5.0

func (r *Report) panels() []svgchart.Panel {
	depth := svgchart.Series{Name: "queue depth", Color: "#2563eb", Fill: true}
	age := svgchart.Series{Name: "oldest entry age", Color: "#dc2626", Fill: true}
	acked := svgchart.Series{Name: "acknowledged/s", Color: "#16a34a"}
	arrived := svgchart.Series{Name: "arrived/s", Color: "#9333ea"}
	refreshed := svgchart.Series{Name: "users refreshed/s", Color: "#d97706"}
	// Rates are taken from the latest sample at least a window back, or from
	// the drain's start: nothing acknowledged, and everything arrived unless
	// arrivals are paced.
	origin := planner.Sample{}
	if r.Arrival != ArrivalOriginal && len(r.Timeline) > 0 {
		origin.Arrived = r.Timeline[0].Arrived
	}
	anyArrival, j := false, -1
	for i, s := range r.Timeline {
		depth.Points = append(depth.Points, [2]float64{s.T, float64(s.Depth)})
		if s.Measured {
			age.Points = append(age.Points, [2]float64{s.T, s.OldestAge})
		}
		for j+1 < i && r.Timeline[j+1].T <= s.T-rateWindow {
			j++
		}
		from := origin
		if j >= 0 {
			from = r.Timeline[j]
		}
		if dt := s.T - from.T; dt > 0 {
			rate := float64(s.Arrived-from.Arrived) / dt
			anyArrival = anyArrival || rate > 0
			acked.Points = append(acked.Points, [2]float64{s.T, (s.Acked - from.Acked) / dt})
			refreshed.Points = append(refreshed.Points, [2]float64{s.T, (s.Refreshes - from.Refreshes) / dt})
			arrived.Points = append(arrived.Points, [2]float64{s.T, rate})
		}
	}
	through := svgchart.Panel{Title: fmt.Sprintf("Entries per second (%g s moving average)", rateWindow), Series: []svgchart.Series{acked}}
	if anyArrival {
		through.Series = append(through.Series, arrived)
	}
	// Users refreshed per second is the figure the contract (docs/contract.md) holds steady
	// whatever the backlog's shape; entries per second swings with coalescing.
	return []svgchart.Panel{
		{Title: "Queue depth (entries)", Series: []svgchart.Series{depth}},
		{Title: "Oldest entry age", Unit: "s", Series: []svgchart.Series{age}},
		through,
		{Title: fmt.Sprintf("Users refreshed per second (%g s moving average)", rateWindow), Series: []svgchart.Series{refreshed}},
	}
}
