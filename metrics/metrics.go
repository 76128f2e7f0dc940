// Package metrics holds the service's Prometheus metrics (docs/contract.md),
// the SLI sampler, the headroom estimate and the health endpoints, on a
// registry handed in (never the global one), so tests build many sets.
package metrics

import (
	"cmp"
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	dto "github.com/prometheus/client_model/go"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/scorerefresh/scorerefresh/scoring"
)

const namespace = "scorerefresh"

// Dead-letter reasons: the only values of the reason label.
const (
	ReasonMalformed   = "malformed"
	ReasonMaxAttempts = "max_attempts"
	// ReasonTooLarge: too large to store whole with its deadLetter
	// subdocument, kept reduced (whatever made it a dead letter).
	ReasonTooLarge = "too_large"
)

// Refresh outcomes: the only values of the outcome label.
const (
	OutcomeOK    = "ok"
	OutcomeError = "error"
)

// Wake-up sources: the only values of the source label.
const (
	WakeupPoll         = "poll"
	WakeupChangeStream = "change_stream"
	WakeupRoom         = "room"
)

// NewRegistry returns a registry with the Go runtime and process collectors,
// which every binary exports next to its own metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Consumer is what the claim/refresh/ack pipeline reports.
type Consumer struct {
	EntriesClaimed      prometheus.Counter
	EntriesAcked        prometheus.Counter
	EntriesDeadLettered *prometheus.CounterVec // reason: malformed | max_attempts | too_large
	Refreshes           *prometheus.CounterVec // outcome: ok | error
	RefreshDuration     prometheus.Histogram
	RefreshBatchSeconds prometheus.Histogram // one refresh slot's batch, all its users: the unit of drain capacity
	// The external scorer's requests (SCORER_URL), by outcome: ok, error, timeout.
	ScorerRequests        *prometheus.CounterVec
	ScorerRequestDuration prometheus.Histogram
	OCCConflicts          prometheus.Counter
	UsersInFlight         prometheus.Gauge
	UsersInFlightCap      prometheus.Gauge
	ConcurrencyLimit      prometheus.Gauge
	ClaimDuration         prometheus.Histogram
	CoalescedEntries      prometheus.Histogram
	ClaimErrors           prometheus.Counter
	AckFlushErrors        prometheus.Counter
	LeasesLost            prometheus.Counter
	Wakeups               *prometheus.CounterVec // source: poll | change_stream | room
	WakeupSource          *prometheus.GaugeVec   // source: change_stream | poll; 1 for the active one
	LimitChanges          *prometheus.CounterVec // reason: headroom | latency | overload
	LatencyBaseline       prometheus.Gauge
	WritesSkipped         *prometheus.CounterVec // reason: newer
	RefreshBatchUsers     prometheus.Histogram
	RefreshRoundTrips     prometheus.Counter
}

