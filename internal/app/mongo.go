package app

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
)

// PoolOverhead is the connections the pipeline uses besides refreshes: the
// claim loop, the ack flush, lease renewal, the SLI sampler and a wake-up
// stream may each hold one at the same moment.
const PoolOverhead = 5

// PoolSize returns the driver's maxPoolSize for cfg: one connection per
// refresh slot plus the overhead, never unbounded. Across a fleet the server
// sees at most replicas × PoolSize connections (plus the driver's monitoring
// connections, two per server per client).
func PoolSize(cfg config.Config) uint64 {
	return uint64(cfg.RefreshConcurrency + PoolOverhead)
}

// ClientOptions builds the driver options from the configuration. The pool is
// sized from the concurrency (the driver's default of 100 per replica is how a
// fleet runs a server out of connections), and maxConnecting is raised from
// its default of 2, which makes a burst of refreshes queue for connection
// establishment one or two at a time. There is no client-wide Timeout: each
// operation brings its own deadline, and the driver would send a client
// Timeout as maxTimeMS on every command without one (index builds opt out
// of it and of timeoutMS in the URI: consumer.EnsureIndexes).
func ClientOptions(cfg config.Config, m *metrics.Mongo) *options.ClientOptions {
	pool := PoolSize(cfg)
	m.PoolMaxSize.Set(float64(pool))
	return options.Client().
		ApplyURI(cfg.MongoURI).
		SetAppName("scorerefresh").
		SetMaxPoolSize(pool).
		SetMinPoolSize(min(pool, 4)).
		SetMaxConnecting(min(pool, 8)).
		SetPoolMonitor(m.PoolMonitor()).
		SetMonitor(m.CommandMonitor(nil))
}

// connect builds the client (lazily: no server is contacted). The driver's
// error quotes what it could not parse, an option value say, without saying
// it is secret: the error is redacted against the URI before it goes
// anywhere.
func connect(cfg config.Config, opts *options.ClientOptions) (*mongo.Client, error) {
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("configuring MongoDB client for %s: %w", redact.URI(cfg.MongoURI), err), cfg.MongoURI)
	}
	return client, nil
}

// MonitoringConnections is what the driver opens per server besides the
// pool: one heartbeat and one RTT-monitoring connection.
const MonitoringConnections = 2

// ConnectionsPerReplica is the most connections one replica opens to one
// server: its pool plus the driver's monitoring.
func ConnectionsPerReplica(cfg config.Config) int {
	return int(PoolSize(cfg)) + MonitoringConnections
}

// warnConnectionBudget logs once at boot when this replica could open more
// connections than MONGODB_CONNECTION_BUDGET allows. A fleet of N replicas
// needs N × ConnectionsPerReplica of the server's connection limit (per
// member of a replica set), plus whatever else connects to it.
func warnConnectionBudget(cfg config.Config, opts *options.ClientOptions, log *slog.Logger) {
	need := ConnectionsPerReplica(cfg)
	if cfg.ConnectionBudget == 0 || need <= cfg.ConnectionBudget {
		return
	}
	log.Warn("this replica may open more MongoDB connections than MONGODB_CONNECTION_BUDGET; lower REFRESH_CONCURRENCY or raise the budget",
		"budget", cfg.ConnectionBudget, "max_per_server", need, "pool", PoolSize(cfg), "monitoring", MonitoringConnections,
		"hosts", len(opts.Hosts), "refresh_concurrency", cfg.RefreshConcurrency)
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}
