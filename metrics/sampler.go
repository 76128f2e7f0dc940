package metrics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/deadline"
	"github.com/scorerefresh/scorerefresh/queuestate"
)

type SamplerConfig struct {
	Queue, DeadLetter *mongo.Collection
	Interval          time.Duration // SLI_INTERVAL; default DefaultSampleInterval
	Timeout           time.Duration // deadline of one sample; default Interval
	Clock             clock.Clock   // paces the samples and dates them; default the wall clock
}

// Sampler samples the queue (one queuestate read: four round trips whatever
// its size) every interval and derives the headroom gauges, independently of
// the consumer's loops: stopping with them would hide the stall it shows.
type Sampler struct {
	cfg      SamplerConfig
	queue    *queuestate.Reader
	sli      *SLI
	consumer *Consumer
	log      *slog.Logger
	headroom HeadroomEstimator
	// Stretched after samples that ran out of time, so a read needing longer
	// than Timeout gets through instead of piling up.
	limit       deadline.Stretch
	summaryBase HeadroomSample // at the last summary line
}

// maxSampleStretch is the least a sample's deadline may stretch to: a read needing a minute,
// abandoned at 8 × Interval and restarted, kept the server finishing abandoned copies instead of
// claim rounds (the gauges go stale meanwhile, as scorerefresh_sli_last_sample_timestamp_seconds says).
const maxSampleStretch = 4 * time.Minute

// NewSampler builds a sampler writing to sli, its headroom from consumer's counters.
func NewSampler(cfg SamplerConfig, sli *SLI, consumer *Consumer, log *slog.Logger) *Sampler {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultSampleInterval)
	cfg.Timeout = cmp.Or(cfg.Timeout, cfg.Interval)
	cfg.Clock = clock.Or(cfg.Clock)
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	return &Sampler{cfg: cfg, queue: queuestate.New(cfg.Queue, cfg.DeadLetter), sli: sli, consumer: consumer, log: log,
		limit: deadline.Stretch{Base: cfg.Timeout, Max: max(8*cfg.Timeout, maxSampleStretch)}}
}

// Run samples until ctx ends. A failed sample is counted and logged; the
// gauges keep their last values (the oldest age keeps rising).
func (s *Sampler) Run(ctx context.Context) {
	s.sample(ctx)
	clock.Every(ctx, s.cfg.Clock, s.cfg.Interval, s.sample)
}

func (s *Sampler) sample(ctx context.Context) {
	if err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
		s.sli.SampleErrors.Inc()
		s.log.Warn("SLI sample failed", "op", "sli sample", "err", err)
	}
}

// RunOnce takes one sample. Not safe to call concurrently.
func (s *Sampler) RunOnce(ctx context.Context) error {
	timeout := s.limit.Next()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := s.queue.Read(ctx)
	if s.limit.Observe(err) {
		return fmt.Errorf("sample ran out of its %s (the next one gets %s): %w", timeout, s.limit.Next(), err)
	}
	if err != nil {
		return err
	}
	now := s.cfg.Clock.Now()
	s.sli.QueueDepth.Set(float64(st.Depth))
	s.sli.oldest.Store(&st.Oldest)
	s.sli.DeadLetterDepth.Set(float64(st.DeadLetters))
	s.sli.LastSample.Set(float64(now.UnixNano()) / 1e9)

	c := s.consumer
	sample := HeadroomSample{
		At:          now,
		Depth:       float64(st.Depth),
		Removed:     Read(c.EntriesAcked) + Read(c.EntriesDeadLettered.WithLabelValues(ReasonMalformed)) + Read(c.EntriesDeadLettered.WithLabelValues(ReasonMaxAttempts)),
		Refreshes:   Read(c.RefreshDuration),
		Batches:     Read(c.RefreshBatchSeconds),
		BatchSecs:   write(c.RefreshBatchSeconds).GetHistogram().GetSampleSum(),
		OKRefreshes: Read(c.Refreshes.WithLabelValues(OutcomeOK)),
		Acked:       Read(c.EntriesAcked),
		Limit:       Read(c.ConcurrencyLimit),
	}
	h := s.headroom.Observe(sample)
	s.sli.ArrivalRate.Set(h.ArrivalRate)
	s.sli.DrainCapacity.Set(h.DrainCapacity)
	s.sli.TimeToDrain.Set(h.TimeToDrain)
	s.summary(sample, h)
	return nil
}

