//go:build !oldrelease

package bench

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// BatchedConfig is the batched scenario's settings (flags -batched-*): per-user recompute
// (REFRESH_BATCH_SIZE=1) against batched, side by side in one run.
type BatchedConfig struct {
	// Configs, NoMaxConfigs, CountConfigs, LoadConfigs and FarConfigs are
	// comma-separated REFRESH_BATCH_SIZE[xMAX_USERS_IN_FLIGHT][cREFRESH_CONCURRENCY]
	// lists (parseConfigs).
	Configs      string        // diverse drains with the bench's rules
	NoMaxConfigs string        // diverse drains with the rules without max components
	CountConfigs string        // diverse drains with the rules of 12 count components (empty: none)
	LoadConfigs  string        // wedge and recovery runs
	FarConfigs   string        // diverse drains again at FarRTT (empty: none)
	Entries      int           // diverse backlog, entries of distinct users
	DrainMax     time.Duration // cap on each drain
	WedgeFor     time.Duration // how long each wedge run's producer runs
	FarRTT       time.Duration // RTT of the FarConfigs drains
}

func batchedFlags(fs *flag.FlagSet, o *BatchedConfig) {
	fs.StringVar(&o.Configs, "batched-configs", "1,16,16x256,64x256", "batched: diverse drains with the bench's rules, each REFRESH_BATCH_SIZE[xMAX_USERS_IN_FLIGHT][cREFRESH_CONCURRENCY] (default in flight 64, concurrency -concurrency); 1 is the per-user recompute, 0 leaves REFRESH_BATCH_SIZE unset (the service's default: by the server), 1c1 is one slot")
	fs.StringVar(&o.NoMaxConfigs, "batched-nomax", "1,16,16x256", "batched: diverse drains with the rules without max components (the command shape batching has on MongoDB)")
	fs.StringVar(&o.CountConfigs, "batched-count12", "", "batched: diverse drains with rules of 12 count components (rules-count12.yaml); a one-slot configuration (such as 1c1) among them is the baseline of a table against it (empty: none)")
	fs.StringVar(&o.LoadConfigs, "batched-load", "1,16,16x256", "batched: configurations of the wedge and recovery runs")
	fs.IntVar(&o.Entries, "batched-entries", 4000, "batched: diverse backlog, entries of distinct users")
	fs.DurationVar(&o.DrainMax, "batched-max", 60*time.Second, "batched: each drain is measured for at most this long (the per-user one does not finish; its rate is steady)")
	fs.StringVar(&o.FarConfigs, "batched-far", "1,16,16x256", "batched: diverse drains again at -batched-far-rtt, where every configuration is latency-bound, far below the server's capacity (empty: none)")
	fs.DurationVar(&o.FarRTT, "batched-far-rtt", 200*time.Millisecond, "batched: RTT of the -batched-far drains")
	fs.DurationVar(&o.WedgeFor, "batched-wedge", 3*time.Minute, "batched: how long each wedge run's producer runs (recovery uses -recovery-pre, -trigger, -recovery-max)")
}

func shrinkBatched(shrink func(string, func()), o *BatchedConfig) {
	shrink("batched-configs", func() { o.Configs = "1,16" })
	shrink("batched-nomax", func() { o.NoMaxConfigs = "16" })
	shrink("batched-count12", func() { o.CountConfigs = "1c1,0" })
	shrink("batched-load", func() { o.LoadConfigs = "16" })
	shrink("batched-entries", func() { o.Entries = 60 })
	shrink("batched-max", func() { o.DrainMax = 20 * time.Second }) // a cap: a 60-entry drain ends when drained
	shrink("batched-wedge", func() { o.WedgeFor = 4 * time.Second })
	shrink("batched-far", func() { o.FarConfigs = "16" })
	shrink("batched-far-rtt", func() { o.FarRTT = 50 * time.Millisecond })
}

