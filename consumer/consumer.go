// Package consumer drains the score-event queue. A claim round (claim.go)
// reads a window of the oldest entries, picks users, leases each (lease.go)
// and absorbs its entries (coalesce.go), on a poll, a change stream or a
// freed slot; refreshes run at most REFRESH_CONCURRENCY at once, with no
// tick barrier (refresh.go, batch.go); outcomes are acknowledged in batches
// (ack.go), malformed entries and users out of attempts dead-lettered
// (deadletter.go). Every held lease is renewed in one round trip per period;
// at shutdown claiming stops, running refreshes get SHUTDOWN_TIMEOUT, the
// rest is released.
package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/deadline"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// The pipeline's defaults, shared with internal/config (docs/contract.md).
const (
	DefaultClaimWindow        = 500
	DefaultMaxUsersInFlight   = 64
	DefaultRefreshConcurrency = 16 // the fixed limiter New builds when Deps has none
	DefaultLeaseDuration      = 60 * time.Second
	DefaultPollInterval       = time.Second
	DefaultMaxAttempts        = 5
	DefaultShutdownTimeout    = 25 * time.Second
	DefaultBatchSize          = 16 // users per slot under BatchAuto where the server answers $in from an index
	DefaultOpTimeout          = 30 * time.Second
)

// What the pipeline costs, for the capacity model (the live headroom, the
// planner and the bench). Tests count these round trips against the server's.
const (
	// LeadFactor bounds held users per refresh slot: one running and three
	// waiting keep it busy across a claim round (16 × 4 = MAX_USERS_IN_FLIGHT).
	LeadFactor = 4

	ClaimRoundTrips      = 4                     // a round that claims: live leases, the window, the lease insert, the absorb
	EmptyClaimRoundTrips = 2                     // a round that found nobody to claim
	AckRoundTrips        = 2                     // one flush: delete the entries, release the leases
	AckFlushInterval     = 50 * time.Millisecond // a flush waits this long for company after its first outcome
	AckFlushBatch        = 100                   // outcomes that make a flush go at once
)

// Config tunes the pipeline. Zero values take the defaults.
type Config struct {
	ClaimWindow      int           // entries one claim round reads; default DefaultClaimWindow
	MaxUsersInFlight int           // users held at once; default DefaultMaxUsersInFlight
	LeaseDuration    time.Duration // a lease not renewed for this long is taken over; default DefaultLeaseDuration
	PollInterval     time.Duration // idle poll period; default DefaultPollInterval
	MaxAttempts      int           // failed refreshes before dead-lettering; default DefaultMaxAttempts
	ShutdownTimeout  time.Duration // running refreshes get this long after shutdown begins; default DefaultShutdownTimeout

	RefreshTimeout time.Duration // one refresh's deadline; default LeaseDuration
	OpTimeout      time.Duration // deadline of each pipeline round trip; default 30s
	BatchSize      int           // most users refreshed together in one slot, when the Refresher is a BatchRefresher; default 1; BatchAuto follows the server
	Owner          string        // written on leases for operators; default hostname:pid
}

// BatchAuto as Config.BatchSize batches DefaultBatchSize users, but where the
// server scans for a batch's {user: {$in}} and not for one user's query
// (FerretDB on PostgreSQL) each slot refreshes one user.
const BatchAuto = -1

func (c Config) withDefaults() Config {
	c.ClaimWindow = cmp.Or(c.ClaimWindow, DefaultClaimWindow)
	c.MaxUsersInFlight = cmp.Or(c.MaxUsersInFlight, DefaultMaxUsersInFlight)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, DefaultLeaseDuration)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.RefreshTimeout = cmp.Or(c.RefreshTimeout, c.LeaseDuration)
	c.OpTimeout = cmp.Or(c.OpTimeout, DefaultOpTimeout)
	if c.BatchSize != BatchAuto {
		c.BatchSize = max(c.BatchSize, 1)
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return c
}

// Collections are the MongoDB collections the consumer works on.
type Collections struct {
	Queue, Claims, DeadLetter *mongo.Collection
}