// NewConsumer registers the pipeline's metrics on reg; known label values are
// pre-created so dashboards see zeros instead of gaps.
func NewConsumer(reg prometheus.Registerer) *Consumer {
	f := promauto.With(reg)
	c := &Consumer{
		EntriesClaimed: counter(f, "entries_claimed_total", "Queue entries claimed by this consumer."),
		EntriesAcked:   counter(f, "entries_acked_total", "Queue entries acknowledged (deleted after a refresh of their user)."),
		EntriesDeadLettered: counterVec(f, "entries_deadlettered_total", "Queue entries moved to the dead-letter collection, by reason.",
			"reason", ReasonMalformed, ReasonMaxAttempts, ReasonTooLarge),
		CoalescedEntries: histogram(f, "coalesced_entries", "Queue entries acknowledged per refresh (the coalescing factor).",
			prometheus.ExponentialBuckets(1, 4, 10)), // 1 .. 262144
		Refreshes: counterVec(f, "refreshes_total", "User refreshes (recompute + score write), by outcome.", "outcome", OutcomeOK, OutcomeError),
		RefreshDuration: histogram(f, "refresh_duration_seconds", "Duration of one user's refresh, recompute + OCC write.",
			prometheus.ExponentialBuckets(0.005, 2, 14)), // 5ms .. ~41s
		RefreshBatchSeconds: histogram(f, "refresh_batch_duration_seconds",
			"Duration of one refresh slot's batch (1 user, or every user refreshed together), recompute + OCC writes; each of its users also observes it in refresh_duration_seconds.",
			prometheus.ExponentialBuckets(0.005, 2, 14)),
		ScorerRequests: counterVec(f, "scorer_requests_total", "Requests to the external scorer (SCORER_URL), by outcome.", "outcome", "ok", "error", "timeout"),
		ScorerRequestDuration: histogram(f, "scorer_request_duration_seconds", "Duration of one request to the external scorer, the answer read and checked.",
			prometheus.ExponentialBuckets(0.005, 2, 14)),
		OCCConflicts: counter(f, "occ_conflicts_total", "Version conflicts on score writes (each followed by a re-read and retry)."),
		WritesSkipped: counterVec(f, "writes_skipped_total",
			"Score writes skipped, by reason (newer: the stored document came from a recompute that began later).", "reason", scoring.SkipNewer),
		RefreshBatchUsers: histogram(f, "refresh_batch_users", "Users per refresh call (1 for a single-user refresh); its _sum counts refreshed users.",
			prometheus.ExponentialBuckets(1, 2, 9)), // 1 .. 256
		RefreshRoundTrips: counter(f, "refresh_round_trips_total",
			"MongoDB commands sent by refreshes (queries, score reads and writes, retries); divided by refresh_batch_users_sum, round trips per refreshed user."),
		UsersInFlight:    gauge(f, "users_in_flight", "Distinct users claimed by this consumer and not yet finished."),
		UsersInFlightCap: gauge(f, "users_in_flight_cap", "MAX_USERS_IN_FLIGHT: the cap on users_in_flight."),
		ClaimDuration: histogram(f, "claim_duration_seconds", "Duration of one claim round (read window, claim users, absorb their entries).",
			prometheus.ExponentialBuckets(0.001, 2.5, 12)), // 1ms .. ~60s
		ClaimErrors: counter(f, "claim_errors_total", "Claim rounds that failed (each retried with backoff)."),
		AckFlushErrors: counter(f, "ack_flush_errors_total",
			"Ack flushes or dead-letter moves that failed (the steps not done are retried with backoff; the users stay held, failed dead letters back off on their own)."),
		LeasesLost: counter(f, "leases_lost_total", "Leases found taken over by another consumer when released (they expired during a stall)."),
		Wakeups: counterVec(f, "wakeups_total", "Claim-loop wake-ups, by source (poll timer, change stream, a refresh slot about to idle).",
			"source", WakeupPoll, WakeupChangeStream, WakeupRoom),
		WakeupSource: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "wakeup_source",
			Help: "1 for the wake-up source in use: change_stream, or poll when streams are unavailable.",
		}, []string{"source"}),
		ConcurrencyLimit: gauge(f, "refresh_concurrency_limit", "Refreshes this consumer lets run at once right now."),
		LimitChanges: counterVec(f, "concurrency_limit_changes_total",
			"Changes of the adaptive concurrency limit, by reason (headroom, latency, overload).", "reason", "headroom", "latency", "overload"),
		LatencyBaseline: gauge(f, "refresh_latency_baseline_seconds",
			"No-load refresh latency the adaptive limiter measures against: the lowest interval mean it measured (0 when adaptive concurrency is off)."),
	}
	c.WakeupSource.WithLabelValues(WakeupPoll).Set(1)
	c.WakeupSource.WithLabelValues(WakeupChangeStream).Set(0)
	return c
}

func counter(f promauto.Factory, name, help string) prometheus.Counter {
	return f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
}

func gauge(f promauto.Factory, name, help string) prometheus.Gauge {
	return f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
}

func histogram(f promauto.Factory, name, help string, buckets []float64) prometheus.Histogram {
	return f.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets})
}

// counterVec is a counter with one label, its known values pre-created.
func counterVec(f promauto.Factory, name, help, label string, values ...string) *prometheus.CounterVec {
	v := f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, []string{label})
	for _, value := range values {
		v.WithLabelValues(value)
	}
	return v
}

// Read returns the current value of a counter or gauge, or the sample count
// of a histogram, for in-process reports (the demo's progress, the bench).
func Read(m prometheus.Metric) float64 {
	d := write(m)
	// One of the three is set; the getters of the others read 0.
	return d.GetCounter().GetValue() + d.GetGauge().GetValue() + float64(d.GetHistogram().GetSampleCount())
}

