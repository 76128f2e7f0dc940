// Package replay takes and replays backlog snapshots, to answer "would this
// backlog wedge us, and how long would it take to drain?" before and after a
// change, and to reproduce an incident in staging (docs/contract.md).
//
// Snapshot and Generate write Extended JSON files and a manifest; a Loader
// checks them, then inserts them at once or at their arrival times sped up;
// Drain runs the real consumer until the queue is empty, sampling it; a
// Report is the summary (JSON), timeline (CSV) and chart (SVG).
package replay

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Options are the flags of `replay`; both binaries register the same set.
type Options struct {
	In, Arrival, ReportDir, LogLevel, MetricsAddr string
	ShiftToNow, Drain, SkipBad, Drop, Embedded    bool
	Speed                                         float64
	Until, SampleInterval                         time.Duration
}

func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.In, "in", "", "snapshot file or directory, or a mongoexport file (required)")
	fs.BoolVar(&o.ShiftToNow, "shift-to-now", false, "move every createdAt so the newest entry is now, keeping the gaps (and the rules' windowed time fields of source documents with them)")
	fs.StringVar(&o.Arrival, "arrival", string(ArrivalMax), "max: insert every entry at once; original: at the original arrival times, sped up by --speed")
	fs.Float64Var(&o.Speed, "speed", 1, "with --arrival original, replay arrivals this many times faster")
	fs.BoolVar(&o.Drain, "drain", false, "run the consumer in-process with the current configuration until the queue is empty, and write a drain report")
	fs.DurationVar(&o.Until, "until", 0, "with --drain, stop after this long even if entries remain (0: until the queue is empty)")
	fs.BoolVar(&o.SkipBad, "skip-bad", false, "leave out documents that do not parse, counting and listing them, instead of stopping")
	fs.BoolVar(&o.Drop, "drop", false, "drop the queue, claims, dead-letter, scores and loaded source collections first (for a scratch database)")
	fs.StringVar(&o.ReportDir, "report", "", "directory for the drain report (default: replay-report-<time>)")
	fs.BoolVar(&o.Embedded, "embedded", false, "replay into an embedded server, no MongoDB needed (scorerefresh-demo only)")
	fs.DurationVar(&o.SampleInterval, "sample-interval", time.Second, "timeline resolution of the drain report")
	fs.StringVar(&o.LogLevel, "log-level", "warn", "the consumer's log level while draining (its JSON lines go to stderr)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve the consumer's /metrics here while draining (default: not served)")
}

func (o *Options) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.In == "", "--in is required")
	check(Arrival(o.Arrival) != ArrivalMax && Arrival(o.Arrival) != ArrivalOriginal, "--arrival %q: want max or original", o.Arrival)
	check(o.Speed <= 0, "--speed %g: must be positive", o.Speed)
	check(o.Until < 0 || o.SampleInterval <= 0, "--until must not be negative and --sample-interval must be positive")
	return errors.Join(errs...)
}

// Target is where a replay loads and what drains it.
type Target struct {
	DB                                *mongo.Database
	Queue, Claims, DeadLetter, Scores string // collection names
	Consumer                          Runner
	Metrics                           *metrics.Consumer
	Rules                             *scoring.Rules
	Settings                          Settings
}