// Deps are the consumer's collaborators.
type Deps struct {
	Refresher Refresher
	Limiter   Limiter           // default: NewFixedLimiter(DefaultRefreshConcurrency)
	Metrics   *metrics.Consumer // required
	Logger    *slog.Logger      // default: discard
	Clock     clock.Clock       // what it waits on and times with; default: the wall clock
	// ServerTime dates leases and backoffs, which other replicas read (serverclock); default: Clock.
	ServerTime clock.Nower
	Wakeups    []WakeupSource       // hints that work arrived; polling stays on regardless
	Traits     *servertraits.Traits // shared with the scorer; default: traits of its own
	AfterClaim func(err error)      // every claim-loop pass's error (nil: success or no room): liveness, readiness
	AfterFlush func(err error)      // every ack flush attempt's error: readiness
}

// Consumer is one replica's pipeline. Several may share a queue.
type Consumer struct {
	cfg        Config
	refresher  BatchRefresher // a Refresher that is not one is run alone
	limiter    Limiter
	metrics    *metrics.Consumer
	log        *slog.Logger
	clock      clock.Clock
	serverTime clock.Nower
	wakeups    []WakeupSource
	afterClaim func(err error)

	traits   *servertraits.Traits
	claimer  *claimer
	leases   *leaseStore
	acks     *acker
	dead     *deadLane
	batches  *batcher
	perUser  sync.Once // logs BatchAuto's choice of one user per slot
	failures *failureWindow

	wake signal // work may have arrived, or room was made

	contention int // claim loop only: contended rounds in a row (contentionDelay)
	claimRnd   *rand.Rand

	mu      sync.Mutex
	held    map[string]lease // users claimed and not yet settled: renewed, and never claimed twice
	heldN   map[string]int   // entries absorbed per held user
	heldE   int              // Σ heldN: bounded by AbsorbLimit across claim rounds
	queued  int              // held users waiting for a refresh slot
	backlog bool             // the last round stopped for lack of room, not of work: a freed slot is worth a round
}

// New builds a consumer; it does nothing until Run.
func New(cfg Config, colls Collections, deps Deps) *Consumer {
	cfg = cfg.withDefaults()
	c := &Consumer{
		cfg:        cfg,
		limiter:    cmp.Or[Limiter](deps.Limiter, NewFixedLimiter(DefaultRefreshConcurrency)),
		metrics:    deps.Metrics,
		log:        cmp.Or(deps.Logger, slog.New(slog.DiscardHandler)),
		clock:      clock.Or(deps.Clock),
		wakeups:    deps.Wakeups,
		afterClaim: deps.AfterClaim,
		traits:     cmp.Or(deps.Traits, servertraits.New()),
		wake:       newSignal(),
		claimRnd:   rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		held:       map[string]lease{},
		heldN:      map[string]int{},
		batches:    &batcher{},
		// A failure is not charged while more than half of the last 10–20 s
		// of refreshes failed too, out of at least 8.
		failures: &failureWindow{span: 10 * time.Second, minSample: 8},
	}
	c.serverTime = cmp.Or[clock.Nower](deps.ServerTime, c.clock)
	c.leases = &leaseStore{coll: colls.Claims, owner: cfg.Owner, traits: c.traits}
	byUser := new(atomic.Bool) // set by the claimer's first round, read by the acker's and the lane's deletes
	c.claimer = &claimer{queue: colls.Queue, leases: c.leases, window: cfg.ClaimWindow, lease: cfg.LeaseDuration, serverTime: c.serverTime,
		scanEvery: cfg.PollInterval, skip: map[string]time.Time{}, byUser: byUser, traits: c.traits,
		windowHints: newHints(windowIndex), absorbHints: newHints(absorbIndex, legacyAbsorbIndex)}
	var ok bool
	if c.refresher, ok = deps.Refresher.(BatchRefresher); !ok {
		c.refresher, c.cfg.BatchSize = alone{deps.Refresher}, 1
	}
	base := func(afterFlush func(error)) settler {
		if afterFlush == nil {
			afterFlush = func(error) {}
		}
		return settler{leases: c.leases, clock: c.clock, serverTime: c.serverTime, metrics: c.metrics, log: c.log,
			interval: AckFlushInterval, onSettled: c.settled, afterFlush: afterFlush, kick: newSignal()}
	}
	c.dead = &deadLane{
		settler:   base(nil), // (readiness is about acknowledgements)
		letters:   &deadLetterer{queue: colls.Queue, dead: colls.DeadLetter, byUser: byUser, traits: c.traits},
		deadRetry: map[string]deadRetry{},
	}
	c.acks = &acker{settler: base(deps.AfterFlush), queue: colls.Queue, dead: c.dead, byUser: byUser, maxAttempts: cfg.MaxAttempts}
	c.dead.build, c.acks.build = c.dead.newFlush, c.acks.newFlush
	c.metrics.UsersInFlightCap.Set(float64(cfg.MaxUsersInFlight))
	c.metrics.ConcurrencyLimit.Set(float64(c.limiter.Limit()))
	return c
}