// Rule sets of the batched scenario.
const (
	rulesBench = "bench" // rules.yaml: 12 components, 2 of them max
	rulesNoMax = "nomax" // rules-nomax.yaml: 12 components, none max
	// rules-count12.yaml: 12 count components, the simplest query there is,
	// so a drain's figures are the pipeline's and the latency's, not a
	// heavy accumulator's.
	rulesCount12 = "count12"
)

// ruleSetYAML is the file of each rule set the bench writes beside the
// results (rulesBench is rules.yaml, written by New).
var ruleSetYAML = map[string]string{rulesNoMax: rulesNoMaxYAML, rulesCount12: rulesCount12YAML}

// rulesCount12YAML is 12 count components over the bench's 3 source
// collections, four windows each: 14 round trips per refresh, and per
// batch on any server (count has a $sum accumulator everywhere).
const rulesCount12YAML = `# scorerefresh-bench: 12 count components (14 round trips per refresh or batch on any server)
components:
  - {name: activity_events, collection: user_activity, userField: username, op: count, weight: 0.5}
  - {name: activity_events_90d, collection: user_activity, userField: username, op: count, weight: 0.5, window: 2160h}
  - {name: activity_events_30d, collection: user_activity, userField: username, op: count, weight: 1, window: 720h}
  - {name: activity_events_1d, collection: user_activity, userField: username, op: count, weight: 2, window: 24h}
  - {name: posts, collection: posts, userField: author, op: count, weight: 5}
  - {name: posts_90d, collection: posts, userField: author, op: count, weight: 1, window: 2160h}
  - {name: posts_30d, collection: posts, userField: author, op: count, weight: 2, window: 720h}
  - {name: posts_1d, collection: posts, userField: author, op: count, weight: 4, window: 24h}
  - {name: reviews, collection: reviews, userField: reviewer, op: count, weight: 3}
  - {name: reviews_90d, collection: reviews, userField: reviewer, op: count, weight: 1, window: 2160h}
  - {name: reviews_30d, collection: reviews, userField: reviewer, op: count, weight: 2, window: 720h}
  - {name: reviews_1d, collection: reviews, userField: reviewer, op: count, weight: 4, window: 24h}
`

// rulesNoMaxYAML is the bench's rules with each max component replaced by a
// sum over the same documents: still 12 components, so a batch costs 14
// round trips on FerretDB as it would on MongoDB, which has the $max
// accumulator FerretDB 1.24 lacks.
const rulesNoMaxYAML = `# scorerefresh-bench: rules.yaml without max components (14 round trips per batch on any server)
components:
  - {name: activity_points, collection: user_activity, userField: username, op: sum, field: points, weight: 1, window: 720h}
  - {name: activity_recent, collection: user_activity, userField: username, op: sum, field: points, weight: 2, window: 24h}
  - {name: activity_events, collection: user_activity, userField: username, op: count, weight: 0.5}
  - {name: activity_total, collection: user_activity, userField: username, op: sum, field: points, weight: 0.1}
  - {name: activity_kinds, collection: user_activity, userField: username, op: distinct, field: kind, weight: 3}
  - {name: posts, collection: posts, userField: author, op: count, weight: 5}
  - {name: post_likes, collection: posts, userField: author, op: sum, field: likes, weight: 0.1}
  - {name: post_recent_likes, collection: posts, userField: author, op: sum, field: likes, weight: 0.2, window: 720h}
  - {name: post_topics, collection: posts, userField: author, op: distinct, field: topic, weight: 2, window: 2160h}
  - {name: reviews, collection: reviews, userField: reviewer, op: count, weight: 3}
  - {name: review_stars, collection: reviews, userField: reviewer, op: sum, field: stars, weight: 1, window: 720h}
  - {name: review_products, collection: reviews, userField: reviewer, op: distinct, field: product, weight: 1}
`