// summary logs, every minute, the info line operators read in the pod's logs.
func (s *Sampler) summary(cur HeadroomSample, h Headroom) {
	if s.summaryBase.At.IsZero() {
		s.summaryBase = cur
		return
	}
	dt := cur.At.Sub(s.summaryBase.At).Seconds()
	if dt < time.Minute.Seconds() {
		return
	}
	base := s.summaryBase
	s.log.Info("summary",
		"entries_per_s", round1((cur.Acked-base.Acked)/dt),
		"users_per_s", round1((cur.OKRefreshes-base.OKRefreshes)/dt),
		"depth", cur.Depth,
		"oldest_age_s", round1(s.sli.OldestAge()),
		"arrival_per_s", round1(h.ArrivalRate),
		"capacity_per_s", round1(h.DrainCapacity),
		"concurrency_limit", cur.Limit)
	s.summaryBase = cur
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// DefaultSampleInterval is SLI_INTERVAL's default.
const DefaultSampleInterval = 15 * time.Second

// SLI holds the sampled service-level indicators and the headroom estimate.
type SLI struct {
	QueueDepth      prometheus.Gauge
	DeadLetterDepth prometheus.Gauge
	ArrivalRate     prometheus.Gauge
	DrainCapacity   prometheus.Gauge
	TimeToDrain     prometheus.Gauge
	LastSample      prometheus.Gauge
	SampleErrors    prometheus.Counter

	clock  clock.Nower
	oldest atomic.Pointer[time.Time] // createdAt of the oldest entry at the last sample; zero when empty
}

// NewSLI registers the SLI gauges on reg; clk (nil: the wall clock) ages the oldest entry.
func NewSLI(reg prometheus.Registerer, clk clock.Nower) *SLI {
	f := promauto.With(reg)
	s := &SLI{
		clock:           cmp.Or[clock.Nower](clk, clock.Real{}),
		QueueDepth:      gauge(f, "queue_depth", "Documents in the queue collection at the last sample."),
		DeadLetterDepth: gauge(f, "deadletter_depth", "Documents in the dead-letter collection at the last sample."),
		ArrivalRate:     gauge(f, "arrival_rate", "Estimated entries enqueued per second over the recent window."),
		DrainCapacity:   gauge(f, "drain_capacity", "Estimated entries per second this consumer can acknowledge now."),
		TimeToDrain:     gauge(f, "time_to_drain_seconds", "Projected seconds to empty the queue at current rates (+Inf when arrivals exceed capacity)."),
		LastSample:      gauge(f, "sli_last_sample_timestamp_seconds", "Unix time of the last successful SLI sample."),
		SampleErrors:    counter(f, "sli_sample_errors_total", "SLI samples that failed (MongoDB unreachable or slow)."),
	}
	// Computed when scraped, not stored at sample time: if sampling stops,
	// the age keeps rising instead of freezing at a reassuring value.
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "queue_oldest_age_seconds",
		Help: "Now minus createdAt of the oldest queue entry at the last sample (0 when empty); keeps rising if sampling stops.",
	}, s.OldestAge)
	return s
}

// OldestAge is the oldest entry's age now, in seconds.
func (s *SLI) OldestAge() float64 {
	if t := s.oldest.Load(); t != nil && !t.IsZero() {
		return max(0, s.clock.Now().Sub(*t).Seconds())
	}
	return 0
}

// NewBuildInfo exports scorerefresh_build_info{version, revision, goversion} = 1.
func NewBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) {
	promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Build information of the running binary; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	}).Set(1)
}

// HeadroomSample is the queue at one SLI sample, and this consumer's counters then.
type HeadroomSample struct {
	At          time.Time
	Depth       float64 // queue documents
	Removed     float64 // entries acked or dead-lettered
	Refreshes   float64 // finished user refreshes (ok and error)
	Batches     float64 // finished batches (a slot's refresh of one user or several)
	BatchSecs   float64 // seconds those batches held their slots
	OKRefreshes float64 // successful refreshes
	Acked       float64 // entries acked
	Limit       float64 // current refresh concurrency limit
}

// Headroom estimates whether the consumer keeps up, before the queue shows it.
type Headroom struct {
	ArrivalRate   float64 // entries enqueued per second over the window
	DrainCapacity float64 // entries per second this consumer could acknowledge now
	TimeToDrain   float64 // seconds; 0 when empty, +Inf when arrivals ≥ capacity
}

// HeadroomEstimator derives Headroom from the oldest and newest samples of a sliding window.
// Arrivals are Δdepth + entries this consumer removed: exact with one replica, a lower bound
// with several (the alert rules compute the fleet's in PromQL). Capacity is DrainRate over the
// batches finished in the window (the last known values while idle): slots count batches.
type HeadroomEstimator struct {
	Window                               time.Duration // default 2m
	samples                              []HeadroomSample
	meanBatch, usersPerBatch, perRefresh float64 // last known, kept through idle windows
}

// Observe adds a sample and returns the estimate over the window.
func (e *HeadroomEstimator) Observe(s HeadroomSample) Headroom {
	window := cmp.Or(e.Window, 2*time.Minute)
	e.samples = append(e.samples, s)
	// Keep the newest sample at least window old as the baseline.
	for len(e.samples) > 2 && s.At.Sub(e.samples[1].At) >= window {
		e.samples = e.samples[1:]
	}
	first := e.samples[0]
	var h Headroom
	if dt := s.At.Sub(first.At).Seconds(); dt > 0 {
		arrived := (s.Depth - first.Depth) + (s.Removed - first.Removed)
		h.ArrivalRate = math.Max(0, arrived/dt)
	}
	if n := s.Batches - first.Batches; n > 0 {
		e.meanBatch = (s.BatchSecs - first.BatchSecs) / n
		e.usersPerBatch = (s.Refreshes - first.Refreshes) / n
	}
	if ok := s.OKRefreshes - first.OKRefreshes; ok > 0 {
		e.perRefresh = (s.Acked - first.Acked) / ok
	}
	h.DrainCapacity = DrainRate(s.Limit, e.usersPerBatch, e.meanBatch, e.perRefresh)
	switch {
	case s.Depth <= 0:
		h.TimeToDrain = 0
	case h.DrainCapacity <= h.ArrivalRate:
		h.TimeToDrain = math.Inf(1)
	default:
		h.TimeToDrain = s.Depth / (h.DrainCapacity - h.ArrivalRate)
	}
	return h
}

// DrainRate is what refresh slots acknowledge per second, every slot busy: slots × users per
// batch ÷ a batch's seconds × entries acknowledged per user refresh (0 when any is unknown):
// the one formula of the live headroom, the planner's bounds and the bench's estimate.
func DrainRate(slots, usersPerBatch, batchSeconds, entriesPerUser float64) float64 {
	if slots <= 0 || usersPerBatch <= 0 || batchSeconds <= 0 || entriesPerUser <= 0 {
		return 0
	}
	return slots * usersPerBatch / batchSeconds * entriesPerUser
}