// flushAll flushes the acker's, then the lane's, until done or ctx ends.
func (c *Consumer) flushAll(ctx context.Context) error {
	return errors.Join(c.acks.flushAll(ctx), c.dead.flushAll(ctx))
}

// Wake tells the claim loop that work may have arrived.
func (c *Consumer) Wake() { c.wake.notify() }

// Run drains the queue until ctx ends, then stops claiming, gives running
// refreshes ShutdownTimeout and releases the rest in one round trip. MongoDB
// errors while running are logged and retried, never returned.
func (c *Consumer) Run(ctx context.Context) error {
	// Work in flight runs on a context that outlives ctx (SIGTERM).
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	var bg sync.WaitGroup
	settleCtx, stopSettling := context.WithCancel(workCtx)
	bg.Go(func() { c.acks.run(settleCtx) })
	bg.Go(func() { c.dead.run(settleCtx) })
	renewCtx, stopRenew := context.WithCancel(workCtx)
	// Renewed a third of the way into a lease's life: it expires only after two missed.
	bg.Go(func() {
		clock.Every(renewCtx, c.clock, c.cfg.LeaseDuration/3, func(ctx context.Context) {
			if err := c.renewOnce(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("renewing leases failed; retrying next period", "op", "lease renewal", "err", err)
			}
		})
	})
	for _, w := range c.wakeups {
		bg.Go(func() {
			if err := w.Run(ctx, c.Wake); err != nil && ctx.Err() == nil {
				c.log.Warn("wake-up source stopped; polling continues", "err", err)
			}
		})
	}

	var refreshes sync.WaitGroup
	c.claimLoop(ctx, workCtx, &refreshes)

	// Shutdown: let running refreshes finish, up to the timeout.
	done := make(chan struct{})
	go func() { refreshes.Wait(); close(done) }()
	timeout := c.clock.NewTimer(c.cfg.ShutdownTimeout)
	defer timeout.Stop()
	select {
	case <-done:
	case <-timeout.C():
		c.log.Warn("shutdown timeout reached; cancelling running refreshes", "timeout", c.cfg.ShutdownTimeout)
		cancelWork()
		<-done
	}
	stopSettling()
	stopRenew()
	bg.Wait() // acker, lane and renewer stopped; wake-up sources ended with ctx
	final, cancel := context.WithTimeout(context.Background(), c.cfg.OpTimeout)
	defer cancel()
	if err := c.flushAll(final); err != nil {
		c.mu.Lock()
		n := len(c.held)
		c.mu.Unlock()
		c.log.Error("final flush failed; unreleased leases expire after LEASE_DURATION", "op", "shutdown flush", "users", n, "err", err)
		return fmt.Errorf("final flush at shutdown: %w", err)
	}
	c.log.Info("consumer stopped", "owner", c.cfg.Owner)
	return nil
}

