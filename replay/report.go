package replay

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/scorerefresh/scorerefresh/planner"
)

// ReportFormat identifies a drain report's JSON layout.
const ReportFormat = "scorerefresh-drain-report/1"

// The files a report directory holds.
const (
	ReportFile   = "report.json"
	TimelineFile = "timeline.csv"
	ChartFile    = "chart.svg"
)

// Settings are the configuration a drain ran with, so two reports say what
// changed between them.
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

// Report is the drain report's JSON summary. The timeline goes to its own
// CSV file and the chart.
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
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ReportFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer) error{
		TimelineFile: r.WriteCSV, ChartFile: r.WriteSVG,
	} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// ReadReport reads a report.json (or the directory holding one).
func ReadReport(path string) (*Report, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, ReportFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Format != ReportFormat {
		return nil, fmt.Errorf("%s: not a drain report (format %q, want %q)", path, r.Format, ReportFormat)
	}
	return &r, nil
}

// WriteCSV writes the timeline, one row per sample. measured is 1 where
// depth and oldest age were queried; elsewhere depth is derived from the
// counters and the oldest age cell is empty.
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
