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

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
)

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
	observe func(elapsed time.Duration, c running)
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

// measure runs one consumer in a fresh database: seed, start, produce and
// sample until done, stop, drop.
func (b *Bench) measure(ctx context.Context, spec runSpec) (*runResult, error) {
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
	queue, err := b.prepareDatabase(ctx, db, spec)
	if err != nil {
		return nil, err
	}
	b.proxy.SetDelay(spec.rtt/2, spec.rtt/2)
	defer b.proxy.SetDelay(0, 0)
	b.logf("  %-12s %s: %d entries queued, RTT %s%s", spec.consumer, spec.scenario, len(spec.backlog), spec.rtt, instancesNote(spec))

	cpu := startCPU()
	start := time.Now()
	c, err := b.startConsumer(ctx, dbName, spec)
	if err != nil {
		return nil, err
	}
	w := &runWatch{b: b, spec: spec, consumer: c, queue: queue, events: spec.events, nextLog: 10 * time.Second,
		res: &runResult{Scenario: spec.scenario, Consumer: spec.consumer, Instances: spec.instances, Concurrency: spec.concurrency,
			RTTms: ms(spec.rtt), Backlog: len(spec.backlog), Events: map[string]float64{}}}
	stopProducer := b.startProducer(ctx, queue, spec.produce, &w.arrived)
	end, err := w.watch(ctx, start)
	prodErr := stopProducer()
	if err != nil {
		_ = c.stop()
		return nil, err
	}
	res := w.res
	res.CPU = cpu.stop()
	stopErr := finishRun(res, c, end, w.arrived.Load())
	if prodErr != nil {
		return res, fmt.Errorf("producer: %w", prodErr)
	}
	if stopErr != nil {
		b.logf("    (consumer stopped with: %v)", stopErr)
	}
	b.logRun(res)
	return res, nil
}

// prepareDatabase seeds the sources and the backlog and creates the
// indexes, before the clock starts, as they exist in production (the
// service creates them idempotently at start); the reference gets them too.
func (b *Bench) prepareDatabase(ctx context.Context, db *mongo.Database, spec runSpec) (*mongo.Collection, error) {
	if err := seedSources(ctx, db, b.cfg.Sources, b.cfg.Pool, b.cfg.Seed); err != nil {
		return nil, err
	}
	cfg, err := b.serviceConfig(db.Name(), spec.concurrency)
	if err != nil {
		return nil, err
	}
	queue := db.Collection(cfg.QueueCollection)
	if err := insertAll(ctx, queue, spec.backlog); err != nil {
		return nil, err
	}
	consumer.EnsureIndexes(ctx, consumer.Collections{
		Queue: queue, Claims: db.Collection(cfg.ClaimsCollection), DeadLetter: db.Collection(cfg.DeadLetterCollection),
	}, slog.New(slog.DiscardHandler))
	return queue, nil
}

// startConsumer starts the run's consumer, labelled, so that a CPU profile
// tells the consumer from the server (cpusplit.go).
func (b *Bench) startConsumer(ctx context.Context, dbName string, spec runSpec) (c running, err error) {
	withConsumerLabel(ctx, func() {
		if spec.consumer == consumerReference {
			c, err = b.startReference(ctx, dbName)
		} else {
			c, err = b.startScorerefresh(ctx, dbName, spec.instances, spec.concurrency, spec.tune)
		}
	})
	return c, err
}

// startProducer runs p's producer, if any, until the returned stop is
// called; stop returns the producer's error.
func (b *Bench) startProducer(ctx context.Context, queue *mongo.Collection, p *produce, arrived *atomic.Int64) (stop func() error) {
	prodCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var err error
	if p != nil {
		wg.Go(func() { err = b.producer(prodCtx, queue, *p, arrived) })
	}
	return func() error {
		cancel()
		wg.Wait()
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
}

// runWatch is a running consumer watched every 50 ms until its run ends.
type runWatch struct {
	b        *Bench
	spec     runSpec
	consumer running
	queue    *mongo.Collection
	res      *runResult
	arrived  atomic.Int64
	events   []timedEvent // not yet done
	// nextSample and nextLog are when the queue is next sampled and logged.
	nextSample, nextLog time.Duration
}

// watch ticks until the run ends and returns how long it ran.
func (w *runWatch) watch(ctx context.Context, start time.Time) (time.Duration, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
		elapsed := time.Since(start)
		if w.step(ctx, elapsed) {
			return elapsed, nil
		}
	}
}