// batchConfig is one configuration of the service under test.
type batchConfig struct {
	Label            string `json:"label"`
	Rules            string `json:"rules"`
	BatchSize        int    `json:"batch_size"`          // REFRESH_BATCH_SIZE; 0: unset, the service's default (by the server)
	MaxUsersInFlight int    `json:"max_users_in_flight"` // MAX_USERS_IN_FLIGHT
	// Concurrency is REFRESH_CONCURRENCY; 0: the bench's -concurrency.
	Concurrency int `json:"refresh_concurrency,omitempty"`
	// Effective is the most users a slot refreshes together: BatchSize, or
	// what the service's default resolves to on this server.
	Effective int `json:"effective_batch_size"`
}

func (c batchConfig) env() []string {
	env := []string{fmt.Sprintf("MAX_USERS_IN_FLIGHT=%d", c.MaxUsersInFlight)}
	if c.BatchSize != 0 {
		env = append(env, fmt.Sprintf("REFRESH_BATCH_SIZE=%d", c.BatchSize))
	}
	return env
}

func (c batchConfig) perUser() bool { return c.BatchSize == 1 }

// perSlot is the most users a slot refreshes together: Effective once
// resolved, else REFRESH_BATCH_SIZE as given.
func (c batchConfig) perSlot() int { return cmp.Or(c.Effective, c.BatchSize) }

// oneSlot is the baseline of the table against one slot: one user at a
// time, REFRESH_CONCURRENCY=1.
func (c batchConfig) oneSlot() bool { return c.Concurrency == 1 && c.BatchSize == 1 }

// slots is the configuration's REFRESH_CONCURRENCY.
func (c batchConfig) slots(benchDefault int) int { return cmp.Or(c.Concurrency, benchDefault) }

// parseConfigs reads "1c1,1,0,16x256": REFRESH_BATCH_SIZE (0: unset, the
// service's default), optionally x MAX_USERS_IN_FLIGHT (default 64, the
// service's), optionally c REFRESH_CONCURRENCY (default the bench's
// -concurrency).
func parseConfigs(s, rules string) ([]batchConfig, error) {
	var out []batchConfig
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		c, err := parseConfig(f)
		if err != nil {
			return nil, fmt.Errorf("configuration %q: want REFRESH_BATCH_SIZE[xMAX_USERS_IN_FLIGHT][cREFRESH_CONCURRENCY], such as 16x256 or 1c1", f)
		}
		c.Rules = rules
		out = append(out, c)
	}
	return out, nil
}

func parseConfig(f string) (batchConfig, error) {
	c := batchConfig{MaxUsersInFlight: 64}
	rest, slots, hasSlots := strings.Cut(f, "c")
	bs, inflight, hasInflight := strings.Cut(rest, "x")
	var err error
	if c.BatchSize, err = strconv.Atoi(bs); err != nil || c.BatchSize < 0 {
		return c, errors.New("bad REFRESH_BATCH_SIZE")
	}
	if hasInflight {
		if c.MaxUsersInFlight, err = strconv.Atoi(inflight); err != nil || c.MaxUsersInFlight < 1 {
			return c, errors.New("bad MAX_USERS_IN_FLIGHT")
		}
	}
	if hasSlots {
		if c.Concurrency, err = strconv.Atoi(slots); err != nil || c.Concurrency < 1 {
			return c, errors.New("bad REFRESH_CONCURRENCY")
		}
	}
	switch {
	case c.perUser():
		c.Label = fmt.Sprintf("per-user, in flight %d", c.MaxUsersInFlight)
	case c.BatchSize == 0:
		c.Label = fmt.Sprintf("default batch (unset), in flight %d", c.MaxUsersInFlight)
	default:
		c.Label = fmt.Sprintf("batch %d, in flight %d", c.BatchSize, c.MaxUsersInFlight)
	}
	if c.Concurrency > 0 {
		c.Label = fmt.Sprintf("%s, %d %s", c.Label, c.Concurrency, map[bool]string{true: "slot", false: "slots"}[c.Concurrency == 1])
	}
	c.Effective = c.BatchSize
	return c, nil
}

