package app

import (
	"cmp"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/pkg/serverclock"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// PoolOverhead is the connections the pipeline uses besides refreshes: the
// claim loop, ack flush, lease renewal, SLI sampler and wake-up stream.
const PoolOverhead = 5

// PoolSize is the driver's maxPoolSize for cfg: one per refresh slot plus the overhead.
func PoolSize(cfg config.Config) uint64 { return uint64(cfg.RefreshConcurrency + PoolOverhead) }

// ClientOptions builds the driver options from the configuration. The pool is sized from the
// concurrency (the driver's default of 100 per replica is how a fleet runs a server out of
// connections), and maxConnecting is raised from its 2, at which a burst of refreshes queues for
// connections. No client-wide Timeout: each operation brings its own deadline, and the driver
// would send it as maxTimeMS on every command without one (index builds opt out).
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

// connect builds the client (contacting no server), the collections and the server's clock.
func (s *Service) connect(monitor *event.CommandMonitor, traits *servertraits.Traits) error {
	clientOpts := ClientOptions(s.cfg, s.Mongo).SetMonitor(s.Mongo.CommandMonitor(monitor))
	if need := ConnectionsPerReplica(s.cfg); s.cfg.ConnectionBudget != 0 && need > s.cfg.ConnectionBudget {
		s.log.Warn("this replica may open more MongoDB connections than MONGODB_CONNECTION_BUDGET; lower REFRESH_CONCURRENCY or raise the budget",
			"budget", s.cfg.ConnectionBudget, "max_per_server", need, "pool", PoolSize(s.cfg), "monitoring", MonitoringConnections,
			"hosts", len(clientOpts.Hosts), "refresh_concurrency", s.cfg.RefreshConcurrency)
	}
	client, err := mongo.Connect(clientOpts)
	if err != nil {
		// The driver quotes what it could not parse, a secret option value say.
		return redact.Error(fmt.Errorf("configuring MongoDB client for %s: %w", redact.URI(s.cfg.MongoURI), err), s.cfg.MongoURI)
	}
	// Every read goes to the primary whatever the URI asks: a refresh from a
	// lagging secondary would acknowledge events whose source writes it never saw.
	s.Client = client
	s.DB = client.Database(s.cfg.Database, options.Database().SetReadPreference(readpref.Primary()))
	if rp := clientOpts.ReadPreference; rp != nil && rp.Mode() != readpref.PrimaryMode {
		s.log.Warn("MONGODB_URI asks for a read preference other than primary; scorerefresh reads from the primary regardless", "uri_read_preference", rp.Mode().String())
	}
	s.Clock = serverclock.New(s.DB, s.clock)
	s.Traits = cmp.Or(traits, servertraits.New())
	s.Colls = consumer.Collections{
		Queue:      s.DB.Collection(s.cfg.QueueCollection),
		Claims:     s.DB.Collection(s.cfg.ClaimsCollection),
		DeadLetter: s.DB.Collection(s.cfg.DeadLetterCollection),
	}
	return nil
}

// MonitoringConnections is what the driver opens per server besides the pool (heartbeat, RTT).
const MonitoringConnections = 2

// ConnectionsPerReplica is the most connections one replica opens to one server.
func ConnectionsPerReplica(cfg config.Config) int { return int(PoolSize(cfg)) + MonitoringConnections }
