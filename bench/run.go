package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
)

// sample is the queue as the bench saw it at one moment of a run.
type sample struct {
	T         float64 `json:"t"`          // seconds since the consumer started
	Depth     int64   `json:"depth"`      // entries in the queue
	OldestAge float64 `json:"oldest_age"` // seconds; 0 when empty
	Progress  float64 `json:"progress"`   // entries done (see running.progress)
	Arrived   int64   `json:"arrived"`    // entries the producer has enqueued
}

// runSpec is one consumer's part of a scenario.
type runSpec struct {
	scenario    string
	consumer    string // consumerReference or consumerScorerefresh
	instances   int    // scorerefresh processes (in process); default 1
	concurrency int    // REFRESH_CONCURRENCY; default the bench's
	rtt         time.Duration
	backlog     []any        // queue entries present before the consumer starts
	produce     *produce     // arrivals while it runs; nil for none
	events      []timedEvent // things to do at given times (the trigger)
	max         time.Duration
	// done ends the run early; nil runs until backlog is drained (or max).
	done func(samples []sample) bool
	// observe, when set, is called every 50 ms with the running consumer.
	observe func(el time.Duration, c running)
	// tune, when set, adjusts scorerefresh instance i's app options (a
	// command monitor, a scorer fault).
	tune func(i int, o *app.Options)
}

// produce is a producer enqueueing at a constant rate.
type produce struct {
	rate float64 // entries per second
	pool int     // users drawn uniformly from a pool of this size
}

type timedEvent struct {
	at   time.Duration
	name string
	do   func()
}

// runResult is one consumer's measurement in a scenario.
type runResult struct {
	Scenario         string             `json:"scenario"`
	Consumer         string             `json:"consumer"`
	Instances        int                `json:"instances"`
	Concurrency      int                `json:"concurrency"`
	RTTms            float64            `json:"rtt_ms"`
	Backlog          int                `json:"backlog"`
	Produced         int64              `json:"produced"`
	Seconds          float64            `json:"seconds"`
	Progress         float64            `json:"entries_done"`
	Acked            float64            `json:"entries_acked"`
	Refreshes        float64            `json:"refreshes"`
	Drained          bool               `json:"drained"`
	Rate             float64            `json:"entries_per_second"`
	Commands         map[string]float64 `json:"commands"`
	CommandsPerEntry float64            `json:"commands_per_entry"`
	Events           map[string]float64 `json:"events,omitempty"` // name -> t
	MeanRefreshMs    float64            `json:"mean_refresh_ms"`
	BusySlots        float64            `json:"busy_refresh_slots"` // mean refreshes running at once
	Claims           float64            `json:"claim_rounds"`
	MeanClaimMs      float64            `json:"mean_claim_ms"`
	CPU              cpuUse             `json:"cpu"`
	CommandMeanMs    map[string]float64 `json:"command_mean_ms"` // as the driver timed them: RTT + server + waiting
	Timeline         []sample           `json:"timeline"`
}

// windowRate is the entries done per second between t0 and t1 (seconds).
func (r *runResult) windowRate(t0, t1 float64) float64 {
	a, b := r.at(t0), r.at(t1)
	if b.T <= a.T {
		return 0
	}
	return (b.Progress - a.Progress) / (b.T - a.T)
}

// at is the first sample at or after t (the last one if none).
func (r *runResult) at(t float64) sample {
	for _, s := range r.Timeline {
		if s.T >= t {
			return s
		}
	}
	if len(r.Timeline) == 0 {
		return sample{}
	}
	return r.Timeline[len(r.Timeline)-1]
}