// Replay loads o.In into t and, with o.Drain, drains it and returns the report it writes (else nil).
func Replay(ctx context.Context, o Options, t Target, out, progress io.Writer) (*Report, error) {
	files, _, err := ResolveInput(o.In, t.Queue)
	if err != nil {
		return nil, err
	}
	l := NewLoader(LoadConfig{DB: t.DB, Queue: t.Queue, Files: files, ShiftToNow: o.ShiftToNow, TimeFields: timeFields(t.Rules),
		Arrival: Arrival(o.Arrival), Speed: o.Speed, SkipBad: o.SkipBad, Progress: progress})
	plan, err := l.Scan(ctx)
	if err != nil {
		return nil, err
	}
	describePlan(out, plan, l.shift)
	if o.Drop {
		names := []string{t.Queue, t.Claims, t.DeadLetter, t.Scores}
		for _, f := range plan.Files {
			if !f.Queue {
				names = append(names, f.Collection)
			}
		}
		for _, n := range names {
			if err := t.DB.Collection(n).Drop(ctx); err != nil {
				return nil, fmt.Errorf("dropping %s: %w", n, err)
			}
		}
	}
	if err := l.LoadSources(ctx); err != nil {
		return nil, loadFailed(l, err)
	}
	dc := DrainConfig{Queue: t.DB.Collection(t.Queue), Consumer: t.Consumer, Metrics: t.Metrics, Interval: o.SampleInterval,
		Until: o.Until, Expected: plan.Entries, Progress: progress}
	// Paced, the queue loads alongside the drain (producers racing the consumer), telling dc of arrivals.
	stopLoad := func() {}
	if Arrival(o.Arrival) == ArrivalOriginal && o.Drain {
		l.cfg.Progress = nil // the drain's progress line reports arrivals
		loadCtx, cancel := context.WithCancel(ctx)
		ch, loading := make(chan error, 1), &sync.WaitGroup{}
		loading.Go(func() { ch <- l.LoadQueue(loadCtx) })
		dc.Arrived, dc.LoadDone = l.Inserted, ch
		stopLoad = func() {
			cancel()
			loading.Wait()
		}
	} else if err := l.LoadQueue(ctx); err != nil {
		return nil, loadFailed(l, err)
	}
	if !o.Drain {
		fmt.Fprintf(out, "loaded %s entries into %s.%s; the running service drains them\n", planner.Thousands(l.Inserted()), t.DB.Name(), t.Queue)
		for _, s := range plan.Skipped {
			fmt.Fprintf(out, "skipped %s:%d: %s\n", s.File, s.Line, s.Error)
		}
		if n := plan.SkippedTotal - int64(len(plan.Skipped)); n > 0 {
			fmt.Fprintf(out, "... and %d more skipped\n", n)
		}
		return nil, nil
	}
	res, err := Drain(ctx, dc)
	stopLoad() // a drain stopped early (--until, an interrupt) ends the arrivals too
	return report(out, o, t.Settings, l, plan, res, err)
}

// loadFailed says, whatever stopped a load, what is in the database.
func loadFailed(l *Loader, err error) error {
	return fmt.Errorf("%w\nloaded so far: %s", err, l.LoadedSoFar())
}

// report writes the drain's report files and summary, returning drainErr with any failure to write.
func report(out io.Writer, o Options, settings Settings, l *Loader, plan *Plan, res *DrainResult, drainErr error) (*Report, error) {
	r := NewReport(plan, res)
	if res.Reason == StopLoadFailed {
		r.Error = loadFailed(l, res.Err).Error()
	}
	r.Input, r.Arrival, r.Speed, r.ShiftSeconds = o.In, Arrival(o.Arrival), o.Speed, l.shift.Seconds()
	r.Settings, r.StrippedFields = settings, l.stripped
	dir := cmp.Or(o.ReportDir, "replay-report-"+res.Start.Format("20060102-150405"))
	if werr := r.WriteFiles(dir); werr != nil {
		return r, errors.Join(drainErr, fmt.Errorf("writing the report: %w", werr))
	}
	fmt.Fprintln(out)
	r.WriteSummary(out)
	fmt.Fprintf(out, "report: %s (timeline %s, chart %s)\n", filepath.Join(dir, ReportFile), TimelineFile, ChartFile)
	return r, drainErr
}

// timeFields maps each source collection to its windowed components' date fields (--shift-to-now moves them).
func timeFields(r *scoring.Rules) map[string][]string {
	out := map[string][]string{}
	for _, c := range r.Components {
		if c.Window > 0 {
			out[c.Collection] = append(out[c.Collection], c.TimeField)
		}
	}
	return out
}

func describePlan(out io.Writer, p *Plan, shift time.Duration) {
	for _, f := range p.Files {
		what := "source documents for " + f.Collection
		if f.Queue {
			what = "queue entries"
		}
		fmt.Fprintf(out, "%s: %s %s", f.Path, planner.Thousands(f.Documents), what)
		if f.Skipped > 0 {
			fmt.Fprintf(out, ", %s bad lines skipped", planner.Thousands(f.Skipped))
		}
		fmt.Fprintln(out)
	}
	if p.Entries > 0 && !p.First.IsZero() {
		fmt.Fprintf(out, "queue: %s distinct users, enqueued over %s (%s to %s)",
			planner.Thousands(int64(p.DistinctUsers)), p.Last.Sub(p.First).Round(time.Second), p.First.UTC().Format(time.RFC3339), p.Last.UTC().Format(time.RFC3339))
		if shift != 0 {
			fmt.Fprintf(out, ", shifted by %s", shift.Round(time.Second))
		}
		fmt.Fprintln(out)
	}
	if p.OutOfOrder > 0 {
		fmt.Fprintf(out, "note: %s entries are older than one before them in the file; paced arrival inserts them late\n", planner.Thousands(p.OutOfOrder))
	}
}
