package bench

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/backlog"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/examplescorer"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/faultproxy"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// The consumers and the scorers a row may run.
const (
	consumerReference    = "reference"
	consumerScorerefresh = "scorerefresh"

	scorerRules    = "rules"    // rules/bench.yaml over seedSources' three collections (14 round trips a refresh)
	scorerInstant  = "instant"  // refreshes succeed at once: the figures are the claim and ack path's
	scorerActivity = "activity" // rules/activity.yaml over the demo's user_activity: the HTTP scorer's score as rules
	scorerHTTP     = "http"     // examples/httpscorer over SCORER_URL, behind a proxy of its own
	scorerCount12  = "count12"  // rules/count12.yaml: 14 round trips per refresh, and per batch, on any server
)

// rulesFS holds the scorers' rules; bench.yaml has the shape of the production scorer this was built for.
//
//go:embed rules
var rulesFS embed.FS

// rulesFile writes the rules of scorer into the results (the service loads
// them as SCORING_RULES) and returns its path.
func (b *Bench) rulesFile(scorer string) (string, *scoring.Rules, error) {
	name, file := "rules.yaml", "bench.yaml"
	if scorer == scorerActivity || scorer == scorerCount12 {
		name, file = "rules-"+scorer+".yaml", scorer+".yaml"
	}
	text, err := rulesFS.ReadFile("rules/" + file)
	path, absErr := filepath.Abs(filepath.Join(b.cfg.Out, name))
	if err = errors.Join(err, absErr); err == nil {
		err = os.WriteFile(path, text, 0o644)
	}
	var rules *scoring.Rules
	if err == nil {
		rules, err = scoring.LoadRules(path)
	}
	return path, rules, err
}

// serviceConfig is the configuration scorerefresh (and the reference's
// client) gets: the bench's environment, the connection through the proxy,
// the scorer, then the row's environment, which wins.
func (b *Bench) serviceConfig(db string, row Row, scorerURL string) (config.Config, *scoring.Rules, error) {
	environ := append(b.cfg.Environ[:len(b.cfg.Environ):len(b.cfg.Environ)],
		"MONGODB_URI="+b.srv.viaProxy(b.proxy.Addr()), "MONGODB_DATABASE="+db,
		"METRICS_ADDR=127.0.0.1:0", "LOG_LEVEL=warn", fmt.Sprintf("REFRESH_CONCURRENCY=%d", b.cfg.Concurrency))
	var rules *scoring.Rules
	if scorerURL != "" {
		environ = append(environ, "SCORER_URL="+scorerURL, "SCORER_TOKEN=bench", "SCORING_RULES=")
	} else {
		path, r, err := b.rulesFile(row.Scorer)
		if err != nil {
			return config.Config{}, nil, err
		}
		environ, rules = append(environ, "SCORING_RULES="+path), r
	}
	cfg, err := config.Parse(append(environ, row.Env...))
	return cfg, rules, err
}

// running is a consumer being measured. figures' done is the entries
// acknowledged (the reference: whose user's refresh completed; it acks per
// batch); capacity is scorerefresh_drain_capacity summed (0: the reference).
type running struct {
	figures func() (done, refreshes, deadLettered, capacity float64)
	cancel  context.CancelFunc
	run     errgroup.Group
	closers []func(context.Context) // once run has ended, last first
	recorder
}

func (r *running) stop() error {
	r.cancel()
	err := r.run.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, undo := range slices.Backward(r.closers) {
		undo(ctx)
	}
	return err
}