// run measures one consumer in a fresh database: seed, start, produce and
// sample until done, stop, drop.
func (b *Bench) run(ctx context.Context, spec runSpec) (*runResult, error) {
	spec.instances = max(spec.instances, 1)
	if spec.concurrency == 0 {
		spec.concurrency = b.cfg.Concurrency
	}
	dbName := b.nextDatabase(strings.ReplaceAll(spec.scenario+"_"+spec.consumer[:3], ".", "_"))
	db := b.direct.Database(dbName)
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = db.Drop(dctx)
	}()
	if err := seedSources(ctx, db, b.cfg.Sources, b.cfg.Pool, b.cfg.Seed); err != nil {
		return nil, err
	}
	cfg, err := b.serviceConfig(dbName, spec.concurrency)
	if err != nil {
		return nil, err
	}
	queue := db.Collection(cfg.QueueCollection)
	if err := insertAll(ctx, queue, spec.backlog); err != nil {
		return nil, err
	}
	// The indexes exist before the clock starts, as they do in production
	// (the service creates them idempotently at start); the reference gets
	// them too.
	consumer.EnsureIndexes(ctx, consumer.Collections{
		Queue: queue, Claims: db.Collection(cfg.ClaimsCollection), DeadLetter: db.Collection(cfg.DeadLetterCollection),
	}, slog.New(slog.DiscardHandler))

	b.proxy.SetDelay(spec.rtt/2, spec.rtt/2)
	defer b.proxy.SetDelay(0, 0)

	res := &runResult{
		Scenario: spec.scenario, Consumer: spec.consumer, Instances: spec.instances, Concurrency: spec.concurrency,
		RTTms: ms(spec.rtt), Backlog: len(spec.backlog), Events: map[string]float64{},
	}
	b.logf("  %-12s %s: %d entries queued, RTT %s%s", spec.consumer, spec.scenario, len(spec.backlog), spec.rtt, instancesNote(spec))

	var c running
	cpu := startCPU()
	start := time.Now()
	// Labelled, so that a CPU profile tells the consumer from the server
	// (cpusplit.go).
	withConsumerLabel(ctx, func() {
		if spec.consumer == consumerReference {
			c, err = b.startReference(ctx, dbName)
		} else {
			c, err = b.startScorerefresh(ctx, dbName, spec.instances, spec.concurrency, spec.tune)
		}
	})
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.stop()
		}
	}()

	var arrived atomic.Int64
	prodCtx, stopProducer := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	var prodErr error
	if spec.produce != nil {
		prodWG.Go(func() { prodErr = b.producer(prodCtx, queue, *spec.produce, &arrived) })
	}

	target := float64(len(spec.backlog))
	fast := time.NewTicker(50 * time.Millisecond)
	defer fast.Stop()
	nextSample := time.Duration(0)
	nextLog := 10 * time.Second
	events := spec.events
	var end time.Duration
