package plancmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
	"github.com/scorerefresh/scorerefresh/planner"
	"github.com/scorerefresh/scorerefresh/replay"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// planConn is the plan's read-only connection to MONGODB_URI.
type planConn struct {
	client *mongo.Client
	db     *mongo.Database
	server string // redacted, for messages
}

func dialPlan(ctx context.Context, cfg config.Config) (*planConn, error) {
	server := redact.URI(cfg.MongoURI)
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.MongoURI).SetAppName("scorerefresh plan").
		SetMaxPoolSize(uint64(max(cfg.RefreshConcurrency, 16))).SetTimeout(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", server, err)
	}
	c := &planConn{client: client, db: client.Database(cfg.Database), server: server}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		c.close()
		return nil, fmt.Errorf("reaching %s: %w", server, err)
	}
	return c, nil
}

func (c *planConn) close() { _ = c.client.Disconnect(context.Background()) }

// measurement is what --measure found.
type measurement struct {
	server        string
	pings, conc   int
	rtt           float64 // median ping, seconds
	cost          float64 // server time per command, seconds
	costMeasured  bool
	costUsers     int
	costNote      string
	capacity      float64 // queries a second under load; 0: not measured
	workers       int
	scan          float64 // server time per queued entry of a claim window read
	scanMeasured  bool
	scanDepth     int64
	changeStreams bool
	kind          string // --server-kind as the server describes itself; empty: it did not say
}

func (m measurement) describe() string {
	s := fmt.Sprintf("measured %s: round trip %.2f ms (median of %d pings, %d at once)", m.server, m.rtt*1000, m.pings, m.conc)
	if m.costMeasured {
		s += fmt.Sprintf("; server time %.2f ms per command (the rules' queries for %d users of the backlog, less the round trip)", m.cost*1000, m.costUsers)
	} else if m.costNote != "" {
		s += "; server time not measured: " + m.costNote
	}
	if m.capacity > 0 {
		s += fmt.Sprintf("; %.0f queries/s with %d refreshes' queries at once", m.capacity, m.workers)
	}
	if m.scanMeasured {
		s += fmt.Sprintf("; claim window %.2f µs per queued entry (at %d entries)", m.scan*1e6, m.scanDepth)
	}
	if m.kind != "" {
		s += "; server: " + m.kind
	}
	return s + fmt.Sprintf("; change streams: %t", m.changeStreams)
}

// serverKind is the server as --server-kind names it, from what it says
// of itself (servertraits, as the consumer asks); empty when it does not
// answer.
func (c *planConn) serverKind(ctx context.Context) string {
	t := servertraits.New()
	if err := t.Probe(ctx, c.db); err != nil {
		return ""
	}
	if t.BackendUnknown() {
		// FerretDB names its storage once it has opened a database, which
		// the change-stream check before this did.
		_, _ = t.Reprobe(ctx, c.db)
	}
	switch info := t.Info(); {
	case info.FerretDB == "":
		return serverMongoDB
	case !t.PushesEqualityDown():
		return serverSQLite
	}
	return serverPostgreSQL
}

// measureCost is what measure is asked to time besides pings.
type measureCost struct {
	cost     bool          // the server's time per command
	capacity time.Duration // how long to load the server for its capacity; 0: not
	workers  int
	scan     bool // time the claim window on the live queue
	window   int
}

// measure times pings and, as asked, the rules' queries for users of the
// backlog (reads only: the recompute without its write).
func (c *planConn) measure(ctx context.Context, o *planOptions, queue string, rules *scoring.Rules, users []string, want measureCost) (measurement, error) {
	m := measurement{server: c.server, pings: o.pings * o.measureConc, conc: o.measureConc}
	rtt, err := c.pingMedian(ctx, o.pings, o.measureConc)
	if err != nil {
		return m, fmt.Errorf("measuring the round trip to %s: %w", c.server, err)
	}
	m.rtt = rtt
	m.changeStreams = consumer.DetectChangeStreams(ctx, c.db.Collection(queue))
	m.kind = c.serverKind(ctx)
	if want.scan {
		if err := c.measureScan(ctx, &m, queue, want.window); err != nil {
			return m, err
		}
	}
	if !want.cost && want.capacity == 0 {
		return m, nil
	}
	if len(users) == 0 {
		m.costNote = "the backlog is empty"
		return m, nil
	}
	rec := scoring.NewRecomputer(c.db, rules)
	if want.cost {
		var perCommand []float64
		for _, u := range users[:min(5, len(users))] {
			start := time.Now()
			if _, err := rec.Recompute(ctx, u, start); err != nil {
				m.costNote = fmt.Sprintf("the rules' queries failed (%v)", err)
				return m, nil
			}
			perCommand = append(perCommand, time.Since(start).Seconds()/float64(len(rules.Components)))
		}
		m.cost, m.costMeasured, m.costUsers = max(0, median(perCommand)-rtt), true, len(perCommand)
	}
	if want.capacity > 0 {
		m.workers = want.workers
		m.capacity, err = loadServer(ctx, rec, users, len(rules.Components), want.workers, want.capacity)
		if err != nil {
			return m, fmt.Errorf("measuring the server's capacity: %w", err)
		}
	}
	return m, nil
}