// startConsumer starts row's consumer: in-process instances of the service,
// each with its own client, pool and registry (replicas sharing only the
// queue), or the reference.
func (b *Bench) startConsumer(ctx context.Context, db string, row Row) (*running, error) {
	runCtx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, recorder: recorder{n: map[string]float64{}}}
	var scorerURL string
	if row.Scorer == scorerHTTP {
		url, stop, err := b.startHTTPScorer(ctx, db, row.RTT)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("starting the HTTP scorer: %w", err)
		}
		scorerURL, r.closers = url, append(r.closers, func(context.Context) { stop() })
	}
	cfg, rules, err := b.serviceConfig(db, row, scorerURL)
	if err == nil && row.Consumer == consumerReference {
		err = b.startReference(runCtx, r, cfg, rules)
	} else if err == nil {
		err = b.startService(ctx, runCtx, r, cfg, row)
	}
	if err != nil {
		_ = r.stop()
		return nil, err
	}
	return r, nil
}

func (b *Bench) startService(ctx, runCtx context.Context, r *running, cfg config.Config, row Row) error {
	var svcs []*app.Service
	for range row.Replicas {
		opts := app.Options{Logger: b.svcLog, Version: "bench", Monitor: r.monitor(),
			// Every refresh fails while a step says so; the instant scorer's others
			// succeed at once, without a query.
			WrapRefresher: func(inner consumer.Refresher) consumer.Refresher {
				return refreshFunc(func(ctx context.Context, user string, at time.Time) error {
					switch {
					case b.failing.Load():
						return errors.New("bench: injected scorer failure")
					case row.Scorer == scorerInstant:
						return nil
					}
					return inner.Refresh(ctx, user, at)
				})
			}}
		svc, err := app.New(ctx, cfg, opts)
		if err != nil {
			return err
		}
		svcs, r.closers = append(svcs, svc), append(r.closers, func(ctx context.Context) { _ = svc.Close(ctx) })
	}
	for _, svc := range svcs {
		r.run.Go(func() error { return svc.Run(runCtx) })
	}
	r.figures = func() (done, refreshes, deadLettered, capacity float64) {
		for _, svc := range svcs {
			done += metrics.Read(svc.Metrics.EntriesAcked)
			refreshes += metrics.Read(svc.Metrics.Refreshes.WithLabelValues(metrics.OutcomeOK))
			for _, reason := range []string{metrics.ReasonMalformed, metrics.ReasonMaxAttempts, metrics.ReasonTooLarge} {
				deadLettered += metrics.Read(svc.Metrics.EntriesDeadLettered.WithLabelValues(reason))
			}
			capacity += metrics.Read(svc.SLI.DrainCapacity)
		}
		return done, refreshes, deadLettered, capacity
	}
	return nil
}

// refreshFunc is a consumer.Refresher (one user at a time, never batched).
type refreshFunc func(ctx context.Context, user string, at time.Time) error

func (f refreshFunc) Refresh(ctx context.Context, user string, at time.Time) error {
	return f(ctx, user, at)
}

// recorder counts every command of a row's consumer (all its clients), by
// command name and collection.
type recorder struct {
	mu sync.Mutex
	n  map[string]float64
}

func (r *recorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		key := e.CommandName
		if coll, ok := e.Command.Lookup(e.CommandName).StringValueOK(); ok {
			key += " " + coll
		}
		r.mu.Lock()
		r.n[key]++
		r.mu.Unlock()
	}}
}

func (r *recorder) counts() map[string]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

// seed writes the sources and the backlog and creates the indexes, as in
// production, before the clock starts.
func (b *Bench) seed(ctx context.Context, db *mongo.Database, res *Result) error {
	cfg, _, err := b.serviceConfig(db.Name(), res.Row, "") // for the collections' names
	if err != nil {
		return err
	}
	// The same seed for every row: a preset's rows drain identical data.
	rnd := rand.New(rand.NewPCG(b.cfg.Seed, 11))
	entries := backlog.Generate(res.Backlog, rnd)
	res.queue = db.Collection(cfg.QueueCollection)
	if res.Scorer == scorerActivity || res.Scorer == scorerHTTP {
		var docs []any
		// 2: what each document adds to a score besides its points, in both scorers reading them.
		docs, res.want = backlog.Activity(entries, userName, rnd, 2)
		err = insertAll(ctx, db.Collection("user_activity"), docs)
	} else {
		err = b.seedSources(ctx, db)
	}
	if err == nil {
		err = insertAll(ctx, res.queue, backlog.QueueDocs(entries, userName, "bench"))
	}
	if err != nil {
		return err
	}
	users := map[int]bool{}
	for _, e := range entries {
		users[e.User] = true
	}
	res.Users = len(users)
	_, err = consumer.EnsureIndexes(ctx, consumer.Collections{Queue: res.queue, Claims: db.Collection(cfg.ClaimsCollection),
		DeadLetter: db.Collection(cfg.DeadLetterCollection)}, slog.New(slog.DiscardHandler))
	return err
}