// batchRun is one configuration's run with what the bench read beside it.
type batchRun struct {
	Config batchConfig `json:"config"`
	Run    *runResult  `json:"run"`
	// AckedAfterStop includes the final flush at shutdown, which acknowledges
	// the refreshes a capped run left running: the denominator of
	// CommandsPerAcked, whose numerator counts their commands too.
	AckedAfterStop   float64      `json:"acked_after_stop"`
	CommandsPerAcked float64      `json:"commands_per_acked_entry"`
	UsersPerBatch    float64      `json:"users_per_batch"`
	TripsPerUser     float64      `json:"refresh_round_trips_per_user"`
	DeadLettered     float64      `json:"dead_lettered"`
	CPU              cpuSplit     `json:"cpu"`
	PerEntry         perEntry     `json:"cpu_ms_per_entry"`
	Bounds           configBounds `json:"bounds"`
	FractionOfLower  float64      `json:"fraction_of_lower_bound"`
	// Saturated is the drain while the backlog kept every slot's users
	// coming: the measured ack rate against the service's capacity estimate.
	Saturated saturation `json:"saturated"`
}

// batchedResult is the batched scenario.
type batchedResult struct {
	Entries      int        `json:"entries"`
	MaxSeconds   float64    `json:"max_seconds"`
	WedgeSeconds float64    `json:"wedge_seconds"`
	Calibrations []batchCal `json:"calibrations"`
	Diverse      []batchRun `json:"diverse"`
	Far          []batchRun `json:"far"`
	FarRTTms     float64    `json:"far_rtt_ms"`
	Wedge        []batchRun `json:"wedge"`
	WedgeRate    float64    `json:"wedge_arrival_rate"`
	Recovery     []batchRun `json:"recovery"`
	RecoveryRate float64    `json:"recovery_arrival_rate"`
	TriggerAt    float64    `json:"trigger_at"`
	RestoreAt    float64    `json:"restore_at"`
	TriggerRTTms float64    `json:"trigger_rtt_ms"`
	// Per recovery run, in Recovery's order: seconds after restore until
	// the oldest age was back under its pre-trigger level (-1: never).
	Recovered []float64 `json:"recovered_after_restore"`
	PreLevels []float64 `json:"pre_trigger_oldest_age"`
	Profiled  bool      `json:"cpu_split"` // false when -cpuprofile held the profiler
}

// rulesFile writes the rule set's file next to the results and returns its path.
func (b *Bench) rulesFile(name string) (string, error) {
	if name == rulesBench {
		return b.rulesPath, nil
	}
	yaml, ok := ruleSetYAML[name]
	if !ok {
		return "", fmt.Errorf("no rule set %q", name)
	}
	p, err := filepath.Abs(filepath.Join(b.cfg.Out, "rules-"+name+".yaml"))
	if err != nil {
		return "", err
	}
	return p, os.WriteFile(p, []byte(yaml), 0o644)
}

// runBatchConfig runs spec with the configuration c and reads the batch
// metrics, CPU split and commands per acknowledged entry beside it.
func (b *Bench) runBatchConfig(ctx context.Context, c batchConfig, spec runSpec) (batchRun, error) {
	r := batchRun{Config: c}
	path, err := b.rulesFile(c.Rules)
	if err != nil {
		return r, err
	}
	var svc *scorerefresh
	watch := newCPUWatch(b.srv.pgPID)
	snaps := &capacitySnaps{every: b.cfg.SampleEvery}
	inner := spec.observe
	spec.concurrency = c.slots(b.cfg.Concurrency)
	spec.observe = func(elapsed time.Duration, run running) {
		watch.tick()
		if s, ok := run.(*scorerefresh); ok {
			svc = s
			snaps.observe(elapsed, s)
		}
		if inner != nil {
			inner(elapsed, run)
		}
	}
	savedRules := b.rulesPath
	b.rulesPath = path
	err = b.withEnv(c.env(), func() (err error) { r.Run, err = b.measure(ctx, spec); return err })
	b.rulesPath = savedRules
	r.CPU = watch.stop()
	if err != nil {
		return r, err
	}
	r.PerEntry = r.CPU.perEntry(r.Run.Acked)
	if svc != nil {
		r.AckedAfterStop = svc.acked()
		r.UsersPerBatch, r.TripsPerUser = svc.batchSizes()
		r.DeadLettered = svc.deadLetteredAnyReason()
	}
	if r.AckedAfterStop > 0 {
		r.CommandsPerAcked = total(r.Run.Commands) / r.AckedAfterStop
	}
	r.Saturated = saturatedDrain(r.Run, snaps.list, c.MaxUsersInFlight, spec.concurrency)
	b.logf("      %s: %.2f users per batch, %.2f refresh round trips per user, %.2f commands per acknowledged entry; CPU ms/entry: process %.2f (consumer %.2f, proxy %.2f, server in process %.2f), PostgreSQL %.2f",
		c.Label, r.UsersPerBatch, r.TripsPerUser, r.CommandsPerAcked, r.PerEntry.Process, r.PerEntry.Consumer, r.PerEntry.Proxy, r.PerEntry.Server, r.PerEntry.PostgreSQL)
	return r, nil
}