// minScanDepth is the queue depth below which the claim window's cost says
// nothing about its cost per entry.
const minScanDepth = 1000

// measureScan times the claim window's query (reads only) on the queue as
// it is: the best of three, less the round trip, per queued entry.
func (c *planConn) measureScan(ctx context.Context, m *measurement, queue string, window int) error {
	coll := c.db.Collection(queue)
	depth, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return fmt.Errorf("counting %s: %w", queue, err)
	}
	if depth < minScanDepth {
		return nil
	}
	best := math.Inf(1)
	for range 3 {
		start := time.Now()
		cur, err := coll.Find(ctx, bson.D{{Key: "username", Value: bson.D{{Key: "$nin", Value: bson.A{}}}}},
			options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(int64(window)).
				SetBatchSize(int32(window)).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}))
		if err == nil {
			err = cur.All(ctx, &[]bson.Raw{})
		}
		if err != nil {
			return fmt.Errorf("timing the claim window on %s: %w", queue, err)
		}
		best = math.Min(best, time.Since(start).Seconds())
	}
	m.scan, m.scanMeasured, m.scanDepth = max(0, best-m.rtt)/float64(depth), true, depth
	return nil
}

// loadServer runs the rules' queries for users, round robin, from workers
// goroutines for d, and returns the queries answered per second.
func loadServer(ctx context.Context, rec *scoring.Recomputer, users []string, components, workers int, d time.Duration) (float64, error) {
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var next, done atomic.Int64
	var g errgroup.Group
	start := time.Now()
	for range workers {
		g.Go(func() error {
			for lctx.Err() == nil {
				u := users[int(next.Add(1))%len(users)]
				if _, err := rec.Recompute(lctx, u, time.Now()); err != nil {
					// The end of the measurement cuts a refresh short; the
					// driver may see its deadline a moment before ctx does.
					if lctx.Err() == nil && !mongo.IsTimeout(err) && !errors.Is(err, context.DeadlineExceeded) {
						return err
					}
					return nil
				}
				done.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(done.Load()*int64(components)) / time.Since(start).Seconds(), nil
}

// pingMedian is the median of n pings from each of conc goroutines, after
// one unmeasured ping each to open the connections.
func (c *planConn) pingMedian(ctx context.Context, n, conc int) (float64, error) {
	admin := c.client.Database("admin")
	ping := func() error { return admin.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err() }
	times := make([][]float64, conc)
	var g errgroup.Group
	for i := range conc {
		g.Go(func() error {
			if err := ping(); err != nil {
				return err
			}
			for range n {
				start := time.Now()
				if err := ping(); err != nil {
					return err
				}
				times[i] = append(times[i], time.Since(start).Seconds())
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return median(slices.Concat(times...)), nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// readQueue reads the oldest max entries of the live queue, username and
// enqueue time only, in the claim index's order. Ages count from now.
func (c *planConn) readQueue(ctx context.Context, cfg config.Config, limit int, keep func(string), stderr io.Writer) (*planner.Backlog, error) {
	coll := c.db.Collection(cfg.QueueCollection)
	total, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting %s: %w", cfg.QueueCollection, err)
	}
	cur, err := coll.Find(ctx, bson.D{}, options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(int64(limit)).SetBatchSize(10_000).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", cfg.QueueCollection, err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	bb := planner.NewBacklogBuilder()
	read, malformed := 0, 0
	for cur.Next(ctx) {
		read++
		user, at := replay.QueueEntry(cur.Current)
		if user == "" || at.IsZero() {
			malformed++
			continue
		}
		bb.Add(user, at)
		keep(user)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("reading %s after %d entries: %w", cfg.QueueCollection, read, err)
	}
	fmt.Fprintf(stderr, "read the oldest %d of about %d entries of %s.%s", read, total, cfg.Database, cfg.QueueCollection)
	if int64(read) < total {
		fmt.Fprintf(stderr, " (--max-entries %d: the plan leaves the rest out)", limit)
	}
	if malformed > 0 {
		fmt.Fprintf(stderr, "; %d malformed entries left out (the consumer dead-letters them)", malformed)
	}
	fmt.Fprintln(stderr)
	return bb.Build(time.Now()), nil
}

// readSnapshot reads the backlog of a snapshot, generated backlog or export.
func readSnapshot(ctx context.Context, in, queue string, keep func(string), stderr io.Writer) (*planner.Backlog, error) {
	bb := planner.NewBacklogBuilder()
	scan, err := replay.ReadQueue(ctx, in, queue, false, func(user string, at time.Time) {
		bb.Add(user, at)
		keep(user)
	})
	if err != nil {
		return nil, err
	}
	if scan.Malformed > 0 {
		fmt.Fprintf(stderr, "%s: %d malformed entries left out (the consumer dead-letters them)\n", scan.Path, scan.Malformed)
	}
	return bb.Build(scan.Reference), nil
}

// writePlanSVG draws the plan as an SVG chart (the drain report draws its own with the same package).
func writePlanSVG(path string, p *planner.Plan) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := planChart(p).WriteSVG(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
