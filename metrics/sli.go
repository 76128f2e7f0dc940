package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// SLI holds the sampled service-level indicators and the headroom estimate.
type SLI struct {
	QueueDepth      prometheus.Gauge
	OldestAge       prometheus.Gauge
	DeadLetterDepth prometheus.Gauge
	ArrivalRate     prometheus.Gauge
	DrainCapacity   prometheus.Gauge
	TimeToDrain     prometheus.Gauge
	LastSample      prometheus.Gauge
	SampleErrors    prometheus.Counter
}

// NewSLI registers the SLI gauges on reg.
func NewSLI(reg prometheus.Registerer) *SLI {
	f := promauto.With(reg)
	g := func(name, help string) prometheus.Gauge {
		return f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
	}
	return &SLI{
		QueueDepth:      g("queue_depth", "Documents in the queue collection at the last sample."),
		OldestAge:       g("queue_oldest_age_seconds", "Now minus createdAt of the oldest queue entry (0 when empty)."),
		DeadLetterDepth: g("deadletter_depth", "Documents in the dead-letter collection at the last sample."),
		ArrivalRate:     g("arrival_rate", "Estimated entries enqueued per second over the recent window."),
		DrainCapacity:   g("drain_capacity", "Estimated entries per second this consumer can acknowledge now."),
		TimeToDrain:     g("time_to_drain_seconds", "Projected seconds to empty the queue at current rates (+Inf when arrivals exceed capacity)."),
		LastSample:      g("sli_last_sample_timestamp_seconds", "Unix time of the last successful SLI sample."),
		SampleErrors: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "sli_sample_errors_total",
			Help: "SLI samples that failed (MongoDB unreachable or slow).",
		}),
	}
}

// NewBuildInfo exports scorerefresh_build_info{version, revision, goversion} = 1.
func NewBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) {
	promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Build information of the running binary; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	}).Set(1)
}
