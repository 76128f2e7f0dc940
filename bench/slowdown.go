package bench

import (
	"context"
	"flag"
	"fmt"
	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// SlowdownConfig is the slowdown scenario's settings (flags -slowdown*): the server slows down
// so much that every refresh outlives its deadline, for minutes, then
// recovers.
type SlowdownConfig struct {
	SlowFor      time.Duration // how long refreshes outlive their deadline
	SteadyBefore time.Duration // steady state before the slowdown
	WatchAfter   time.Duration // how long the drain is watched after it, at most
	Lease        time.Duration // LEASE_DURATION of the service, and so its refresh deadline
	SlowRTT      time.Duration // the proxy's RTT during the slowdown
	ArrivalRate  float64       // arrivals per second (0: half of scorerefresh's diverse drain rate)
}

func slowdownFlags(fs *flag.FlagSet, o *SlowdownConfig) {
	fs.DurationVar(&o.SlowFor, "slowdown", 2*time.Minute, "slowdown: how long refreshes outlive their deadline")
	fs.DurationVar(&o.SteadyBefore, "slowdown-pre", 30*time.Second, "slowdown: steady state before it")
	fs.DurationVar(&o.WatchAfter, "slowdown-post", 3*time.Minute, "slowdown: how long the drain is watched after it, at most")
	fs.DurationVar(&o.Lease, "slowdown-lease", 10*time.Second, "slowdown: LEASE_DURATION of the service, and so its refresh deadline")
	fs.DurationVar(&o.SlowRTT, "slowdown-rtt", time.Second, "slowdown: the proxy's RTT during it (a refresh needs at least 14 round trips)")
	fs.Float64Var(&o.ArrivalRate, "slowdown-rate", 0, "slowdown: arrivals per second (0: half of scorerefresh's diverse drain rate)")
}

func shrinkSlowdown(shrink func(string, func()), o *SlowdownConfig) {
	shrink("slowdown", func() { o.SlowFor = 4 * time.Second })
	shrink("slowdown-pre", func() { o.SteadyBefore = 2 * time.Second })
	shrink("slowdown-post", func() { o.WatchAfter = 15 * time.Second })
	shrink("slowdown-lease", func() { o.Lease = 2 * time.Second })
	shrink("slowdown-rtt", func() { o.SlowRTT = 400 * time.Millisecond })
}

// slowdownResult is the slowdown scenario.
type slowdownResult struct {
	Rate         float64    `json:"arrival_rate"`
	LeaseSeconds float64    `json:"lease_seconds"` // LEASE_DURATION = the refresh deadline
	RTTms        float64    `json:"slow_rtt_ms"`
	TriggerAt    float64    `json:"slow_at"`
	RestoreAt    float64    `json:"restore_at"`
	Run          *runResult `json:"run"`
	// From the service's metrics.
	RefreshesOK     float64 `json:"refreshes_ok"`
	RefreshesFailed float64 `json:"refreshes_failed"`
	DeadLettered    float64 `json:"dead_lettered"`
	// From the dead-letter collection and the leases, read directly once a second.
	DeadLetterDocs int64 `json:"dead_letter_documents"`
	MaxAttempts    int   `json:"max_attempts_on_a_lease"`
	// From the service's log: each failed refresh, charged an attempt or not.
	Failures failureCounts `json:"failures"`
	// The queue.
	PreDepth     int64   `json:"pre_slowdown_max_depth"`
	PreAge       float64 `json:"pre_slowdown_max_oldest_age"`
	PeakDepth    int64   `json:"peak_depth"`
	PeakAge      float64 `json:"peak_oldest_age"`
	AckedDuring  float64 `json:"acked_during_slowdown"` // from a lease period after it began to its end
	DrainedAfter float64 `json:"drained_seconds_after_restore"`
	FinalDepth   int64   `json:"final_depth"`
}

// failureCounts are the service's "refresh failed" log lines.
type failureCounts struct {
	Failed  int `json:"failed"`
	Charged int `json:"charged"`
	// Transient failures are never charged: the consumer judged the error
	// to be about the server (a deadline exceeded inside the driver is one).
	Transient int `json:"transient"`
	// Spared are failures not charged because most refreshes around them
	// failed too (the widespread-failure rule).
	Spared   int `json:"spared_as_widespread"`
	TimedOut int `json:"timed_out"` // the refresh's own deadline, as the consumer classified it
	Logged   int `json:"logged"`    // of them written to service.log
}

// failureCounter counts "refresh failed" records on their way to the log
// and keeps only the first few of them there: a slowdown fails thousands
// of refreshes.
type failureCounter struct {
	next slog.Handler
	keep int
	mu   *sync.Mutex
	n    *failureCounts
}

func (h *failureCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *failureCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != "refresh failed" {
		return h.next.Handle(ctx, r)
	}
	charged, transient, timedOut := false, false, false
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "charged":
			charged = a.Value.Resolve().String() == "true"
		case "transient":
			transient = a.Value.Resolve().String() == "true"
		case "err":
			timedOut = strings.Contains(a.Value.Resolve().String(), "refresh timed out")
		}
		return true
	})
	h.mu.Lock()
	h.n.Failed++
	switch {
	case charged:
		h.n.Charged++
	case transient:
		h.n.Transient++
	default:
		h.n.Spared++
	}
	if timedOut {
		h.n.TimedOut++
	}
	log := h.n.Logged < h.keep
	if log {
		h.n.Logged++
	}
	h.mu.Unlock()
	if !log {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *failureCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &failureCounter{next: h.next.WithAttrs(as), keep: h.keep, mu: h.mu, n: h.n}
}

