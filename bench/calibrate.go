package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// calibration is what the server costs, measured on the direct connection
// before the rows.
type calibration struct {
	RoundTrips float64 `json:"round_trips_per_refresh"`
	ServerMs   float64 `json:"server_ms_per_query"`
	QPS        float64 `json:"max_queries_per_second"`
	Bounds     bounds  `json:"bounds"` // at the run's RTT and REFRESH_CONCURRENCY
}

// bounds are the two ceilings of a drain of distinct users (refreshes per
// second), from the planner's arithmetic.
type bounds struct {
	Latency float64 `json:"latency"` // every slot busy, each refresh its round trips of RTT + server time
	Server  float64 `json:"server"`  // the server's queries per second over a refresh's round trips
	Lower   float64 `json:"lower"`
}

func (b bounds) String() string {
	return fmt.Sprintf("latency %.1f/s, server %.1f/s", b.Latency, b.Server)
}

// bounds at rtt with slots refreshes at once.
func (c calibration) bounds(rtt time.Duration, slots int) bounds {
	latency := planner.LatencyCeiling(float64(slots), c.RoundTrips, rtt.Seconds()+c.ServerMs/1000)
	server := planner.ServerCeiling(c.QPS, c.RoundTrips)
	return bounds{Latency: latency, Server: server, Lower: min(latency, server)}
}

func (b *Bench) calibrate(ctx context.Context) (calibration, error) {
	sequential, level := pick(size(b.cfg.Short), 200, 10), pick(size(b.cfg.Short), 5*time.Second, 500*time.Millisecond)
	var commands, nanos atomic.Int64
	monitor := &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		commands.Add(1)
		nanos.Add(int64(e.Duration))
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(b.srv.URI).SetMaxPoolSize(200).SetMonitor(monitor))
	if err != nil {
		return calibration{}, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(b.nextDatabase("calibrate"))
	defer func() { _ = db.Drop(context.Background()) }()
	_, rules, err := b.rulesFile(scorerRules)
	if err == nil {
		err = b.seedSources(ctx, db)
	}
	if err != nil {
		return calibration{}, err
	}
	refresher := scoring.NewRefresher(scoring.NewRecomputer(db, rules), scoring.NewStore(db.Collection("user_scores"), scoring.StoreConfig{}))
	var next atomic.Int64
	refresh := func(ctx context.Context) error {
		return refresher.Refresh(ctx, userName(int(next.Add(1))%b.pool()), time.Now())
	}
	for i := range sequential + 5 {
		if i == 5 { // the first few warm the server up
			commands.Store(0)
			nanos.Store(0)
		}
		if err = refresh(ctx); err != nil {
			return calibration{}, err
		}
	}
	c := calibration{RoundTrips: float64(commands.Load()) / float64(sequential)}
	c.ServerMs = ms(time.Duration(nanos.Load())) / float64(max(commands.Load(), 1))
	for _, workers := range []int{4, 16, 48} {
		commands.Store(0)
		wctx, cancel := context.WithTimeout(ctx, level)
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for wctx.Err() == nil {
					_ = refresh(wctx)
				}
			})
		}
		wg.Wait()
		cancel()
		c.QPS = max(c.QPS, float64(commands.Load())/time.Since(start).Seconds())
	}
	c.Bounds = c.bounds(b.cfg.RTT, b.cfg.Concurrency)
	return c, ctx.Err()
}