// claimLoop claims whenever there is room and maybe work: after a round that
// filled the room or the window, when users settle, on a wake-up, every PollInterval.
func (c *Consumer) claimLoop(ctx, workCtx context.Context, refreshes *sync.WaitGroup) {
	poll := c.clock.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	failures, pages := 0, 0
	// A head of huge entries, or a server slowed for minutes, can need more
	// than OpTimeout: a round that runs out of time gets longer next time.
	limit := deadline.Stretch{Base: c.cfg.OpTimeout, Max: maxClaimStretch * c.cfg.OpTimeout}
	for ctx.Err() == nil {
		lastRound := c.clock.Now()
		timeout := limit.Next()
		pass, err := c.claimOnce(ctx, workCtx, refreshes, timeout)
		if ctx.Err() == nil && c.afterClaim != nil {
			c.afterClaim(err)
		}
		if err != nil && ctx.Err() == nil {
			failures++
			c.metrics.ClaimErrors.Inc()
			delay := Backoff{Base: 200 * time.Millisecond, Max: claimRetryMax}.Delay(failures)
			if limit.Observe(err) {
				c.log.Error("claim round ran out of time; retrying with a longer deadline", "op", "claim", "attempt", failures,
					"deadline", timeout, "next_deadline", limit.Next(), "retry_in", delay, "err", err)
			} else {
				c.log.Error("claim failed; retrying", "op", "claim", "attempt", failures, "retry_in", delay, "err", err)
			}
			_ = clock.Sleep(ctx, c.clock, delay)
			continue
		}
		failures = 0
		if pass.ran {
			limit.Observe(nil) // (a pass without room says nothing)
			if c.contention > 0 {
				// Other replicas won most picks: back off rather than pay rounds for nothing.
				_ = clock.Sleep(ctx, c.clock, c.contentionDelay())
			}
		}
		if pass.paged && pages < maxPagesPerWake {
			pages++
			continue
		}
		if pass.more && c.wantMore() {
			continue
		}
		// Paging ends with the wait: the next round reads the head again.
		pages = 0
		c.claimer.resume = nil
		select {
		case <-ctx.Done():
		case <-poll.C():
			c.metrics.Wakeups.WithLabelValues(metrics.WakeupPoll).Inc()
		case <-c.wake:
			// Every insert wakes every replica: one woken round per wakeGap at most.
			_ = clock.Sleep(ctx, c.clock, wakeGap-clock.Since(c.clock, lastRound))
		}
	}
}

const (
	maxClaimStretch = 8                     // a round's deadline stretches to at most 8 × OpTimeout
	claimRetryMax   = 30 * time.Second      // longest wait after a failed round
	maxPagesPerWake = 8                     // rounds paging past a blocked head before waiting again
	wakeGap         = 50 * time.Millisecond // least time between a round and a woken one
	claimCleanup    = 10 * time.Second      // a failed or cancelled round deleting the leases it wrote
	streamClose     = 3 * time.Second       // closing a change stream once ctx ends
)

// LongestClaimPass is the longest claim-loop pass (0: the default OpTimeout), which a
// watchdog fed by Deps.AfterClaim must allow: the most stretched round, its cleanup, the longest wait after.
func LongestClaimPass(opTimeout time.Duration) time.Duration {
	return maxClaimStretch*cmp.Or(opTimeout, DefaultOpTimeout) + claimCleanup + claimRetryMax
}

// ShutdownBudget is the longest Run takes from the end of its context to its
// return (0: the defaults) when MongoDB answers nothing: the cancelled round's
// cleanup (as the change streams close), the refreshes', the final flush's.
func ShutdownBudget(opTimeout, shutdownTimeout time.Duration) time.Duration {
	return max(claimCleanup, streamClose) + cmp.Or(shutdownTimeout, DefaultShutdownTimeout) + cmp.Or(opTimeout, DefaultOpTimeout)
}

// contentionDelay is a random wait in [0, wakeGap·2^(k−1)], at most
// PollInterval, after the k-th contended round in a row: full jitter.
func (c *Consumer) contentionDelay() time.Duration {
	ceiling := min(wakeGap<<min(c.contention-1, 10), c.cfg.PollInterval)
	return time.Duration(c.claimRnd.Int64N(int64(ceiling) + 1))
}

// claimPass is what one claim-loop pass did: ran, a round ran (there was
// room); more, more work may wait; paged, the next round reads past this window.
type claimPass struct{ ran, more, paged bool }

