// Package app wires the service together from a parsed configuration: the
// MongoDB client, the scorer, the consumer, metrics and health. The demo
// builds it too, so it runs production's code.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/consumer/adaptive"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/limiter"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/pkg/serverclock"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Options are what the caller brings besides the configuration.
type Options struct {
	Logger        *slog.Logger // default: discard
	Version       string       // for scorerefresh_build_info
	Revision      string
	Monitor       *event.CommandMonitor                       // sees every command after the metrics (the bench measures with it)
	Scorer        func(db *mongo.Database) scoring.Scorer     // a team's own instead of the rules or SCORER_URL
	WrapRefresher func(consumer.Refresher) consumer.Refresher // wraps the scorer: the bench's faults
	Clock         clock.Clock                                 // to wait and time with (default: the wall clock); leases follow Service.Clock
	Traits        *servertraits.Traits                        // instead of asking the server: tests run MongoDB's paths on FerretDB
}

// Service is a wired, not yet running, scorerefresh.
type Service struct {
	cfg      config.Config
	log      *slog.Logger
	Client   *mongo.Client
	DB       *mongo.Database
	Colls    consumer.Collections
	Rules    *scoring.Rules
	Registry *prometheus.Registry
	Metrics  *metrics.Consumer
	Mongo    *metrics.Mongo
	SLI      *metrics.SLI
	Sampler  *metrics.Sampler
	Health   *metrics.Health
	Consumer *consumer.Consumer
	// Clock is the MongoDB server's clock as estimated from here: leases,
	// backoffs and refreshedAt follow it, so replicas agree on them.
	Clock  *serverclock.Clock
	Traits *servertraits.Traits // what the server turned out to be, shared by the consumer and the scorer

	clock       clock.Clock // Options.Clock
	unreachable bool        // ping's: when to ask the server again what it is
	probedAt    time.Time
	server      *metrics.Server   // nil when METRICS_ADDR is empty
	adaptive    *adaptive.Limiter // nil unless ADAPTIVE_CONCURRENCY
}