// batchSizes are the instances' mean users per batch and refresh round
// trips per user, averaged over the instances.
func (s *scorerefresh) batchSizes() (usersPerBatch, tripsPerUser float64) {
	for _, svc := range s.svcs {
		n, sum := histogram(svc.Metrics.RefreshBatchUsers)
		if n > 0 {
			usersPerBatch += sum / n / float64(len(s.svcs))
		}
		if sum > 0 {
			tripsPerUser += metrics.Read(svc.Metrics.RefreshRoundTrips) / sum / float64(len(s.svcs))
		}
	}
	return usersPerBatch, tripsPerUser
}

func (b *Bench) batched(ctx context.Context, referenceRate float64) (*batchedResult, error) {
	o := b.cfg.Batched
	x := &batchedResult{Entries: o.Entries, MaxSeconds: o.DrainMax.Seconds(), WedgeSeconds: o.WedgeFor.Seconds(), Profiled: b.cfg.CPUProfile == ""}
	sets, err := o.configSets()
	if err != nil {
		return nil, err
	}
	if err := b.resolveBatchSizes(ctx, sets); err != nil {
		return nil, err
	}
	b.logf("\n== batched recompute: per-user (REFRESH_BATCH_SIZE=1) against batched, RTT %s", b.cfg.RTT)
	cals, err := b.calibrateBatches(ctx, x, append(append(append([]batchConfig{}, sets.diverse...), sets.load...), sets.far...))
	if err != nil {
		return nil, err
	}
	b.logf("  diverse drains: %d entries of distinct users, each at most %s", o.Entries, o.DrainMax)
	backlog := diverseBacklog(o.Entries, time.Now(), b.cfg.Seed+3)
	if x.Diverse, err = b.batchedDrains(ctx, func(c batchConfig) string { return "batched-" + c.Rules + "-" + configTag(c) }, sets.diverse, backlog, b.cfg.RTT, cals); err != nil {
		return nil, err
	}
	x.FarRTTms = ms(o.FarRTT)
	if len(sets.far) > 0 {
		b.logf("  diverse drains at RTT %s: every configuration latency-bound", o.FarRTT)
	}
	if x.Far, err = b.batchedDrains(ctx, func(c batchConfig) string { return "batched-far-" + configTag(c) }, sets.far, backlog, o.FarRTT, cals); err != nil {
		return nil, err
	}
	// Wedge and recovery load from the per-user rate, as scenarios 3 and 4
	// do, so every configuration gets the same arrivals.
	perUserRate := perUserRate(x.Diverse, 0.9*b.cal.bounds(b.cfg.RTT, b.cfg.Concurrency).Lower)
	x.WedgeRate = math.Min(b.cfg.WedgeFactor*referenceRate, 0.8*perUserRate)
	if err := b.batchedWedge(ctx, x, sets.load); err != nil {
		return nil, err
	}
	if err := b.batchedRecovery(ctx, x, sets.load, perUserRate); err != nil {
		return nil, err
	}
	b.targets = append(b.targets, x.targets()...)
	return x, nil
}