loop:
	for {
		select {
		case <-ctx.Done():
			stopProducer()
			prodWG.Wait()
			return nil, ctx.Err()
		case <-fast.C:
		}
		el := time.Since(start)
		for len(events) > 0 && el >= events[0].at {
			events[0].do()
			res.Events[events[0].name] = el.Seconds()
			b.logf("    %6.1fs  %s", el.Seconds(), events[0].name)
			events = events[1:]
		}
		if spec.observe != nil {
			spec.observe(el, c)
		}
		if spec.done == nil && c.progress() >= target && c.acked() >= target {
			end = el
			res.Drained = true
			res.Timeline = append(res.Timeline, b.sample(ctx, queue, el, c, &arrived))
			break
		}
		if el >= nextSample {
			s := b.sample(ctx, queue, el, c, &arrived)
			res.Timeline = append(res.Timeline, s)
			nextSample = el + b.cfg.SampleEvery
			if el >= nextLog {
				b.logf("    %6.1fs  depth %6d  oldest %6.1fs  done %7.0f  arrived %6d", s.T, s.Depth, s.OldestAge, s.Progress, s.Arrived)
				nextLog += 10 * time.Second
			}
			if spec.done != nil && spec.done(res.Timeline) {
				end = el
				break loop
			}
		}
		if el >= spec.max {
			end = el
			if len(res.Timeline) == 0 || res.Timeline[len(res.Timeline)-1].T < el.Seconds() {
				res.Timeline = append(res.Timeline, b.sample(ctx, queue, el, c, &arrived))
			}
			break
		}
	}
	stopProducer()
	prodWG.Wait()
	res.Seconds = end.Seconds()
	res.Progress = c.progress()
	res.Acked = c.acked()
	res.Refreshes = c.refreshes()
	res.Produced = arrived.Load()
	res.CPU = cpu.stop()
	tm := c.timing()
	if tm.Refreshes > 0 {
		res.MeanRefreshMs = 1000 * tm.RefreshSeconds / tm.Refreshes
	}
	if end > 0 {
		res.BusySlots = tm.RefreshSeconds / end.Seconds()
	}
	res.Claims = tm.Claims
	res.CommandMeanMs = map[string]float64{}
	for k, n := range tm.CommandCount {
		if n > 0 {
			res.CommandMeanMs[k] = math.Round(10000*tm.CommandSeconds[k]/n) / 10
		}
	}
	if tm.Claims > 0 {
		res.MeanClaimMs = 1000 * tm.ClaimSeconds / tm.Claims
	}
	stopped = true
	stopErr := c.stop()
	// Commands after stop: the shutdown flush belongs to the run.
	res.Commands = c.commands()
	if res.Seconds > 0 {
		res.Rate = res.Progress / res.Seconds
	}
	if res.Progress > 0 {
		res.CommandsPerEntry = total(res.Commands) / math.Max(res.Progress, res.Acked)
	}
	if prodErr != nil && !errors.Is(prodErr, context.Canceled) {
		return res, fmt.Errorf("producer: %w", prodErr)
	}
	if stopErr != nil {
		b.logf("    (consumer stopped with: %v)", stopErr)
	}
	b.logf("    %s: %.0f entries done (%.0f acked) in %.1fs: %.1f entries/s, %.0f refreshes, %.2f commands/entry%s",
		spec.consumer, res.Progress, res.Acked, res.Seconds, res.Rate, res.Refreshes, res.CommandsPerEntry, drainedNote(res))
	b.logf("      mean refresh %.0f ms, %.1f refreshes running on average; %.0f claim rounds of %.0f ms on average; CPU: machine %.2f cores busy, this process %.2f",
		res.MeanRefreshMs, res.BusySlots, res.Claims, res.MeanClaimMs, res.CPU.Machine, res.CPU.Process)
	b.logf("      commands %v; mean ms %v", roundMap(res.Commands), res.CommandMeanMs)
	return res, nil
}

func instancesNote(spec runSpec) string {
	if spec.instances > 1 {
		return fmt.Sprintf(", %d instances", spec.instances)
	}
	return ""
}

func drainedNote(r *runResult) string {
	if r.Drained {
		return ", drained"
	}
	return ""
}

// sample reads the queue's depth and oldest age on the direct connection
// (no proxy, not counted against the consumer).
func (b *Bench) sample(ctx context.Context, queue *mongo.Collection, el time.Duration, c running, arrived *atomic.Int64) sample {
	s := sample{T: el.Seconds(), Progress: c.progress(), Arrived: arrived.Load()}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := queue.EstimatedDocumentCount(sctx)
	if err == nil {
		s.Depth = n
	}
	var oldest struct {
		CreatedAt time.Time `bson:"createdAt"`
	}
	err = queue.FindOne(sctx, bson.D{}, options.FindOne().
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetProjection(bson.D{{Key: "createdAt", Value: 1}})).Decode(&oldest)
	if err == nil {
		s.OldestAge = math.Max(0, time.Since(oldest.CreatedAt).Seconds())
	}
	return s
}

// producer enqueues entries at p.rate, in small batches every 50 ms, each
// stamped with the moment it is written, on the direct connection (the
// producers are other applications, not behind the consumer's latency).
func (b *Bench) producer(ctx context.Context, queue *mongo.Collection, p produce, sent *atomic.Int64) error {
	rnd := rand.New(rand.NewPCG(b.cfg.Seed, uint64(b.runs)))
	start := time.Now()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		due := int64(p.rate*time.Since(start).Seconds()) - sent.Load()
		if due <= 0 {
			continue
		}
		now := time.Now()
		docs := make([]any, due)
		for i := range docs {
			docs[i] = entry(userName(rnd.IntN(p.pool)), now)
		}
		if _, err := queue.InsertMany(ctx, docs); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		sent.Add(due)
	}
}

func roundMap(m map[string]float64) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = int(v)
	}
	return out
}

// nextDatabase names the next run's fresh database: bench, its number, name.
func (b *Bench) nextDatabase(name string) string {
	b.runs++
	return fmt.Sprintf("bench%02d_%s", b.runs, name)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
