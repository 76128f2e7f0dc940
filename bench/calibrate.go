package bench

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/scoring"
)

// calibration is what the server costs on this machine, measured on a direct
// connection (no proxy) with the bench's rules and data.
type calibration struct {
	// Kinds is the server's time per query of each kind, sequential and
	// uncontended: the round trip on loopback is tens of microseconds, the
	// rest is the server (and the driver's encoding, which MongoDB would cost
	// too).
	Kinds []queryKind `json:"query_kinds"`
	// RoundTrips is the commands per refresh (12 components + OCC read + write).
	RoundTrips float64 `json:"round_trips_per_refresh"`
	// ServerMs is the mean server time of one refresh query.
	ServerMs float64 `json:"server_ms_per_query"`
	// QPS is the most refresh queries per second the server answered, with
	// Workers refreshes at once (the best of the levels tried).
	QPS     float64    `json:"max_queries_per_second"`
	Workers int        `json:"workers_at_max"`
	Levels  []qpsLevel `json:"qps_levels"`
	RTTms   float64    `json:"rtt_ms"`
	// ProxyRTTms is a ping's round trip through the proxy at RTTms with
	// Concurrency pings at once: the network as the consumers see it (the proxy's
	// goroutines, timers and the driver add a little to the nominal RTT).
	ProxyRTTms  float64       `json:"proxy_rtt_ms"`
	Concurrency int           `json:"concurrency"`
	Bounds      refreshBounds `json:"bounds"`
}

type queryKind struct {
	Kind   string  `json:"kind"` // command on collection
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
}

type qpsLevel struct {
	Workers int     `json:"workers"`
	QPS     float64 `json:"qps"`
}

// refreshBounds are the two ceilings on refreshes per second.
type refreshBounds struct {
	// Latency is REFRESH_CONCURRENCY / (round trips × (RTT + server time)).
	Latency float64 `json:"latency"`
	// Server is queries per second / round trips.
	Server float64 `json:"server"`
	Lower  float64 `json:"lower"`
	Which  string  `json:"binding"` // "latency" or "server"
}

// bounds at a nominal rtt: the proxy's measured overhead is added to it.
func (c calibration) bounds(rtt time.Duration, concurrency int) refreshBounds {
	overhead := max(0, c.ProxyRTTms-c.RTTms) / 1000
	b := refreshBounds{
		Latency: float64(concurrency) / (c.RoundTrips * (rtt.Seconds() + overhead + c.ServerMs/1000)),
		Server:  c.QPS / c.RoundTrips,
	}
	b.Lower, b.Which = b.Latency, "latency"
	if b.Server < b.Latency {
		b.Lower, b.Which = b.Server, "server"
	}
	return b
}

// kindRecorder times commands by name and collection.
type kindRecorder struct {
	mu      sync.Mutex
	started map[int64]string
	total   map[string]time.Duration
	count   map[string]int
	all     atomic.Int64
}

func newKindRecorder() *kindRecorder {
	return &kindRecorder{started: map[int64]string{}, total: map[string]time.Duration{}, count: map[string]int{}}
}

func (k *kindRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			coll := ""
			if v, err := e.Command.LookupErr(e.CommandName); err == nil {
				coll, _ = v.StringValueOK()
			}
			k.mu.Lock()
			k.started[e.RequestID] = e.CommandName + " " + coll
			k.mu.Unlock()
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { k.done(e.RequestID, e.Duration) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { k.done(e.RequestID, e.Duration) },
	}
}

func (k *kindRecorder) done(id int64, d time.Duration) {
	k.all.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	kind := k.started[id]
	delete(k.started, id)
	k.total[kind] += d
	k.count[kind]++
}

func (k *kindRecorder) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.total, k.count = map[string]time.Duration{}, map[string]int{}
	k.all.Store(0)
}

// calibrate measures the server: first `sequential` first-time refreshes one
// after another (time per query of each kind), then refreshes with several
// workers at once for d per level (queries per second).
func (b *Bench) calibrate(ctx context.Context, sequential int, d time.Duration) (calibration, error) {
	rec := newKindRecorder()
	db, done, err := b.calibrationDatabase(ctx, "calibrate", options.Client().SetMaxPoolSize(200).SetMaxConnecting(16).SetMonitor(rec.monitor()))
	if err != nil {
		return calibration{}, err
	}
	defer done()
	refresher := scoring.NewRefresher(scoring.NewRecomputer(db, b.rules), scoring.NewStore(db.Collection("user_scores"), scoring.StoreConfig{}))
	next := atomic.Int64{}
	refresh := func() error {
		// First-time refreshes of users of the pool, as in a diverse drain.
		return refresher.Refresh(ctx, userName(int(next.Add(1))%b.cfg.Pool), time.Now())
	}
	// Warm up: connections, FerretDB's caches, the $max fallback detection.
	if err := repeat(5, refresh); err != nil {
		return calibration{}, err
	}
	rec.reset()
	if err := repeat(sequential, refresh); err != nil {
		return calibration{}, err
	}
	var c calibration
	c.Kinds, c.RoundTrips, c.ServerMs = rec.perQuery(sequential)

	// Throughput: the most queries per second at any of a few levels of
	// concurrency (more workers than the server has cores, so it is busy).
	// Each refresh runs to its end past the level's deadline.
	c.Levels, err = throughput(ctx, []int{4, 16, 48}, d, rec.reset, func() float64 { return float64(rec.all.Load()) },
		func(context.Context) { _ = refresh() })
	c.QPS, c.Workers = best(c.Levels)
	if err != nil {
		return c, err
	}
	c.RTTms = ms(b.cfg.RTT)
	c.Concurrency = b.cfg.Concurrency
	if c.ProxyRTTms, err = b.proxyRTT(ctx, b.cfg.RTT, b.cfg.Concurrency); err != nil {
		return c, err
	}
	c.Bounds = c.bounds(b.cfg.RTT, b.cfg.Concurrency)
	return c, nil
}