// seedSources writes 150 source documents (40 in a smoke run) for
// rules/bench.yaml, of users of b.pool(): few, as FerretDB reads the whole
// collection (SQLite) or the user's rows (PostgreSQL) for each query.
func (b *Bench) seedSources(ctx context.Context, db *mongo.Database) error {
	n, pool := pick(size(b.cfg.Short), 150, 40), b.pool()
	rnd := rand.New(rand.NewPCG(b.cfg.Seed, 7))
	now := time.Now()
	ago := func(max time.Duration) time.Time { return now.Add(-time.Duration(rnd.Int64N(int64(max)))) }
	docs := map[string][]any{}
	for i := range n {
		u := userName(rnd.IntN(pool))
		switch {
		case i%20 < 9:
			docs["user_activity"] = append(docs["user_activity"], bson.D{{Key: "username", Value: u}, {Key: "points", Value: 1 + rnd.IntN(50)},
				{Key: "kind", Value: []string{"like", "comment", "share", "visit"}[rnd.IntN(4)]}, {Key: "at", Value: ago(60 * 24 * time.Hour)}})
		case i%20 < 15:
			docs["posts"] = append(docs["posts"], bson.D{{Key: "author", Value: u}, {Key: "likes", Value: rnd.IntN(500)},
				{Key: "topic", Value: fmt.Sprintf("topic-%d", rnd.IntN(12))}, {Key: "at", Value: ago(120 * 24 * time.Hour)}})
		default:
			docs["reviews"] = append(docs["reviews"], bson.D{{Key: "reviewer", Value: u}, {Key: "stars", Value: 1 + rnd.IntN(5)},
				{Key: "product", Value: fmt.Sprintf("sku-%d", rnd.IntN(40))}, {Key: "at", Value: ago(60 * 24 * time.Hour)}})
		}
	}
	var err error
	for name, d := range docs {
		err = errors.Join(err, insertAll(ctx, db.Collection(name), d))
	}
	return err
}

func insertAll(ctx context.Context, coll *mongo.Collection, docs []any) error {
	for i := 0; i < len(docs); i += 1000 {
		if _, err := coll.InsertMany(ctx, docs[i:min(i+1000, len(docs))]); err != nil {
			return fmt.Errorf("seeding %s: %w", coll.Name(), err)
		}
	}
	return nil
}

// pool is how many users the sources and the producers draw from.
func (b *Bench) pool() int { return pick(size(b.cfg.Short), 2000, 300) }

// startHTTPScorer starts examples/httpscorer (built once into the scratch
// folder) on db directly, as a scorer sits by its database, behind a proxy of
// round trip rtt, and returns the SCORER_URL to give the service.
func (b *Bench) startHTTPScorer(ctx context.Context, db string, rtt time.Duration) (scorerURL string, stop func(), err error) {
	bin := filepath.Join(b.tmp, "httpscorer")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = examplescorer.BuildGo(ctx, b.tmp); err != nil {
			return "", nil, err
		}
	}
	// Killed with the run.
	p, err := examplescorer.Start(ctx, exec.CommandContext(ctx, bin),
		[]string{"MONGODB_URI=" + b.srv.URI, "MONGODB_DATABASE=" + db, "SCORER_TOKEN=bench", "PORT=0"}, os.Stderr)
	if err != nil {
		return "", nil, err
	}
	proxy, err := faultproxy.Start(context.Background(), faultproxy.Config{Target: strings.TrimPrefix(p.URL, "http://"), Up: rtt / 2, Down: rtt / 2})
	if err != nil {
		p.Stop()
		return "", nil, err
	}
	return "http://" + proxy.Addr() + "/score", func() { proxy.Close(); p.Stop() }, nil
}