// New loads the rules, connects to MongoDB (lazily) and builds the pipeline.
func New(ctx context.Context, cfg config.Config, opts Options) (_ *Service, err error) {
	local := clock.Or(opts.Clock)
	// Driver errors logged by any part of the service may quote the URI.
	log := slog.New(redact.Handler(cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).Handler(), cfg.MongoURI))
	reg := metrics.NewRegistry()
	rules, err := loadRules(cfg)
	if err != nil {
		return nil, err
	}
	metrics.NewBuildInfo(reg, opts.Version, opts.Revision, runtime.Version())
	s := &Service{
		cfg:      cfg,
		log:      log,
		Rules:    rules,
		Registry: reg,
		Mongo:    metrics.NewMongo(reg),
		Metrics:  metrics.NewConsumer(reg),
		Health:   metrics.NewHealth(local),
		clock:    local,
	}
	limit := s.newLimiter()
	if err := s.connect(opts.Monitor, opts.Traits); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Client.Disconnect(ctx)
		}
	}()
	// The oldest entry ages by the server's clock, as leases do: a host
	// whose clock is minutes fast must not page about a queue that is fine.
	s.SLI = metrics.NewSLI(reg, s.Clock)
	s.Sampler = metrics.NewSampler(metrics.SamplerConfig{
		Queue: s.Colls.Queue, DeadLetter: s.Colls.DeadLetter, Interval: cfg.SLIInterval, Clock: local,
	}, s.SLI, s.Metrics, log)
	if err = s.refuseMisreadFilters(ctx); err != nil {
		return nil, err
	}
	scorer, err := s.newScorer(opts.Scorer)
	if err != nil {
		return nil, err
	}
	s.newConsumer(limit, s.newRefresher(scorer, opts.WrapRefresher))
	if cfg.MetricsAddr != "" {
		// Bound here, not in Run, so a taken port fails at boot and callers
		// (tests, the demo) know the address before the service runs.
		if s.server, err = metrics.Listen(cfg.MetricsAddr, metrics.Handler(reg, s.Health)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// loadRules: the rules file, the built-in rules, or none with an external
// scorer (the doctor then has no source collections to check).
func loadRules(cfg config.Config) (*scoring.Rules, error) {
	switch {
	case cfg.ScorerURL != "":
		return &scoring.Rules{Source: "SCORER_URL (an external scorer)"}, nil
	case cfg.ScoringRules != "":
		return scoring.LoadRules(cfg.ScoringRules)
	}
	return scoring.DefaultRules(), nil
}

// refuseMisreadFilters refuses rules filtering with an operator the server
// answers wrongly ($elemMatch on FerretDB), so counting the wrong documents
// silently. Only rules with a filter wait (10 s at most) for the server.
func (s *Service) refuseMisreadFilters(ctx context.Context) error {
	if !slices.ContainsFunc(s.Rules.Components, func(c scoring.Component) bool { return len(c.Filter) > 0 }) {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Traits.Probe(pctx, s.DB); err != nil {
		s.log.Warn("cannot ask the server what it is; the rules' filters are not checked against what it answers wrongly", "err", err)
		return nil
	}
	return s.Rules.RefuseOperators(s.Traits.MisreadOperators(), "FerretDB "+s.Traits.Info().FerretDB)
}

// newLimiter: fixed at REFRESH_CONCURRENCY, or adaptive below it.
func (s *Service) newLimiter() consumer.Limiter {
	if !s.cfg.AdaptiveConcurrency {
		return consumer.NewFixedLimiter(s.cfg.RefreshConcurrency)
	}
	s.adaptive = adaptive.New(s.cfg.RefreshConcurrency, time.Second, limiter.PolicyConfig{}, s.Metrics, s.log, s.clock)
	s.Mongo.OnCheckout = s.adaptive.ObserveCheckout
	return s.adaptive
}

// newRefresher builds the refresher: batched recompute, guarded writes.
func (s *Service) newRefresher(scorer scoring.Scorer, wrap func(consumer.Refresher) consumer.Refresher) consumer.Refresher {
	store := scoring.NewStore(s.DB.Collection(s.cfg.ScoresCollection), scoring.StoreConfig{
		OnConflict: s.Metrics.OCCConflicts.Inc,
		OnSkip:     func(reason string) { s.Metrics.WritesSkipped.WithLabelValues(reason).Inc() },
		Logger:     s.log,
		Clock:      s.clock,
		Traits:     s.Traits,
	})
	var refresher consumer.Refresher = scoring.NewRefresher(scorer, store,
		scoring.WithRefreshObserver(func(st scoring.RefreshStats) {
			s.Metrics.RefreshBatchUsers.Observe(float64(st.Users))
			s.Metrics.RefreshRoundTrips.Add(float64(st.RoundTrips))
		}))
	if wrap != nil {
		refresher = wrap(refresher) // one by one unless it is a consumer.BatchRefresher
	}
	return refresher
}

// newScorer is what computes the scores: own, the rules, or SCORER_URL's.
func (s *Service) newScorer(own func(*mongo.Database) scoring.Scorer) (scoring.Scorer, error) {
	if own != nil {
		return own(s.DB), nil
	}
	if s.cfg.ScorerURL == "" {
		return scoring.NewRecomputer(s.DB, s.Rules, scoring.WithRecomputerLogger(s.log), scoring.WithRecomputerTraits(s.Traits)), nil
	}
	hs, err := scoring.NewHTTPScorer(scoring.HTTPScorerConfig{
		URL: s.cfg.ScorerURL, Token: s.cfg.ScorerToken, Timeout: s.cfg.ScorerTimeout, Conns: s.cfg.RefreshConcurrency,
		Observe: func(outcome string, seconds float64) {
			s.Metrics.ScorerRequests.WithLabelValues(outcome).Inc()
			s.Metrics.ScorerRequestDuration.Observe(seconds)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("SCORER_URL: %w", err)
	}
	return hs, nil
}

// newConsumer builds the pipeline, its loops reporting to health.
func (s *Service) newConsumer(limit consumer.Limiter, refresher consumer.Refresher) {
	// Readiness starts false: it is earned by a ping and a claim round.
	s.Health.Set("mongodb", false, "not yet reached")
	s.Health.Set("claiming", false, "no claim round yet")
	beat := s.Health.Watch("claim loop", WedgedAfter(s.cfg))
	var wakeups []consumer.WakeupSource
	if s.cfg.ChangeStreams == config.ChangeStreamsOff {
		s.log.Info("change streams off (CHANGE_STREAMS=off); waking on POLL_INTERVAL polling", "poll_interval", s.cfg.PollInterval.String())
	} else {
		wakeups = append(wakeups, consumer.NewChangeStreamSource(s.Colls.Queue, s.clock, s.Metrics, s.log))
	}
	s.Consumer = consumer.New(consumer.Config{
		ClaimWindow:      s.cfg.ClaimWindow,
		MaxUsersInFlight: s.cfg.MaxUsersInFlight,
		LeaseDuration:    s.cfg.LeaseDuration,
		PollInterval:     s.cfg.PollInterval,
		MaxAttempts:      s.cfg.MaxAttempts,
		ShutdownTimeout:  s.cfg.ShutdownTimeout,
		BatchSize:        cmp.Or(s.cfg.RefreshBatchSize, consumer.BatchAuto), // 0: the server decides
	}, s.Colls, consumer.Deps{
		Refresher:  refresher,
		Limiter:    limit,
		Metrics:    s.Metrics,
		Logger:     s.log,
		Clock:      s.clock,
		ServerTime: s.Clock,
		Wakeups:    wakeups,
		Traits:     s.Traits,
		// A condition's detail shows only while it fails.
		AfterFlush: func(err error) { s.Health.Set("acknowledging", err == nil, fmt.Sprint(err)) },
		AfterClaim: func(err error) {
			beat()
			s.Health.Set("claiming", err == nil, fmt.Sprint(err))
		},
	})
}

// MetricsAddr is where /metrics, /healthz and /readyz are served, or "".
func (s *Service) MetricsAddr() string {
	if s.server == nil {
		return ""
	}
	return s.server.Addr()
}

// WedgedAfter is how long the claim loop may be silent before /healthz
// fails: silence past its longest pass (consumer.LongestClaimPass) and two
// poll periods is a wedged loop, not a slow one. 282 s with the defaults.
func WedgedAfter(cfg config.Config) time.Duration {
	return consumer.LongestClaimPass(0) + 2*cfg.PollInterval
}

// RestartAfter is the longest a wedged replica runs before a liveness probe
// of period and failureThreshold restarts it: WedgedAfter, up to one period
// until the first failed probe and threshold − 1 more (402 s for 20 s × 6).
func RestartAfter(cfg config.Config, period time.Duration, failureThreshold int) time.Duration {
	return WedgedAfter(cfg) + time.Duration(failureThreshold)*period
}

// FleetConnections is the most connections one MongoDB server sees from
// replicas of cfg while a rollout surges one more (161 for 6 and the defaults).
func FleetConnections(cfg config.Config, replicas int) int {
	return (replicas + 1) * ConnectionsPerReplica(cfg)
}

// ShutdownBudget is the longest Run takes to return once ctx ends (SIGTERM),
// whatever MongoDB does: the consumer's shutdown, then the metrics server's.
// A shorter grace period kills the final flush: its leases wait out LEASE_DURATION.
func ShutdownBudget(cfg config.Config) time.Duration {
	return consumer.ShutdownBudget(0, cfg.ShutdownTimeout) + metrics.ServerShutdownTimeout
}

// Run serves metrics and health, keeps readiness and drains the queue until ctx ends, then shuts down.
func (s *Service) Run(ctx context.Context) error {
	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer func() { stopBG(); bg.Wait() }()
	var srvErr error
	if s.server != nil {
		s.log.Info("serving metrics and health", "addr", s.server.Addr())
		bg.Go(func() { srvErr = s.server.Serve(bgCtx) })
	}
	bg.Go(func() {
		s.ping(bgCtx)
		clock.Every(bgCtx, s.clock, 5*time.Second, s.ping)
	})
	bg.Go(func() { s.Sampler.Run(bgCtx) })
	if s.adaptive != nil {
		bg.Go(func() { s.adaptive.Run(bgCtx) })
	}

	bg.Go(func() { s.setup(bgCtx) })
	s.syncClock(ctx)
	bg.Go(func() {
		// Every 30 s: host clocks drift by well under a millisecond a minute.
		s.Clock.Run(bgCtx, 30*time.Second, func(err error) {
			s.log.Warn("reading the server's clock failed; keeping the last offset", "op", "clock sync", "err", err)
		})
	})

	s.log.Info("consumer starting", "config", s.cfg, "rules", s.Rules.Source, "components", len(s.Rules.Components))
	err := s.Consumer.Run(ctx)
	stopBG()
	bg.Wait()
	return errors.Join(err, srvErr)
}

// setup creates the indexes and logs the server's capabilities once it is reachable, retrying
// in the background: the consumer starts at once (its queries only get slower without indexes),
// and a start during an outage must not leave the queue unindexed. No deadline: MongoDB aborts
// a build whose createIndexes times out, and every replica would start it again for good.
func (s *Service) setup(ctx context.Context) {
	for attempt := 1; ; attempt++ {
		caps, err := consumer.EnsureIndexes(ctx, s.Colls, s.log)
		if err == nil {
			if !caps.TTLIndexes {
				s.Traits.Refused(servertraits.TTLIndexes)
			}
			if !caps.PartialIndexes {
				s.Traits.Refused(servertraits.PartialIndexes)
			}
			streams := "off (CHANGE_STREAMS=off)"
			if s.cfg.ChangeStreams != config.ChangeStreamsOff {
				// The probe opens a stream: with the setting off, not even that.
				probeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				streams = strconv.FormatBool(consumer.DetectChangeStreams(probeCtx, s.Colls.Queue))
				cancel()
			}
			s.log.Info("server capabilities", "change_streams", streams, "ttl_indexes", caps.TTLIndexes, "partial_indexes", caps.PartialIndexes)
			return
		}
		if ctx.Err() != nil {
			return
		}
		delay := consumer.Backoff{Base: time.Second, Max: time.Minute}.Delay(attempt)
		s.log.Warn("creating indexes failed: MongoDB unreachable; retrying", "op", "create indexes", "attempt", attempt, "retry_in", delay, "err", err)
		if clock.Sleep(ctx, s.clock, delay) != nil {
			return
		}
	}
}

// syncClock samples the server's clock before the consumer starts, so its
// first leases are on the server's time; the local clock stands in meanwhile.
func (s *Service) syncClock(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for range 3 {
		if _, err := s.Clock.Sync(sctx); err != nil {
			s.log.Warn("reading the server's clock failed; using the local clock until it succeeds", "op", "clock sync", "err", err)
			return
		}
	}
	if off := s.Clock.Offset(); off > time.Second || off < -time.Second {
		s.log.Warn("this host's clock differs from the MongoDB server's; leases and refreshedAt follow the server's", "offset", off.String())
	}
}

// ping keeps the "mongodb" readiness condition current, and asks the server
// what it is again after an outage (the client may now reach another primary)
// and every 5 minutes (a rolling upgrade changes versions without a failed ping).
func (s *Service) ping(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := s.Client.Ping(pctx, nil)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		s.Health.Set("mongodb", false, "ping failed: "+err.Error())
		s.unreachable = true
		return
	}
	s.Health.Set("mongodb", true, "")
	if !s.unreachable && clock.Since(s.clock, s.probedAt) < 5*time.Minute && !s.Traits.BackendUnknown() {
		return
	}
	pctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	changed, err := s.Traits.Reprobe(pctx, s.DB)
	if err != nil {
		return // asked again on the next ping
	}
	s.unreachable, s.probedAt = false, s.clock.Now()
	if changed {
		info := s.Traits.Info()
		s.log.Info("the server changed (a reconnect or an upgrade); what was learnt about it is asked again", "version", info.Version, "ferretdb", info.FerretDB, "sharded", info.Sharded)
	}
}

func (s *Service) Close(ctx context.Context) error { return s.Client.Disconnect(ctx) }

// The production refresher recomputes batches of users (REFRESH_BATCH_SIZE).
var _ consumer.BatchRefresher = (*scoring.Refresher)(nil)