// batchConfigSets are the batched scenario's configurations by use.
type batchConfigSets struct{ diverse, load, far []batchConfig }

// configSets parses the configuration lists: the diverse drains with both
// rule sets, the wedge and recovery runs, the far drains.
func (o BatchedConfig) configSets() (batchConfigSets, error) {
	var sets batchConfigSets
	for _, set := range []struct{ spec, rules string }{{o.Configs, rulesBench}, {o.NoMaxConfigs, rulesNoMax}, {o.CountConfigs, rulesCount12}} {
		cs, err := parseConfigs(set.spec, set.rules)
		if err != nil {
			return sets, err
		}
		sets.diverse = append(sets.diverse, cs...)
	}
	var err error
	if sets.load, err = parseConfigs(o.LoadConfigs, rulesBench); err != nil {
		return sets, err
	}
	sets.far, err = parseConfigs(o.FarConfigs, rulesBench)
	return sets, err
}

// calibrateBatches calibrates each rule set and batch size the
// configurations use, once, keyed by calKey.
func (b *Bench) calibrateBatches(ctx context.Context, x *batchedResult, configs []batchConfig) (map[string]batchCal, error) {
	b.logf("  calibrating batches (direct connection, no proxy)")
	cals := map[string]batchCal{}
	for _, c := range configs {
		if _, done := cals[calKey(c)]; done {
			continue
		}
		path, err := b.rulesFile(c.Rules)
		if err != nil {
			return nil, err
		}
		cal, err := b.calibrateBatch(ctx, c.Rules, path, c.perSlot(), b.cfg.CalibrationRefreshes, b.cfg.CalibrationLevelTime)
		if err != nil {
			return nil, fmt.Errorf("calibrating batches of %d (%s rules): %w", c.perSlot(), c.Rules, err)
		}
		cals[calKey(c)] = cal
		x.Calibrations = append(x.Calibrations, cal)
		b.logf("    %s rules, batch %d: %.1f round trips, %.1f ms per batch (%.2f ms per query); capacity %.0f users/s (%d batches at once)",
			cal.Rules, cal.BatchSize, cal.RoundTrips, cal.BatchMs, cal.ServerMs, cal.Capacity, cal.Workers)
	}
	return cals, nil
}

func calKey(c batchConfig) string { return fmt.Sprintf("%s/%d", c.Rules, c.perSlot()) }

// resolveBatchSizes sets Effective of the configurations that leave
// REFRESH_BATCH_SIZE unset to what the service picks on this server
// (consumer.Consumer.batchSize): DefaultBatchSize where the server answers
// $in from an index, one user per slot on FerretDB.
func (b *Bench) resolveBatchSizes(ctx context.Context, sets batchConfigSets) error {
	traits := servertraits.New()
	for _, cs := range [][]batchConfig{sets.diverse, sets.load, sets.far} {
		for i := range cs {
			if cs[i].BatchSize != 0 {
				continue
			}
			if err := traits.Probe(ctx, b.direct.Database("admin")); err != nil {
				return fmt.Errorf("resolving the default REFRESH_BATCH_SIZE: %w", err)
			}
			cs[i].Effective = 1
			if traits.PushesInDown() {
				cs[i].Effective = consumer.DefaultBatchSize
			}
		}
	}
	return nil
}

// batchedDrains drains backlog at rtt with each configuration; scenario
// names each run.
func (b *Bench) batchedDrains(ctx context.Context, scenario func(batchConfig) string, configs []batchConfig, backlog []any, rtt time.Duration, cals map[string]batchCal) ([]batchRun, error) {
	var runs []batchRun
	for _, c := range configs {
		r, err := b.runBatchConfig(ctx, c, runSpec{scenario: scenario(c), consumer: consumerScorerefresh,
			rtt: rtt, backlog: backlog, max: b.cfg.Batched.DrainMax})
		if err != nil {
			return nil, err
		}
		r.Bounds = b.configBounds(cals[calKey(c)], c, rtt)
		r.FractionOfLower = fin(r.Run.Rate / r.Bounds.Lower)
		runs = append(runs, r)
	}
	return runs, nil
}