// perQuery is the recorded time per query of each kind, the queries per
// refresh of `refreshes` refreshes, and the mean time of a query.
func (k *kindRecorder) perQuery(refreshes int) (kinds []queryKind, roundTrips, meanMs float64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var sum time.Duration
	n := 0
	for kind, t := range k.total {
		cnt := k.count[kind]
		kinds = append(kinds, queryKind{Kind: kind, Count: cnt, MeanMs: ms(t) / float64(cnt)})
		sum += t
		n += cnt
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].Kind < kinds[j].Kind })
	return kinds, float64(n) / float64(refreshes), ms(sum) / float64(n)
}

// calibrationDatabase is a fresh database with the bench's sources on a
// client of its own (direct, no proxy); done drops it and disconnects.
func (b *Bench) calibrationDatabase(ctx context.Context, name string, opts *options.ClientOptions) (db *mongo.Database, done func(), err error) {
	client, err := mongo.Connect(opts.ApplyURI(b.srv.URI))
	if err != nil {
		return nil, nil, err
	}
	db = client.Database(b.nextDatabase(name))
	done = func() {
		db.Drop(context.Background())
		client.Disconnect(context.Background())
	}
	if err := seedSources(ctx, db, b.cfg.Sources, b.cfg.Pool, b.cfg.Seed); err != nil {
		done()
		return nil, nil, err
	}
	return db, done, nil
}

// repeat calls f n times, one after another, until it fails.
func repeat(n int, f func() error) error {
	for range n {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// throughput runs work in a loop on each level's number of workers at once
// for d, and returns count's growth per second at each level (reset before
// each).
func throughput(ctx context.Context, levels []int, d time.Duration, reset func(), count func() float64, work func(context.Context)) ([]qpsLevel, error) {
	var out []qpsLevel
	for _, workers := range levels {
		reset()
		wctx, cancel := context.WithTimeout(ctx, d)
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for wctx.Err() == nil {
					work(wctx)
				}
			})
		}
		wg.Wait()
		cancel()
		out = append(out, qpsLevel{Workers: workers, QPS: count() / time.Since(start).Seconds()})
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}

// best is the highest rate of the levels and its workers.
func best(levels []qpsLevel) (qps float64, workers int) {
	for _, l := range levels {
		if l.QPS > qps {
			qps, workers = l.QPS, l.Workers
		}
	}
	return qps, workers
}

// proxyRTT is the mean round trip of a ping through the proxy at rtt, with
// concurrency pings at once on one client (as a consumer's refreshes are).
func (b *Bench) proxyRTT(ctx context.Context, rtt time.Duration, concurrency int) (float64, error) {
	b.proxy.SetDelay(rtt/2, rtt/2)
	defer b.proxy.SetDelay(0, 0)
	client, err := mongo.Connect(options.Client().ApplyURI(b.srv.uriVia(b.proxy.Addr())).
		SetMaxPoolSize(uint64(concurrency + 5)).SetMinPoolSize(uint64(concurrency)))
	if err != nil {
		return 0, err
	}
	defer client.Disconnect(context.Background())
	db := client.Database("admin")
	ping := func(n int) (time.Duration, error) {
		var wg sync.WaitGroup
		var total atomic.Int64
		var failed atomic.Value
		for range concurrency {
			wg.Go(func() {
				for range n {
					start := time.Now()
					if err := db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
						failed.Store(err)
						return
					}
					total.Add(int64(time.Since(start)))
				}
			})
		}
		wg.Wait()
		if err, ok := failed.Load().(error); ok {
			return 0, err
		}
		return time.Duration(total.Load() / int64(concurrency*n)), nil
	}
	if _, err := ping(3); err != nil { // connections
		return 0, err
	}
	d, err := ping(max(5, int(2*time.Second/max(rtt, time.Millisecond))))
	return ms(d), err
}

// describe prints the calibration.
func (c calibration) describe(logf func(string, ...any)) {
	kinds := slices.Clone(c.Kinds)
	for _, k := range kinds {
		logf("    %-28s %5d × %6.2f ms", k.Kind, k.Count, k.MeanMs)
	}
	logf("    %.1f round trips per refresh, %.2f ms server time per query", c.RoundTrips, c.ServerMs)
	for _, l := range c.Levels {
		logf("    %2d refreshes at once: %6.0f queries/s", l.Workers, l.QPS)
	}
	logf("    a ping through the proxy at RTT %.0f ms, %d at once: %.1f ms", c.RTTms, c.Concurrency, c.ProxyRTTms)
	logf("    bounds at RTT %.1f ms (measured), REFRESH_CONCURRENCY %d: latency %.1f refreshes/s, server %.1f refreshes/s -> %s-bound (%.1f/s)",
		c.ProxyRTTms, c.Concurrency, c.Bounds.Latency, c.Bounds.Server, c.Bounds.Which, c.Bounds.Lower)
	if math.IsNaN(c.Bounds.Lower) {
		logf("    (calibration produced no numbers)")
	}
}
