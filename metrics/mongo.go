package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Mongo reports the driver's connection pool and round trips. The command
// label holds the command name (find, insert, delete, update, aggregate, ...):
// a small fixed set, never a collection or a value.
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

// NewMongo registers the MongoDB client metrics on reg.
func NewMongo(reg prometheus.Registerer) *Mongo {
	f := promauto.With(reg)
	return &Mongo{
		PoolInUse: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "mongo_pool_connections_in_use",
			Help: "Connections checked out of the driver's pool right now.",
		}),
		PoolOpen: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "mongo_pool_connections_open",
			Help: "Connections open in the driver's pool (in use or idle).",
		}),
		PoolMaxSize: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "mongo_pool_max_size",
			Help: "maxPoolSize the client was configured with, per server.",
		}),
		CheckoutWait: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "mongo_pool_checkout_wait_seconds",
			Help:    "Time an operation waited to check a connection out of the pool.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs .. ~26s
		}),
		CheckoutFailures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "mongo_pool_checkout_failures_total",
			Help: "Connection checkouts that failed, by reason.",
		}, []string{"reason"}),
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
		case event.ConnectionCheckedOut:
			m.PoolInUse.Inc()
			m.CheckoutWait.Observe(e.Duration.Seconds())
			if m.OnCheckout != nil {
				m.OnCheckout(e.Duration, false)
			}
		case event.ConnectionCheckedIn:
			m.PoolInUse.Dec()
		case event.ConnectionCheckOutFailed:
			m.CheckoutFailures.WithLabelValues(e.Reason).Inc()
			m.CheckoutWait.Observe(e.Duration.Seconds())
			if m.OnCheckout != nil {
				m.OnCheckout(e.Duration, true)
			}
		}
	}}
}

// CommandMonitor counts round trips; next, if not nil, sees every event too
// (tests chain their own counter behind it).
func (m *Mongo) CommandMonitor(next *event.CommandMonitor) *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			if next != nil && next.Started != nil {
				next.Started(ctx, e)
			}
		},
		Succeeded: func(ctx context.Context, e *event.CommandSucceededEvent) {
			m.Commands.WithLabelValues(e.CommandName, "ok").Inc()
			m.CommandDuration.WithLabelValues(e.CommandName).Observe(e.Duration.Seconds())
			if next != nil && next.Succeeded != nil {
				next.Succeeded(ctx, e)
			}
		},
		Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
			m.Commands.WithLabelValues(e.CommandName, "error").Inc()
			m.CommandDuration.WithLabelValues(e.CommandName).Observe(e.Duration.Seconds())
			if next != nil && next.Failed != nil {
				next.Failed(ctx, e)
			}
		},
	}
}