// perUserRate is the per-user drain rate with the bench's rules, or
// fallback if it did not run.
func perUserRate(diverse []batchRun, fallback float64) float64 {
	rate := fallback
	for _, r := range diverse {
		if r.Config.perUser() && r.Config.Concurrency == 0 && r.Config.Rules == rulesBench {
			rate = r.Run.Rate
		}
	}
	return rate
}

// batchedWedge is scenario 3 for each configuration, at x.WedgeRate.
func (b *Bench) batchedWedge(ctx context.Context, x *batchedResult, load []batchConfig) error {
	if len(load) == 0 {
		return nil
	}
	b.logf("  wedge: diverse arrivals at %.1f/s for %s", x.WedgeRate, b.cfg.Batched.WedgeFor)
	for _, c := range load {
		r, err := b.runBatchConfig(ctx, c, runSpec{scenario: "batched-wedge-" + configTag(c), consumer: consumerScorerefresh, rtt: b.cfg.RTT,
			produce: &produce{rate: x.WedgeRate, pool: b.cfg.Pool}, max: b.cfg.Batched.WedgeFor + 30*time.Second, done: lastsAndDid(b.cfg.Batched.WedgeFor)})
		if err != nil {
			return err
		}
		x.Wedge = append(x.Wedge, r)
	}
	return nil
}

func configTag(c batchConfig) string {
	tag := fmt.Sprintf("b%d-f%d", c.BatchSize, c.MaxUsersInFlight)
	if c.Concurrency > 0 {
		tag += fmt.Sprintf("-c%d", c.Concurrency)
	}
	return tag
}

// batchedRecovery is scenario 4 for each configuration: the same arrivals
// (half the per-user rate), RTT × rtt-factor between the trigger and restore.
func (b *Bench) batchedRecovery(ctx context.Context, x *batchedResult, load []batchConfig, perUserRate float64) error {
	before, trigger := b.cfg.RecoveryBefore, b.cfg.TriggerFor
	x.RecoveryRate = 0.5 * perUserRate
	x.TriggerAt, x.RestoreAt = before.Seconds(), (before + trigger).Seconds()
	x.TriggerRTTms = ms(b.cfg.RTT) * b.cfg.TriggerRTTFactor
	if len(load) == 0 {
		return nil
	}
	b.logf("  recovery: arrivals at %.1f/s; RTT %s from %s to %s", x.RecoveryRate, b.slowRTT(), before, before+trigger)
	warm := before.Seconds() / 3
	for _, c := range load {
		r, err := b.runBatchConfig(ctx, c, runSpec{scenario: "batched-recovery-" + configTag(c), consumer: consumerScorerefresh, rtt: b.cfg.RTT,
			produce: &produce{rate: x.RecoveryRate, pool: b.cfg.Pool}, events: b.rttTrigger("trigger", before, trigger, b.slowRTT()),
			max: before + trigger + b.cfg.RecoveryMax, done: recoveredFor5s(warm, x.TriggerAt, x.RestoreAt)})
		if err != nil {
			return err
		}
		x.Recovery = append(x.Recovery, r)
		x.PreLevels = append(x.PreLevels, maxOldestIn(r.Run.Timeline, warm, x.TriggerAt))
		x.Recovered = append(x.Recovered, recoveredAfter(r.Run.Timeline, warm, x.TriggerAt, x.RestoreAt))
		b.logf("      %s: %s", c.Label, seconds(x.Recovered[len(x.Recovered)-1], "after restore"))
	}
	return nil
}

// perUserOf is the per-user run with the same rules as r at the bench's
// concurrency (not the one-slot baseline), or nil.
func (x *batchedResult) perUserOf(rules string) *batchRun {
	for i := range x.Diverse {
		if c := x.Diverse[i].Config; c.perUser() && c.Concurrency == 0 && c.Rules == rules {
			return &x.Diverse[i]
		}
	}
	return nil
}

