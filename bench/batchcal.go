//go:build !oldrelease

package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/scoring"
)

// batchCal is what batched refreshes of one size cost the server, measured
// as the per-user calibration is: on a direct connection (no proxy), with
// the rules and data the runs use. Its capacity is the server's ceiling for
// a drain at that batch size.
type batchCal struct {
	Rules     string `json:"rules"`
	BatchSize int    `json:"batch_size"`
	// RoundTrips is commands per batch: C − M + M·N + 2 on FerretDB, whose
	// missing $max accumulator makes each max component one query per user.
	RoundTrips float64 `json:"round_trips_per_batch"`
	BatchMs    float64 `json:"ms_per_batch"`        // one batch alone, sequential
	ServerMs   float64 `json:"server_ms_per_query"` // BatchMs / RoundTrips
	// Capacity is the most users per second refreshed with Workers batches
	// at once, the best of the levels tried.
	Capacity float64    `json:"max_users_per_second"`
	Workers  int        `json:"workers_at_max"`
	Levels   []qpsLevel `json:"users_per_second_levels"` // QPS holds users/s here
}

// calibrateBatch measures batches of size users with the rules at path.
func (b *Bench) calibrateBatch(ctx context.Context, rulesName, path string, size int, sequential int, d time.Duration) (batchCal, error) {
	c := batchCal{Rules: rulesName, BatchSize: size}
	rules, err := scoring.LoadRules(path)
	if err != nil {
		return c, err
	}
	db, done, err := b.calibrationDatabase(ctx, fmt.Sprintf("calbatch%d", size), options.Client().SetMaxPoolSize(100))
	if err != nil {
		return c, err
	}
	defer done()
	var trips, users atomic.Int64
	refresher := scoring.NewRefresher(scoring.NewRecomputer(db, rules), scoring.NewStore(db.Collection("user_scores"), scoring.StoreConfig{}),
		scoring.WithRefreshObserver(func(s scoring.RefreshStats) {
			trips.Add(int64(s.RoundTrips))
			users.Add(int64(s.Users))
		}))
	batch := batchRefresher(refresher, size, max(b.cfg.Pool, size))
	// Warm up: connections, caches, and the Recomputer's one refused $max.
	if err := repeat(2, func() error { return batch(ctx) }); err != nil {
		return c, err
	}
	n := max(3, sequential/size)
	trips.Store(0)
	start := time.Now()
	if err := repeat(n, func() error { return batch(ctx) }); err != nil {
		return c, err
	}
	c.BatchMs = ms(time.Since(start)) / float64(n)
	c.RoundTrips = float64(trips.Load()) / float64(n)
	c.ServerMs = c.BatchMs / c.RoundTrips
	levels := []int{4, 16}
	if b.cfg.Short {
		// 16 many-statement writers at once can exhaust the embedded
		// server's connections (FerretDB holds one per statement of an
		// update until the command ends) and hang it: the smoke run only
		// needs the figures to exist.
		levels = levels[:1]
	}
	c.Levels, err = throughput(ctx, levels, d, func() { users.Store(0) }, func() float64 { return float64(users.Load()) },
		func(wctx context.Context) { _ = batch(wctx) }) // errors past the deadline are the deadline
	c.Capacity, c.Workers = best(c.Levels)
	return c, err
}

// batchRefresher refreshes the next size users of a pool of pool users in
// one batch (one at a time when size is 1).
func batchRefresher(refresher *scoring.Refresher, size, pool int) func(context.Context) error {
	var next atomic.Int64
	return func(ctx context.Context) error {
		names := make([]string, size)
		for i := range names {
			names[i] = userName(int(next.Add(1)) % pool)
		}
		if size == 1 {
			return refresher.Refresh(ctx, names[0], time.Now())
		}
		for u, err := range refresher.RefreshBatch(ctx, names, time.Now()) {
			if err != nil {
				return fmt.Errorf("user %s: %w", u, err)
			}
		}
		return nil
	}
}

// configBounds are the two ceilings of one configuration's drain, in users
// (entries of a diverse backlog) per second.
type configBounds struct {
	// Latency: users that can be in refresh at once, min(REFRESH_CONCURRENCY
	// × batch size, MAX_USERS_IN_FLIGHT), over a batch's round trips (its
	// queries and the mark that it started) at the RTT the proxy gives.
	Latency float64 `json:"latency"`
	Server  float64 `json:"server"` // the batch calibration's capacity
	Lower   float64 `json:"lower"`
	Which   string  `json:"binding"`
}

func (b *Bench) configBounds(cal batchCal, c batchConfig, rtt time.Duration) configBounds {
	inFlight := float64(min(c.slots(b.cfg.Concurrency)*c.perSlot(), c.MaxUsersInFlight))
	// The proxy's measured overhead over its nominal RTT, as in
	// calibration.bounds.
	overhead := max(0, b.cal.ProxyRTTms-b.cal.RTTms)
	perTrip := ms(rtt) + overhead + cal.ServerMs
	x := configBounds{Latency: fin(inFlight / ((cal.RoundTrips + 1) * perTrip / 1000)), Server: cal.Capacity}
	x.Lower, x.Which = x.Latency, "latency"
	if x.Server < x.Latency {
		x.Lower, x.Which = x.Server, "server"
	}
	return x
}