func (h *failureCounter) WithGroup(name string) slog.Handler {
	return &failureCounter{next: h.next.WithGroup(name), keep: h.keep, mu: h.mu, n: h.n}
}

func (b *Bench) slowdown(ctx context.Context, scorerefreshRate float64) (*slowdownResult, error) {
	o := b.cfg.Slowdown
	x := &slowdownResult{Rate: o.ArrivalRate, LeaseSeconds: o.Lease.Seconds(), RTTms: ms(o.SlowRTT),
		TriggerAt: o.SteadyBefore.Seconds(), RestoreAt: (o.SteadyBefore + o.SlowFor).Seconds(), DrainedAfter: -1}
	if x.Rate <= 0 {
		x.Rate = 0.5 * scorerefreshRate
	}
	b.logf("\n== slowdown: arrivals at %.1f/s; LEASE_DURATION (the refresh deadline) %s; RTT %s from %s to %s, so every refresh outlives its deadline",
		x.Rate, o.Lease, o.SlowRTT, o.SteadyBefore, o.SteadyBefore+o.SlowFor)

	counter := &failureCounter{next: b.svcLog.Handler(), keep: 20, mu: &sync.Mutex{}, n: &x.Failures}
	savedLog := b.svcLog
	b.svcLog = slog.New(counter)
	defer func() { b.svcLog = savedLog }()

	svc, err := b.measureSlowdown(ctx, x)
	if err != nil {
		return nil, err
	}
	if svc != nil {
		x.RefreshesOK, x.RefreshesFailed, x.DeadLettered = svc.refreshes(), svc.failedRefreshes(), svc.deadLetteredAnyReason()
	}
	x.figures(x.TriggerAt / 3)
	b.logf("  %.0f refreshes failed (%d classified as timed out): %d charged an attempt, %d transient, %d spared as widespread; %.0f succeeded; dead letters: %.0f (metric), %d (collection); most attempts on a lease: %d",
		x.RefreshesFailed, x.Failures.TimedOut, x.Failures.Charged, x.Failures.Transient, x.Failures.Spared, x.RefreshesOK, x.DeadLettered, x.DeadLetterDocs, x.MaxAttempts)
	b.logf("  depth before ≤ %d, peak %d; %s", x.PreDepth, x.PeakDepth, seconds(x.DrainedAfter, "after restore back to the pre-slowdown depth and oldest age"))
	b.targets = append(b.targets, x.targets()...)
	return x, nil
}