// ReferenceBatch is how many of the oldest entries the replaced consumer took per poll.
const ReferenceBatch = 200

// reference is the consumer scorerefresh replaces (docs/performance.md): each
// poll refreshes the users of the oldest ReferenceBatch entries one after
// another with the same scoring.Refresher, then acks them. It skips the
// original's claiming updateMany: every difference from it flatters it.
type reference struct {
	queue     *mongo.Collection
	refresher *scoring.Refresher
	log       *slog.Logger
	covered   atomic.Int64 // entries whose user's refresh has completed
	refreshes atomic.Int64
}

// startReference runs the reference in r on cfg's database (rules only), with
// a client of its own configured as scorerefresh's (app.ClientOptions).
func (b *Bench) startReference(ctx context.Context, r *running, cfg config.Config, rules *scoring.Rules) error {
	cfg.RefreshConcurrency = 1
	m := metrics.NewMongo(metrics.NewRegistry())
	client, err := mongo.Connect(app.ClientOptions(cfg, m).SetMonitor(m.CommandMonitor(r.monitor())))
	if err != nil {
		return err
	}
	r.closers = append(r.closers, func(ctx context.Context) { _ = client.Disconnect(ctx) })
	db := client.Database(cfg.Database)
	ref := &reference{queue: db.Collection(cfg.QueueCollection), log: b.svcLog,
		refresher: scoring.NewRefresher(scoring.NewRecomputer(db, rules), scoring.NewStore(db.Collection("user_scores"), scoring.StoreConfig{}))}
	r.figures = func() (float64, float64, float64, float64) {
		return float64(ref.covered.Load()), float64(ref.refreshes.Load()), 0, 0
	}
	r.run.Go(func() error {
		for ctx.Err() == nil {
			n, err := ref.pollOnce(ctx)
			if err != nil && ctx.Err() == nil {
				ref.log.Warn("reference poll failed", "err", err)
			}
			if n == 0 || err != nil {
				_ = clock.Sleep(ctx, clock.Real{}, cfg.PollInterval)
			}
		}
		return nil
	})
	return nil
}

// pollOnce processes one batch and returns how many entries it held.
func (r *reference) pollOnce(ctx context.Context) (int, error) {
	var batch []struct {
		ID       bson.RawValue `bson:"_id"`
		Username string        `bson:"username"`
	}
	cur, err := r.queue.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(ReferenceBatch).SetBatchSize(ReferenceBatch).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}}))
	if err == nil {
		err = cur.All(ctx, &batch)
	}
	if err != nil {
		return 0, err
	}
	// Coalesce by username, users in order of their oldest entry.
	var order []string
	ids := map[string][]any{}
	for _, e := range batch {
		if _, seen := ids[e.Username]; !seen {
			order = append(order, e.Username)
		}
		ids[e.Username] = append(ids[e.Username], e.ID)
	}
	var ack bson.A
	for _, u := range order { // past the run's end every refresh fails at once
		if err := r.refresher.Refresh(ctx, u, time.Now()); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("reference refresh failed", "err", err)
			}
			continue
		}
		r.refreshes.Add(1)
		r.covered.Add(int64(len(ids[u])))
		ack = append(ack, ids[u]...)
	}
	if len(ack) > 0 {
		_, err = r.queue.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ack}}}})
	}
	return len(batch), err
}