// write is m's current state: empty if m cannot say.
func write(m prometheus.Metric) *dto.Metric {
	var d dto.Metric
	if m.Write(&d) != nil {
		return &dto.Metric{}
	}
	return &d
}

// Mongo reports the driver's connection pool and round trips. The command
// label is the command name (find, update, ...): a small fixed set.
type Mongo struct {
	PoolInUse        prometheus.Gauge
	PoolOpen         prometheus.Gauge
	PoolMaxSize      prometheus.Gauge
	CheckoutWait     prometheus.Histogram
	CheckoutFailures *prometheus.CounterVec // reason: timeout | connectionError | poolClosed
	Commands         *prometheus.CounterVec // command, outcome: ok | error
	CommandDuration  *prometheus.HistogramVec

	// OnCheckout, if set before the client connects, sees every checkout's
	// wait and whether it failed (the adaptive limiter listens here).
	OnCheckout func(wait time.Duration, failed bool)
}

func NewMongo(reg prometheus.Registerer) *Mongo {
	f := promauto.With(reg)
	return &Mongo{
		PoolInUse:   gauge(f, "mongo_pool_connections_in_use", "Connections checked out of the driver's pool right now."),
		PoolOpen:    gauge(f, "mongo_pool_connections_open", "Connections open in the driver's pool (in use or idle)."),
		PoolMaxSize: gauge(f, "mongo_pool_max_size", "maxPoolSize the client was configured with, per server."),
		CheckoutWait: histogram(f, "mongo_pool_checkout_wait_seconds", "Time an operation waited to check a connection out of the pool.",
			prometheus.ExponentialBuckets(0.0001, 4, 10)), // 100µs .. ~26s
		CheckoutFailures: counterVec(f, "mongo_pool_checkout_failures_total", "Connection checkouts that failed, by reason.", "reason"),
		Commands: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "mongo_commands_total",
			Help: "MongoDB commands (round trips) sent, by command name and outcome.",
		}, []string{"command", "outcome"}),
		CommandDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "mongo_command_duration_seconds",
			Help:    "Round-trip time of MongoDB commands, by command name.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 3, 11), // 0.5ms .. ~30s
		}, []string{"command"}),
	}
}

// PoolMonitor feeds the pool metrics; hand it to options.Client().SetPoolMonitor.
func (m *Mongo) PoolMonitor() *event.PoolMonitor {
	return &event.PoolMonitor{Event: func(e *event.PoolEvent) {
		switch e.Type {
		case event.ConnectionCreated:
			m.PoolOpen.Inc()
		case event.ConnectionClosed:
			m.PoolOpen.Dec()
		case event.ConnectionCheckedIn:
			m.PoolInUse.Dec()
		case event.ConnectionCheckedOut, event.ConnectionCheckOutFailed:
			failed := e.Type == event.ConnectionCheckOutFailed
			if failed {
				m.CheckoutFailures.WithLabelValues(e.Reason).Inc()
			} else {
				m.PoolInUse.Inc()
			}
			m.CheckoutWait.Observe(e.Duration.Seconds())
			if m.OnCheckout != nil {
				m.OnCheckout(e.Duration, failed)
			}
		}
	}}
}

// CommandMonitor counts round trips; next, if not nil, sees every event too (tests chain theirs).
func (m *Mongo) CommandMonitor(next *event.CommandMonitor) *event.CommandMonitor {
	next = cmp.Or(next, &event.CommandMonitor{})
	count := func(e event.CommandFinishedEvent, outcome string) {
		m.Commands.WithLabelValues(e.CommandName, outcome).Inc()
		m.CommandDuration.WithLabelValues(e.CommandName).Observe(e.Duration.Seconds())
	}
	return &event.CommandMonitor{
		Started:   next.Started, // the driver skips a nil one
		Succeeded: then(func(e *event.CommandSucceededEvent) { count(e.CommandFinishedEvent, "ok") }, next.Succeeded),
		Failed:    then(func(e *event.CommandFailedEvent) { count(e.CommandFinishedEvent, "error") }, next.Failed),
	}
}

// then calls f, then next if it is set.
func then[E any](f func(E), next func(context.Context, E)) func(context.Context, E) {
	return func(ctx context.Context, e E) {
		f(e)
		if next != nil {
			next(ctx, e)
		}
	}
}