// measureSlowdown runs the service with the slowdown's lease through the
// slowdown, reading the dead letters once a second; it returns the service.
func (b *Bench) measureSlowdown(ctx context.Context, x *slowdownResult) (*scorerefresh, error) {
	o := b.cfg.Slowdown
	var svc *scorerefresh
	nextRead := time.Duration(0)
	observe := func(elapsed time.Duration, c running) {
		if s, ok := c.(*scorerefresh); ok {
			svc = s
		}
		if svc == nil || elapsed < nextRead {
			return
		}
		nextRead = elapsed + time.Second
		b.readDeadLetters(ctx, svc, x)
	}
	warm := x.TriggerAt / 3
	done := func(s []sample) bool {
		t := drainedAfter(s, warm, x.TriggerAt, x.RestoreAt)
		return t >= 0 && last(s).T >= x.RestoreAt+t+5
	}
	err := b.withEnv([]string{"LEASE_DURATION=" + o.Lease.String()}, func() (err error) {
		x.Run, err = b.measure(ctx, runSpec{scenario: "slowdown", consumer: consumerScorerefresh, rtt: b.cfg.RTT,
			produce: &produce{rate: x.Rate, pool: b.cfg.Pool}, events: b.rttTrigger("slowdown", o.SteadyBefore, o.SlowFor, o.SlowRTT),
			observe: observe, max: o.SteadyBefore + o.SlowFor + o.WatchAfter, done: done})
		return err
	})
	return svc, err
}

// targets: no dead letters through the slowdown, and the backlog drains
// after it.
func (x *slowdownResult) targets() []target {
	return []target{
		{Scenario: "slowdown", Target: "no dead letters while every refresh outlives its deadline",
			Figure: fmt.Sprintf("%.0f dead letters (%d in the collection); %.0f failed refreshes, %d charged an attempt (most attempts on a lease: %d of MAX_ATTEMPTS 5)",
				x.DeadLettered, x.DeadLetterDocs, x.RefreshesFailed, x.Failures.Charged, x.MaxAttempts),
			Value: x.DeadLettered, Met: x.DeadLettered == 0 && x.DeadLetterDocs == 0, Applies: true},
		{Scenario: "slowdown", Target: "the backlog drains after it",
			Figure: fmt.Sprintf("peak depth %d, oldest age %.0f s; %s (depth %d at the end)", x.PeakDepth, x.PeakAge,
				seconds(x.DrainedAfter, "after restore back to the pre-slowdown level"), x.FinalDepth),
			Value: x.DrainedAfter, Met: x.DrainedAfter >= 0, Applies: true},
	}
}

// readDeadLetters reads, on the direct connection, the dead letters and the
// most attempts charged to any lease of the run's database.
func (b *Bench) readDeadLetters(ctx context.Context, svc *scorerefresh, x *slowdownResult) {
	if len(svc.svcs) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	db := b.direct.Database(svc.svcs[0].DB.Name())
	if n, err := db.Collection(svc.svcs[0].Colls.DeadLetter.Name()).CountDocuments(rctx, bson.D{}); err == nil {
		x.DeadLetterDocs = max(x.DeadLetterDocs, n)
	}
	var top struct {
		Attempts int `bson:"attempts"`
	}
	err := db.Collection(svc.svcs[0].Colls.Claims.Name()).FindOne(rctx, bson.D{{Key: "attempts", Value: bson.D{{Key: "$gt", Value: 0}}}},
		options.FindOne().SetSort(bson.D{{Key: "attempts", Value: -1}}).SetProjection(bson.D{{Key: "attempts", Value: 1}})).Decode(&top)
	if err == nil {
		x.MaxAttempts = max(x.MaxAttempts, top.Attempts)
	}
}