func (c *Consumer) claimOnce(ctx, workCtx context.Context, refreshes *sync.WaitGroup, timeout time.Duration) (claimPass, error) {
	room := c.room()
	if room <= 0 || !c.wantMore() {
		return claimPass{}, nil
	}
	// Shutdown cancels a round in flight (its wins would only be released); it cleans up within claimCleanup.
	opCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := c.clock.Now()
	c.mu.Lock()
	exclude := slices.Collect(maps.Keys(c.held))
	absorb := AbsorbLimit - c.heldE
	c.mu.Unlock()
	res, err := c.claimer.round(opCtx, room, absorb, exclude)
	c.metrics.ClaimDuration.Observe(clock.Since(c.clock, start).Seconds())
	if res != nil {
		c.dead.addMalformed(res.malformed)
	}
	if err != nil {
		return claimPass{ran: true}, err
	}
	if res.contended() {
		c.contention++
	} else {
		c.contention = 0
	}
	entries := c.hold(ctx, workCtx, refreshes, res.works)
	if len(res.works) > 0 || len(res.malformed) > 0 {
		c.log.Debug("claim batch", "users", len(res.works), "entries", entries, "malformed", len(res.malformed), "room", room, "duration", clock.Since(c.clock, start))
	}
	// Again at once only after progress: a full window of malformed entries
	// or of users other replicas won would otherwise spin the loop.
	more := len(res.works) > 0 && (res.windowFull || len(res.works) == room)
	c.mu.Lock()
	c.backlog = more
	c.mu.Unlock()
	return claimPass{ran: true, more: more, paged: res.paged}, nil
}

// hold records the users a round won as held and hands them to refresh slots
// (the waiting join the batcher's line at once); it returns their entries.
func (c *Consumer) hold(ctx, workCtx context.Context, refreshes *sync.WaitGroup, works []work) (entries int) {
	var batchable []work
	c.mu.Lock()
	for _, w := range works {
		c.held[w.lease.User] = w.lease
		c.heldN[w.lease.User] = len(w.entries)
		c.heldE += len(w.entries)
		entries += len(w.entries)
		if len(w.entries) > 0 && w.lease.Attempts < c.cfg.MaxAttempts && !w.lease.Solo {
			batchable = append(batchable, w) // (process settles the others at once, without a slot)
		}
	}
	c.queued += len(works)
	c.metrics.UsersInFlight.Set(float64(len(c.held)))
	c.mu.Unlock()
	c.metrics.EntriesClaimed.Add(float64(entries))
	c.batches.add(batchable...)
	for _, w := range works {
		refreshes.Go(func() { c.process(ctx, workCtx, w) })
	}
	return entries
}

// process waits for a refresh slot on behalf of one claimed user, then runs
// the batch it takes from the users waiting (which need not hold that user)
// on workCtx. Shutdown (ctx) releases a refresh not started.
func (c *Consumer) process(ctx, workCtx context.Context, w work) {
	if len(w.entries) == 0 || w.lease.Attempts >= c.cfg.MaxAttempts {
		o := outcome{work: w, release: true} // acknowledged by someone else between window and absorb
		if len(w.entries) > 0 {              // its holders kept dying mid-refresh: it would likely kill this one too
			o = outcome{work: w, err: fmt.Errorf("%d consumers lost their lease on this user mid-refresh (crashed or hung); not refreshing it again", w.lease.Attempts)}
		}
		c.dequeued(1)
		c.acks.add(o)
		return
	}
	var works []work
	err := c.limiter.Acquire(ctx)
	switch {
	case err != nil || ctx.Err() != nil:
		// A slot granted after ctx ended starts nothing either.
		if err == nil {
			c.limiter.Release()
		}
		works = []work{w}
		if !w.lease.Solo {
			works = c.batches.drop()
		}
		c.dequeued(len(works))
		for _, w := range works {
			c.acks.add(outcome{work: w, release: true})
		}
		return
	case w.lease.Solo:
		// Its last batch failed as a whole: alone, it is charged only if it breaks batches.
		works = c.batches.hold(w)
	default:
		works = c.batches.take(c.limiter.Limit(), c.batchSize())
		if len(works) == 0 {
			c.limiter.Release() // the users it came for went with other slots
			return
		}
	}
	c.dequeued(len(works))
	c.runBatch(workCtx, works)
}

