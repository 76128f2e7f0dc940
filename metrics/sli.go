package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// DefaultSampleInterval is how often a Sampler samples the queue unless
// configured otherwise (SLI_INTERVAL).
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
	mu     sync.Mutex
	oldest time.Time // createdAt of the oldest entry at the last sample; zero when empty
}

// NewSLI registers the SLI gauges on reg. clk ages the oldest entry; nil is
// the wall clock.
func NewSLI(reg prometheus.Registerer, clk clock.Nower) *SLI {
	if clk == nil {
		clk = clock.Real{}
	}
	f := promauto.With(reg)
	s := &SLI{
		clock:           clk,
		QueueDepth:      gauge(f, "queue_depth", "Documents in the queue collection at the last sample."),
		DeadLetterDepth: gauge(f, "deadletter_depth", "Documents in the dead-letter collection at the last sample."),
		ArrivalRate:     gauge(f, "arrival_rate", "Estimated entries enqueued per second over the recent window."),
		DrainCapacity:   gauge(f, "drain_capacity", "Estimated entries per second this consumer can acknowledge now."),
		TimeToDrain:     gauge(f, "time_to_drain_seconds", "Projected seconds to empty the queue at current rates (+Inf when arrivals exceed capacity)."),
		LastSample:      gauge(f, "sli_last_sample_timestamp_seconds", "Unix time of the last successful SLI sample."),
		SampleErrors:    counter(f, "sli_sample_errors_total", "SLI samples that failed (MongoDB unreachable or slow)."),
	}
	// The age is computed when scraped from the last oldest createdAt seen,
	// not stored at sample time: if sampling stops (MongoDB unreachable, the
	// process wedged), the age keeps rising instead of freezing at a
	// reassuring value — a stall must look like one.
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "queue_oldest_age_seconds",
		Help: "Now minus createdAt of the oldest queue entry at the last sample (0 when empty); keeps rising if sampling stops.",
	}, s.OldestAge)
	return s
}

// SetOldest records the oldest entry's createdAt; zero means the queue is empty.
func (s *SLI) SetOldest(t time.Time) {
	s.mu.Lock()
	s.oldest = t
	s.mu.Unlock()
}

// OldestAge is the oldest entry's age now, in seconds.
func (s *SLI) OldestAge() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.oldest.IsZero() {
		return 0
	}
	return max(0, s.clock.Now().Sub(s.oldest).Seconds())
}

// NewBuildInfo exports scorerefresh_build_info{version, revision, goversion} = 1.
func NewBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) {
	promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Build information of the running binary; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	}).Set(1)
}