func (x *slowdownResult) figures(warm float64) {
	tl := x.Run.Timeline
	for _, s := range tl {
		if s.T >= warm && s.T < x.TriggerAt {
			x.PreDepth = max(x.PreDepth, s.Depth)
			x.PreAge = max(x.PreAge, s.OldestAge)
		}
		if s.T >= x.TriggerAt {
			x.PeakDepth = max(x.PeakDepth, s.Depth)
			x.PeakAge = max(x.PeakAge, s.OldestAge)
		}
	}
	from := x.Run.at(x.TriggerAt + x.LeaseSeconds)
	to := x.Run.at(x.RestoreAt)
	x.AckedDuring = to.Progress - from.Progress
	x.DrainedAfter = drainedAfter(tl, warm, x.TriggerAt, x.RestoreAt)
	x.FinalDepth = last(tl).Depth
}

func (x *slowdownResult) chart() svgchart.Chart {
	depth := svgchart.Panel{Title: "queue depth (entries)"}
	age := svgchart.Panel{Title: "oldest entry age (s)"}
	d := svgchart.Series{Name: "scorerefresh", Color: colorScorerefresh}
	a := svgchart.Series{Name: "scorerefresh", Color: colorScorerefresh}
	for _, s := range x.Run.Timeline {
		d.Points = append(d.Points, [2]float64{s.T, float64(s.Depth)})
		a.Points = append(a.Points, [2]float64{s.T, s.OldestAge})
	}
	depth.Series, age.Series = []svgchart.Series{d}, []svgchart.Series{a}
	return svgchart.Chart{PanelHeight: chartPanelHeight, Title: fmt.Sprintf("Slowdown: RTT %.0f ms between the markers, refresh deadline %.0f s; arrivals %.1f/s", x.RTTms, x.LeaseSeconds, x.Rate),
		XLabel: "seconds since the consumer started", Panels: []svgchart.Panel{depth, age},
		Markers: []svgchart.Marker{{Label: "slowdown", X: x.TriggerAt}, {Label: "restore", X: x.RestoreAt}}}
}

func (x *slowdownResult) markdown(w func(string, ...any), r *Report) {
	w("## Slowdown")
	w("")
	w("The service runs with `LEASE_DURATION=%.0fs`, which is also its refresh deadline (the refresh timeout defaults to the lease), and every other setting at its default. Producers enqueue %.1f diverse entries/s throughout. From %.0f s to %.0f s the proxy's RTT is %.0f ms: a refresh needs at least 14 round trips (a batch of 16 on FerretDB, 44), so every refresh outlives its deadline, while claims, lease renewals and acknowledgements (a few round trips each) still get through.",
		x.LeaseSeconds, x.Rate, x.TriggerAt, x.RestoreAt, x.RTTms)
	w("")
	w("| figure | value |")
	w("|---|---:|")
	w("| refreshes failed | %.0f |", x.RefreshesFailed)
	w("| of them classified as the refresh's own deadline (`refresh timed out`) | %d |", x.Failures.TimedOut)
	w("| charged an attempt | %d |", x.Failures.Charged)
	w("| not charged: classified as transient (a server problem) | %d |", x.Failures.Transient)
	w("| not charged: spared by the widespread-failure rule | %d |", x.Failures.Spared)
	w("| most attempts charged to one user (MAX_ATTEMPTS 5) | %d |", x.MaxAttempts)
	w("| **dead letters** (metric; collection) | **%.0f; %d** |", x.DeadLettered, x.DeadLetterDocs)
	w("| entries acknowledged during the slowdown (from one deadline after its start) | %.0f |", x.AckedDuring)
	w("| depth / oldest age before it, at most | %d / %.1f s |", x.PreDepth, x.PreAge)
	w("| peak depth / oldest age | %d / %.0f s |", x.PeakDepth, x.PeakAge)
	w("| back to the pre-slowdown depth and oldest age | %s |", seconds(x.DrainedAfter, "after restore"))
	w("| refreshes that succeeded over the run | %.0f |", x.RefreshesOK)
	w("")
	w("service.log keeps the first %d \"refresh failed\" lines of this scenario; the counts above are of all of them.", x.Failures.Logged)
	w("")
	if f, ok := r.Charts["slowdown"]; ok {
		w("![slowdown](%s)", f)
		w("")
	}
}