func (c *Consumer) runBatch(workCtx context.Context, works []work) {
	finished := func(bool, bool) {}
	if o, ok := c.limiter.(interface {
		RefreshStarted() func(overload, cancelled bool)
	}); ok { // adaptive.Limiter
		finished = o.RefreshStarted()
	}
	leases := mapped(works, func(w work) lease { return w.lease })
	markCtx, cancelMark := context.WithTimeout(workCtx, c.cfg.OpTimeout)
	err := c.leases.mark(markCtx, leases...)
	cancelMark()
	if err != nil {
		c.log.Debug("marking refreshes as running failed; a crash in them would not be charged", "op", "mark running", "users", len(leases), "err", err)
	}
	errs := c.refreshBatch(workCtx, works)
	c.batches.done()
	c.limiter.Release()
	finished(slices.ContainsFunc(errs, transient), workCtx.Err() != nil)
	// Several failed as a whole (a shared query, write or deadline), not for MongoDB being unreachable.
	wide := len(errs) >= 2 && !slices.ContainsFunc(errs, func(err error) bool { return err == nil || transient(err) })
	if wide && workCtx.Err() == nil {
		c.settleBatchFailure(works, errs)
		return
	}
	for i, w := range works {
		c.settleRefresh(workCtx, w, errs[i])
	}
}

// settleBatchFailure charges nobody for a batch that failed as a whole: each
// member backs off (all retrying at once would load a struggling server) and
// refreshes alone next time (lease.Solo); the batch is one failure in failureWindow.
func (c *Consumer) settleBatchFailure(works []work, errs []error) {
	c.failures.record(c.serverTime.Now(), true)
	c.metrics.Refreshes.WithLabelValues(metrics.OutcomeError).Add(float64(len(works)))
	c.log.Warn("refresh batch failed as a whole; nobody charged, its users refresh alone next time",
		"op", "refresh", "users", len(works), "err", errs[0])
	for i, w := range works {
		c.acks.add(outcome{work: w, err: errs[i], transient: true, solo: true})
	}
}

func (c *Consumer) settleRefresh(workCtx context.Context, w work, err error) {
	if err != nil && workCtx.Err() != nil {
		// Cancelled by shutdown, not the user's fault: no attempt counted.
		c.acks.add(outcome{work: w, release: true})
		return
	}
	isTransient := transient(err)
	now := c.serverTime.Now()
	if !isTransient {
		c.failures.record(now, err != nil)
	}
	uncharged := isTransient || (err != nil && c.failures.widespread(now))
	if err != nil {
		c.metrics.Refreshes.WithLabelValues(metrics.OutcomeError).Inc()
		c.log.Warn("refresh failed", "op", "refresh", "transient", isTransient, "charged", !uncharged,
			"attempt", w.lease.Attempts+1, "max_attempts", c.cfg.MaxAttempts, "entries", len(w.entries), "err", err)
	} else {
		c.metrics.Refreshes.WithLabelValues(metrics.OutcomeOK).Inc()
	}
	c.acks.add(outcome{work: w, err: err, transient: uncharged})
}

// dequeued notes claimed users that stopped waiting for a slot (started, or
// never will): a line shorter than the slots means claim more now.
func (c *Consumer) dequeued(n int) {
	c.mu.Lock()
	c.queued -= n
	c.mu.Unlock()
	c.roomWake()
}

// roomWake wakes the claim loop when refreshers are about to run dry and
// there is room for a round worth its cost (roomFloor).
func (c *Consumer) roomWake() {
	c.mu.Lock()
	backlog := c.backlog
	c.mu.Unlock()
	if backlog && c.wantMore() && c.room() >= c.roomFloor() {
		c.metrics.Wakeups.WithLabelValues(metrics.WakeupRoom).Inc()
		c.wake.notify()
	}
}

