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

// CommandMonitor counts round trips; next, if not nil, sees every event too
// (tests chain their own counter behind it).
func (m *Mongo) CommandMonitor(next *event.CommandMonitor) *event.CommandMonitor {
	if next == nil {
		next = &event.CommandMonitor{}
	}
	count := func(name, outcome string, d time.Duration) {
		m.Commands.WithLabelValues(name, outcome).Inc()
		m.CommandDuration.WithLabelValues(name).Observe(d.Seconds())
	}
	return &event.CommandMonitor{
		Started: next.Started, // the driver skips a nil one
		Succeeded: func(ctx context.Context, e *event.CommandSucceededEvent) {
			count(e.CommandName, "ok", e.Duration)
			if next.Succeeded != nil {
				next.Succeeded(ctx, e)
			}
		},
		Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
			count(e.CommandName, "error", e.Duration)
			if next.Failed != nil {
				next.Failed(ctx, e)
			}
		},
	}
}