// oneSlotOf is the one-slot runs with the given rules (more than one when
// the list repeats it, to see the machine drift between them).
func (x *batchedResult) oneSlotOf(rules string) []batchRun {
	var runs []batchRun
	for _, r := range x.Diverse {
		if r.Config.oneSlot() && r.Config.Rules == rules {
			runs = append(runs, r)
		}
	}
	return runs
}

// targets judge the batched drains against the per-user one, and each
// configuration's wedge and recovery.
func (x *batchedResult) targets() []target {
	var ts []target
	for _, r := range x.Diverse {
		// The targets judge batching: not the one-slot baseline, nor a
		// default that refreshes one user per slot on this server.
		if r.Config.perSlot() == 1 || r.Config.Concurrency == 1 {
			continue
		}
		name := fmt.Sprintf("batched, %s rules, %s", r.Config.Rules, r.Config.Label)
		if pu := x.perUserOf(r.Config.Rules); pu != nil && pu.Run.Rate > 0 {
			ratio := r.Run.Rate / pu.Run.Rate
			capFrac := r.Run.Rate / r.Bounds.Server
			serverFirst := 0.9*r.Bounds.Server < 3*pu.Run.Rate
			t := target{Scenario: name, Target: "diverse drain ≥ 3× the per-user rate, or ≥ 90% of the server's calibrated capacity if that binds first",
				Figure: fmt.Sprintf("%.1f vs %.1f entries/s per-user = %.1f×; %.0f%% of the server's %.0f users/s at batch %d (binds first: %s)",
					r.Run.Rate, pu.Run.Rate, ratio, 100*capFrac, r.Bounds.Server, r.Config.perSlot(), map[bool]string{true: "server", false: "3× per-user"}[serverFirst]),
				Value: ratio, Met: ratio >= 3 || (serverFirst && capFrac >= 0.9), Applies: true}
			ts = append(ts, t)
		}
		ts = append(ts, target{Scenario: name, Target: "MongoDB commands per acknowledged entry ≤ 1.5 on the diverse backlog",
			Figure: fmt.Sprintf("%.2f (per-user: %s)%s", r.CommandsPerAcked, perUserCommands(x, r.Config.Rules), maxNote(r.Config.Rules)),
			Value:  r.CommandsPerAcked, Met: r.CommandsPerAcked <= 1.5, Applies: true})
	}
	for _, r := range x.Wedge {
		age := maxOldest(r.Run.Timeline, 0)
		ts = append(ts, target{Scenario: "batched wedge, " + r.Config.Label, Target: "oldest age stays under 30 s",
			Figure: fmt.Sprintf("at most %.1f s at %.1f arrivals/s (depth %d at the end)", age, x.WedgeRate, last(r.Run.Timeline).Depth),
			Value:  age, Met: age < 30, Applies: true})
	}
	for i, r := range x.Recovery {
		t := x.Recovered[i]
		ts = append(ts, target{Scenario: "batched recovery, " + r.Config.Label, Target: "back under the pre-trigger oldest age ≤ 60 s after restore",
			Figure: fmt.Sprintf("%s (pre-trigger ≤ %.1f s; peak %.0f s)", seconds(t, "after restore"), x.PreLevels[i], maxOldest(r.Run.Timeline, x.TriggerAt)),
			Value:  t, Met: t >= 0 && t <= 60, Applies: true})
	}
	return ts
}

func perUserCommands(x *batchedResult, rules string) string {
	if pu := x.perUserOf(rules); pu != nil {
		return fmt.Sprintf("%.2f", pu.CommandsPerAcked)
	}
	return "not run"
}

func maxNote(rules string) string {
	if rules == rulesBench {
		return "; FerretDB 1.24 has no $max accumulator, so each of the 2 max components is one query per user"
	}
	return ""
}