// settled is called by the acker and the dead-letter lane once users' outcomes are in MongoDB.
func (c *Consumer) settled(users []lease) {
	c.mu.Lock()
	for _, l := range users {
		if cur, ok := c.held[l.User]; ok && cur.Token == l.Token {
			delete(c.held, l.User)
			c.heldE -= c.heldN[l.User]
			delete(c.heldN, l.User)
		}
	}
	c.metrics.UsersInFlight.Set(float64(len(c.held)))
	c.mu.Unlock()
	c.roomWake()
}

// maxHeld is MAX_USERS_IN_FLIGHT, never more than LeadFactor × the refresh
// slots: a limit cut by the adaptive policy must not leave dozens of leases
// waiting behind one slot while other replicas have room.
func (c *Consumer) maxHeld() int { return min(c.cfg.MaxUsersInFlight, LeadFactor*c.slots()) }

// room is how many more users one claim round may take.
func (c *Consumer) room() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.heldE >= AbsorbLimit {
		return 0 // enough entries in memory: settle some first
	}
	return c.maxHeld() - len(c.held)
}

// roomFloor is the least room a room wake-up waits for: with batches
// wantMore never binds, and a round per user settled would cost too much.
func (c *Consumer) roomFloor() int { return max(1, c.maxHeld()/8) }

// slots is how many users can be refreshing at once.
func (c *Consumer) slots() int { return c.limiter.Limit() * c.batchSize() }

// batchSize is Config.BatchSize, BatchAuto resolved by the server's traits (MongoDB's until it answered).
func (c *Consumer) batchSize() int {
	if c.cfg.BatchSize != BatchAuto {
		return c.cfg.BatchSize
	}
	if c.traits.PushesInDown() || !c.traits.PushesEqualityDown() {
		return DefaultBatchSize
	}
	c.perUser.Do(func() {
		c.log.Info("refreshing one user per slot: this server answers a batch's $in by decoding the whole collection (FerretDB), slower than per-user queries; REFRESH_BATCH_SIZE forces batches", "server", c.traits.Info().FerretDB)
	})
	return 1
}

// wantMore says a claim round is worth its cost now: there is room, and fewer
// users wait than there are slots (busy slots, little leased beyond them).
func (c *Consumer) wantMore() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held) < c.maxHeld() && c.queued < c.slots()
}

func (c *Consumer) renewOnce(ctx context.Context) error {
	c.mu.Lock()
	held := slices.Collect(maps.Values(c.held))
	c.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	n, err := c.leases.renew(opCtx, held, c.serverTime.Now().Add(c.cfg.LeaseDuration))
	if err != nil {
		return err
	}
	// Fewer is normal (users settled meanwhile); a lost lease shows at its release.
	c.log.Debug("leases renewed", "held", len(held), "renewed", n)
	return nil
}

// failureWindow tells a user's own failure from everything failing (a source
// down, the server crawling), which charging would turn into a dead-lettered
// healthy backlog. Outcomes count in two buckets of span: failure is widespread
// while the last span to 2·span holds minSample refreshes or more, over half failed.
type failureWindow struct {
	span      time.Duration
	minSample int

	mu        sync.Mutex
	start     time.Time // start of the current bucket
	cur, prev bucket
}

type bucket struct{ ok, failed int }

func (w *failureWindow) record(now time.Time, failed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roll(now)
	if failed {
		w.cur.failed++
	} else {
		w.cur.ok++
	}
}

func (w *failureWindow) widespread(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roll(now)
	ok, failed := w.cur.ok+w.prev.ok, w.cur.failed+w.prev.failed
	return ok+failed >= w.minSample && failed*2 > ok+failed
}

func (w *failureWindow) roll(now time.Time) {
	switch d := now.Sub(w.start); {
	case w.start.IsZero() || d >= 2*w.span || d < 0:
		w.start, w.cur, w.prev = now, bucket{}, bucket{}
	case d >= w.span:
		w.start, w.prev, w.cur = w.start.Add(w.span), w.cur, bucket{}
	}
}

// mapped is f of every element of xs, in order.
func mapped[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}