// step is one tick at elapsed: due events, the observer, the end
// conditions and the samples; true when the run is over.
func (w *runWatch) step(ctx context.Context, elapsed time.Duration) bool {
	for len(w.events) > 0 && elapsed >= w.events[0].at {
		w.events[0].do()
		w.res.Events[w.events[0].name] = elapsed.Seconds()
		w.b.logf("    %6.1fs  %s", elapsed.Seconds(), w.events[0].name)
		w.events = w.events[1:]
	}
	if w.spec.observe != nil {
		w.spec.observe(elapsed, w.consumer)
	}
	target := float64(len(w.spec.backlog))
	if w.spec.done == nil && w.consumer.progress() >= target && w.consumer.acked() >= target {
		w.res.Drained = true
		w.record(ctx, elapsed)
		return true
	}
	if elapsed >= w.nextSample {
		s := w.record(ctx, elapsed)
		w.nextSample = elapsed + w.b.cfg.SampleEvery
		if elapsed >= w.nextLog {
			w.b.logf("    %6.1fs  depth %6d  oldest %6.1fs  done %7.0f  arrived %6d", s.T, s.Depth, s.OldestAge, s.Progress, s.Arrived)
			w.nextLog += 10 * time.Second
		}
		if w.spec.done != nil && w.spec.done(w.res.Timeline) {
			return true
		}
	}
	if elapsed >= w.spec.max {
		if len(w.res.Timeline) == 0 || last(w.res.Timeline).T < elapsed.Seconds() {
			w.record(ctx, elapsed)
		}
		return true
	}
	return false
}

// record samples the queue into the timeline.
func (w *runWatch) record(ctx context.Context, elapsed time.Duration) sample {
	s := w.b.sample(ctx, w.queue, elapsed, w.consumer, &w.arrived)
	w.res.Timeline = append(w.res.Timeline, s)
	return s
}

// finishRun reads the consumer's figures into res, stops it (the shutdown
// flush belongs to the run, so commands are read after the stop) and
// returns how the stop went.
func finishRun(res *runResult, c running, end time.Duration, arrived int64) error {
	res.Seconds = end.Seconds()
	res.Progress, res.Acked, res.Refreshes, res.Produced = c.progress(), c.acked(), c.refreshes(), arrived
	res.addTiming(c.timing(), end)
	stopErr := c.stop()
	res.Commands = c.commands()
	if res.Seconds > 0 {
		res.Rate = res.Progress / res.Seconds
	}
	if res.Progress > 0 {
		res.CommandsPerEntry = total(res.Commands) / math.Max(res.Progress, res.Acked)
	}
	return stopErr
}

// addTiming derives the mean refresh and claim times, the busy refresh
// slots and each command's mean time from the consumer's timing.
func (r *runResult) addTiming(t timing, end time.Duration) {
	if t.Refreshes > 0 {
		r.MeanRefreshMs = 1000 * t.RefreshSeconds / t.Refreshes
	}
	if end > 0 {
		r.BusySlots = t.RefreshSeconds / end.Seconds()
	}
	r.Claims = t.Claims
	if t.Claims > 0 {
		r.MeanClaimMs = 1000 * t.ClaimSeconds / t.Claims
	}
	r.CommandMeanMs = map[string]float64{}
	for k, n := range t.CommandCount {
		if n > 0 {
			r.CommandMeanMs[k] = math.Round(10000*t.CommandSeconds[k]/n) / 10
		}
	}
}

func (b *Bench) logRun(res *runResult) {
	b.logf("    %s: %.0f entries done (%.0f acked) in %.1fs: %.1f entries/s, %.0f refreshes, %.2f commands/entry%s",
		res.Consumer, res.Progress, res.Acked, res.Seconds, res.Rate, res.Refreshes, res.CommandsPerEntry, drainedNote(res))
	b.logf("      mean refresh %.0f ms, %.1f refreshes running on average; %.0f claim rounds of %.0f ms on average; CPU: machine %.2f cores busy, this process %.2f",
		res.MeanRefreshMs, res.BusySlots, res.Claims, res.MeanClaimMs, res.CPU.Machine, res.CPU.Process)
	b.logf("      commands %v; mean ms %v", roundMap(res.Commands), res.CommandMeanMs)
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

// nextDatabase names the next run's fresh database: bench, this
// invocation's id, the run's number, name.
func (b *Bench) nextDatabase(name string) string {
	b.runs++
	return fmt.Sprintf("bench%s_%02d_%s", b.runID, b.runs, name)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
