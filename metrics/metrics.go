// Package metrics holds the service's Prometheus metrics (docs/contract.md), the
// SLI sampler, the headroom estimate and the health endpoints. Everything is
// built on a registry handed in; nothing registers on the global default, so
// tests can build as many independent sets as they like.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const namespace = "scorerefresh"

// Dead-letter reasons: the only values of the reason label.
const (
	ReasonMalformed   = "malformed"
	ReasonMaxAttempts = "max_attempts"
	// ReasonTooLarge: an entry too large to store whole with its deadLetter
	// subdocument, kept in reduced form (whatever made it a dead letter).
	ReasonTooLarge = "too_large"
)

// Refresh outcomes: the only values of the outcome label.
const (
	OutcomeOK    = "ok"
	OutcomeError = "error"
)

// NewRegistry returns a registry with the Go runtime and process collectors,
// which every binary exports next to its own metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Consumer is what the claim/refresh/ack pipeline reports.
type Consumer struct {
	EntriesClaimed      prometheus.Counter
	EntriesAcked        prometheus.Counter
	EntriesDeadLettered *prometheus.CounterVec // reason: malformed | max_attempts | too_large
	Refreshes           *prometheus.CounterVec // outcome: ok | error
	RefreshDuration     prometheus.Histogram
	OCCConflicts        prometheus.Counter
	UsersInFlight       prometheus.Gauge
	UsersInFlightCap    prometheus.Gauge
	ConcurrencyLimit    prometheus.Gauge
	ClaimDuration       prometheus.Histogram
	CoalescedEntries    prometheus.Histogram
	ClaimErrors         prometheus.Counter
	AckFlushErrors      prometheus.Counter
	LeasesLost          prometheus.Counter
	Wakeups             *prometheus.CounterVec // source: poll | change_stream | room
	WakeupSource        *prometheus.GaugeVec   // source: change_stream | poll; 1 for the active one
	LimitChanges        *prometheus.CounterVec // reason: headroom | latency | overload
	LatencyBaseline     prometheus.Gauge
	WritesSkipped       *prometheus.CounterVec // reason: newer
	RefreshBatchUsers   prometheus.Histogram
	RefreshRoundTrips   prometheus.Counter
}

// SkipNewer is the reason label of a score write skipped because the stored
// document came from a newer recompute.
const SkipNewer = "newer"

// Wake-up sources: the only values of the source label.
const (
	WakeupPoll         = "poll"
	WakeupChangeStream = "change_stream"
	WakeupRoom         = "room"
)

// NewConsumer registers the pipeline's metrics on reg. Label values that are
// known up front are pre-created so dashboards see zeros instead of gaps.
func NewConsumer(reg prometheus.Registerer) *Consumer {
	f := promauto.With(reg)
	c := &Consumer{
		EntriesClaimed: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "entries_claimed_total",
			Help: "Queue entries claimed by this consumer.",
		}),
		EntriesAcked: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "entries_acked_total",
			Help: "Queue entries acknowledged (deleted after a refresh of their user).",
		}),
		EntriesDeadLettered: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "entries_deadlettered_total",
			Help: "Queue entries moved to the dead-letter collection, by reason.",
		}, []string{"reason"}),
		Refreshes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "refreshes_total",
			Help: "User refreshes (recompute + score write), by outcome.",
		}, []string{"outcome"}),
		RefreshDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "refresh_duration_seconds",
			Help:    "Duration of one user's refresh, recompute + OCC write.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5ms .. ~41s
		}),
		OCCConflicts: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "occ_conflicts_total",
			Help: "Version conflicts on score writes (each followed by a re-read and retry).",
		}),
		UsersInFlight: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "users_in_flight",
			Help: "Distinct users claimed by this consumer and not yet finished.",
		}),
		UsersInFlightCap: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "users_in_flight_cap",
			Help: "MAX_USERS_IN_FLIGHT: the cap on users_in_flight.",
		}),
		ConcurrencyLimit: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "refresh_concurrency_limit",
			Help: "Refreshes this consumer lets run at once right now.",
		}),
		ClaimDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "claim_duration_seconds",
			Help:    "Duration of one claim round (read window, claim users, absorb their entries).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12), // 1ms .. ~60s
		}),
		CoalescedEntries: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "coalesced_entries",
			Help:    "Queue entries acknowledged per refresh (the coalescing factor).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1 .. 262144
		}),
		ClaimErrors: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "claim_errors_total",
			Help: "Claim rounds that failed (each retried with backoff).",
		}),
		AckFlushErrors: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "ack_flush_errors_total",
			Help: "Ack flushes or dead-letter moves that failed (the steps not done are retried with backoff; the users stay held, failed dead letters back off on their own).",
		}),
		LeasesLost: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "leases_lost_total",
			Help: "Leases found taken over by another consumer when released (they expired during a stall).",
		}),
		Wakeups: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "wakeups_total",
			Help: "Claim-loop wake-ups, by source (poll timer, change stream, a refresh slot about to idle).",
		}, []string{"source"}),
		WakeupSource: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "wakeup_source",
			Help: "1 for the wake-up source in use: change_stream, or poll when streams are unavailable.",
		}, []string{"source"}),
		LimitChanges: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "concurrency_limit_changes_total",
			Help: "Changes of the adaptive concurrency limit, by reason (headroom, latency, overload).",
		}, []string{"reason"}),
		LatencyBaseline: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "refresh_latency_baseline_seconds",
			Help: "No-load refresh latency the adaptive limiter measures against: the lower of its own and the lowest its fleet reports (0 when adaptive concurrency is off).",
		}),
		WritesSkipped: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "writes_skipped_total",
			Help: "Score writes skipped, by reason (newer: the stored document came from a recompute that began later).",
		}, []string{"reason"}),
		RefreshBatchUsers: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "refresh_batch_users",
			Help:    "Users per refresh call (1 for a single-user refresh); its _sum counts refreshed users.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9), // 1 .. 256
		}),
		RefreshRoundTrips: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "refresh_round_trips_total",
			Help: "MongoDB commands sent by refreshes (queries, score reads and writes, retries); divided by refresh_batch_users_sum, round trips per refreshed user.",
		}),
	}
	c.WritesSkipped.WithLabelValues(SkipNewer)
	for _, r := range []string{"headroom", "latency", "overload"} {
		c.LimitChanges.WithLabelValues(r)
	}
	for _, s := range []string{WakeupPoll, WakeupChangeStream, WakeupRoom} {
		c.Wakeups.WithLabelValues(s)
	}
	c.WakeupSource.WithLabelValues(WakeupPoll).Set(1)
	c.WakeupSource.WithLabelValues(WakeupChangeStream).Set(0)
	for _, r := range []string{ReasonMalformed, ReasonMaxAttempts, ReasonTooLarge} {
		c.EntriesDeadLettered.WithLabelValues(r)
	}
	for _, o := range []string{OutcomeOK, OutcomeError} {
		c.Refreshes.WithLabelValues(o)
	}
	return c
}
