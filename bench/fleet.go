package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/metrics"
)

// The fleet and backoff-storm scenarios measure what the claim path asks of
// MongoDB as the fleet grows and as users back off. They use only what the
// first release's bench and service offered (plus app.Options.Monitor and
// WrapRefresher), so bench/fleet/run.sh runs this very code against v0.1.0
// and prints both side by side (-compare).

// FleetConfig is the two scenarios' settings (flags -fleet-*, -storm*,
// -label, -compare, -compare-label).
type FleetConfig struct {
	Entries  int           // entries of the backlog each fleet drains
	Users    int           // users the backlog's entries belong to
	Replicas string        // comma-separated fleet sizes
	RTT      time.Duration // RTT the proxy adds, in the fleet and the storm scenarios
	Idle     time.Duration // how long the idle fleet (queue empty) is measured
	Settle   time.Duration // pause between the drain and the idle measurement
	DrainMax time.Duration // cap on each drain
	Scorer   string        // scorerReal, or scorerInstant: refreshes succeed at once, the figures are the claim and ack path's

	StormUsers    int           // distinct users queued, one entry each
	StormReplicas int           // replicas draining them
	StormFailFor  time.Duration // how long every refresh fails
	StormMax      time.Duration // cap on each storm run
	StormScorer   string        // scorerInstant or scorerReal

	Label        string // name of the service version measured, in the report
	Compare      string // results.json of another version's run, reported side by side
	CompareLabel string // name of the Compare version (default: its Label)
}

func fleetFlags(fs *flag.FlagSet, o *FleetConfig) {
	fs.IntVar(&o.Entries, "fleet-entries", 2000, "fleet: entries of the backlog each fleet drains")
	fs.IntVar(&o.Users, "fleet-users", 1000, "fleet: users the backlog's entries belong to")
	fs.StringVar(&o.Replicas, "fleet-replicas", "1,4,16,32", "fleet: comma-separated fleet sizes (in-process replicas, each with its own client)")
	fs.DurationVar(&o.RTT, "fleet-rtt", 2*time.Millisecond, "fleet and storm: RTT the proxy adds")
	// 30 s, not less: the SLI sampler's 4 commands every 5 s land two or
	// three times in a 10 s window, which alone moves the idle figure by
	// a quarter.
	fs.DurationVar(&o.Idle, "fleet-idle", 30*time.Second, "fleet: how long the idle fleet (queue empty) is measured")
	fs.DurationVar(&o.Settle, "fleet-settle", 2*time.Second, "fleet: pause between the drain and the idle measurement")
	fs.DurationVar(&o.DrainMax, "fleet-max", 3*time.Minute, "fleet: cap on each drain")
	fs.StringVar(&o.Scorer, "fleet-scorer", scorerReal, "fleet: real (every refresh recomputes) or instant (refreshes succeed at once: the figures are the claim and ack path's, and the server is not loaded by refreshes)")
	fs.IntVar(&o.StormUsers, "storm-users", 20000, "storm: distinct users queued (one entry each)")
	fs.IntVar(&o.StormReplicas, "storm-replicas", 3, "storm: replicas")
	fs.DurationVar(&o.StormFailFor, "storm", 60*time.Second, "storm: how long every refresh fails")
	fs.DurationVar(&o.StormMax, "storm-max", 6*time.Minute, "storm: cap on each run")
	fs.StringVar(&o.StormScorer, "storm-scorer", scorerInstant, "storm: scorer when not failing: instant (succeeds at once: the drain measures the claim and ack path) or real")
	fs.StringVar(&o.Label, "label", "this build", "fleet and storm: name of the service version measured, in the report")
	fs.StringVar(&o.Compare, "compare", "", "fleet and storm: results.json of another version's run to report side by side")
	fs.StringVar(&o.CompareLabel, "compare-label", "", "fleet and storm: name of the -compare version (default: its -label)")
}

func shrinkFleet(shrink func(string, func()), o *FleetConfig) {
	shrink("fleet-entries", func() { o.Entries = 60 })
	shrink("fleet-users", func() { o.Users = 30 })
	shrink("fleet-replicas", func() { o.Replicas = "1,2" })
	shrink("fleet-idle", func() { o.Idle = time.Second })
	shrink("fleet-settle", func() { o.Settle = 300 * time.Millisecond })
	shrink("fleet-max", func() { o.DrainMax = 30 * time.Second })
	shrink("storm-users", func() { o.StormUsers = 100 })
	shrink("storm-replicas", func() { o.StormReplicas = 2 })
	shrink("storm", func() { o.StormFailFor = 1500 * time.Millisecond })
	shrink("storm-max", func() { o.StormMax = 30 * time.Second })
}

func (o FleetConfig) replicaCounts() ([]int, error) {
	var ns []int
	for _, f := range strings.Split(o.Replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-fleet-replicas %q: want positive integers separated by commas", o.Replicas)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func (o FleetConfig) validate() error {
	if _, err := o.replicaCounts(); err != nil {
		return err
	}
	if o.Entries <= 0 || o.Users <= 0 || o.StormUsers <= 0 || o.StormReplicas <= 0 || o.RTT < 0 {
		return fmt.Errorf("fleet and storm sizes must be positive and -fleet-rtt not negative")
	}
	if o.Scorer != scorerInstant && o.Scorer != scorerReal {
		return fmt.Errorf("-fleet-scorer %q: want %s or %s", o.Scorer, scorerInstant, scorerReal)
	}
	if o.StormScorer != scorerInstant && o.StormScorer != scorerReal {
		return fmt.Errorf("-storm-scorer %q: want %s or %s", o.StormScorer, scorerInstant, scorerReal)
	}
	return nil
}

// fleetFigures are a drain's costs per acknowledged entry.
type fleetFigures struct {
	Commands    float64 `json:"commands"`
	Sent        float64 `json:"bytes_sent"`
	Received    float64 `json:"bytes_received"`
	Docs        float64 `json:"documents_returned"`
	LostInserts float64 `json:"lost_lease_inserts"`
	// RoundsPerUser is claim rounds per user claimed (and refreshed).
	RoundsPerUser float64 `json:"claim_rounds_per_claimed_user"`
	// Claim is the claim rounds' share of the above.
	Claim cmdCount `json:"claim"`
	// StartUp is the commands the replicas sent before their first claim
	// round, per entry: N replicas' one-off cost over a backlog that does
	// not grow with N (see fixedMetrics).
	StartUp float64 `json:"start_up_commands"`
}

// fleetRun is one fleet size: its drain and then its idle time.
type fleetRun struct {
	Replicas             int          `json:"replicas"`
	Drained              bool         `json:"drained"`
	Seconds              float64      `json:"drain_seconds"`
	Acked                float64      `json:"entries_acked"`
	Users                float64      `json:"users_refreshed"`
	ClaimRounds          float64      `json:"claim_rounds"`
	Drain                cmdSnapshot  `json:"drain"`
	PerEntry             fleetFigures `json:"per_entry"`
	Idle                 cmdSnapshot  `json:"idle"`
	IdleSeconds          float64      `json:"idle_seconds"`
	IdleRounds           float64      `json:"idle_claim_rounds"`
	IdlePerReplicaSecond cmdCount     `json:"idle_per_replica_per_second"`
}

// fleetResult is the fleet scenario of one service version.
type fleetResult struct {
	Label   string      `json:"label"`
	Entries int         `json:"entries"`
	Users   int         `json:"users"`
	RTTms   float64     `json:"rtt_ms"`
	Scorer  string      `json:"scorer,omitempty"` // "" (an older run) is real
	Runs    []*fleetRun `json:"runs"`
}

// fleetBacklog is n entries spread evenly over users users, in random order.
func fleetBacklog(n, users int, now time.Time, seed uint64) []any {
	perm := rand.New(rand.NewPCG(seed, 17)).Perm(n)
	return backlog(n, now, 10*time.Minute, func(i int) string { return userName(perm[i] % users) })
}

func (b *Bench) fleet(ctx context.Context) (*fleetResult, error) {
	o := b.cfg.Fleet
	ns, err := o.replicaCounts()
	if err != nil {
		return nil, err
	}
	b.logf("\n== fleet: %d entries of %d users drained by %v replicas at RTT %s, %s scorer, then %s idle", o.Entries, o.Users, ns, o.RTT, o.Scorer, o.Idle)
	r := &fleetResult{Label: o.Label, Entries: o.Entries, Users: o.Users, RTTms: ms(o.RTT), Scorer: o.Scorer}
	backlog := fleetBacklog(o.Entries, o.Users, time.Now(), b.cfg.Seed+3)
	for _, n := range ns {
		run, err := b.measureFleet(ctx, n, backlog)
		if err != nil {
			return nil, err
		}
		r.Runs = append(r.Runs, run)
		p := run.PerEntry
		b.logf("    per entry: %.2f commands (claim %.2f), %.0f B sent, %.0f B received, %.2f documents, %.3f lost lease inserts, %.3f claim rounds per user; idle per replica: %.2f commands/s, %.0f B/s",
			p.Commands, p.Claim.Commands, p.Sent, p.Received, p.Docs, p.LostInserts, p.RoundsPerUser, run.IdlePerReplicaSecond.Commands, run.IdlePerReplicaSecond.Sent+run.IdlePerReplicaSecond.Received)
	}
	b.targets = append(b.targets, r.targets()...)
	return r, nil
}

// replicaStats count each replica's commands from its client's monitor.
type replicaStats []*cmdStats

// newReplicaStats are the counters of n replicas, which tell lease inserts
// by the service's claims collection.
func (b *Bench) newReplicaStats(n int) (replicaStats, error) {
	cfg, err := b.serviceConfig("bench", 1)
	if err != nil {
		return nil, err
	}
	stats := make(replicaStats, n)
	for i := range stats {
		stats[i] = newCmdStats(cfg.ClaimsCollection)
	}
	return stats, nil
}

// snapshot is every replica's counts so far, summed.
func (s replicaStats) snapshot() cmdSnapshot {
	all := make([]cmdSnapshot, len(s))
	for i, r := range s {
		all[i] = r.snapshot()
	}
	return sumSnapshots(all)
}

// measureFleet drains backlog with n replicas, then watches them idle.
func (b *Bench) measureFleet(ctx context.Context, n int, backlog []any) (*fleetRun, error) {
	o := b.cfg.Fleet
	stats, err := b.newReplicaStats(n)
	if err != nil {
		return nil, err
	}
	w := &fleetWatch{run: &fleetRun{Replicas: n}, stats: stats, target: float64(len(backlog)), settle: o.Settle, idle: o.Idle}
	res, err := b.measure(ctx, runSpec{scenario: fmt.Sprintf("fleet%d", n), consumer: consumerScorerefresh, instances: n, rtt: o.RTT, backlog: backlog,
		max: o.DrainMax + o.Settle + o.Idle,
		tune: func(i int, ao *app.Options) {
			ao.Monitor = stats[i].monitor()
			if o.Scorer == scorerInstant {
				ao.WrapRefresher = func(r consumer.Refresher) consumer.Refresher {
					return faultyScorer{inner: r, failing: new(atomic.Bool), instant: true}
				}
			}
		},
		observe: w.observe,
		done:    func([]sample) bool { return w.finished },
	})
	if err != nil {
		return nil, err
	}
	r := w.run
	if !r.Drained {
		r.Seconds, r.Acked, r.Users, r.ClaimRounds, r.Drain = res.Seconds, res.Acked, res.Refreshes, res.Claims, stats.snapshot()
	}
	r.PerEntry = fleetPerEntry(r.Drain, r.Acked, r.ClaimRounds, r.Users)
	if r.IdleSeconds > 0 {
		r.IdlePerReplicaSecond = r.Idle.total().scaled(1 / (r.IdleSeconds * float64(n)))
	}
	return r, nil
}

// fleetWatch follows a fleet through its drain, the settling pause and
// its idle time, filling run in.
type fleetWatch struct {
	run          *fleetRun
	stats        replicaStats
	target       float64 // entries to acknowledge
	settle, idle time.Duration
	drainedAt    time.Duration // 0 until drained
	idleFrom     time.Duration // 0 until the idle measurement begins
	atIdle       cmdSnapshot
	roundsAtIdle float64
	finished     bool
}

func (w *fleetWatch) observe(elapsed time.Duration, c running) {
	r := w.run
	switch {
	case w.drainedAt == 0:
		if c.acked() >= w.target {
			w.drainedAt = elapsed
			r.Drained, r.Seconds, r.Acked, r.Users = true, elapsed.Seconds(), c.acked(), c.refreshes()
			r.ClaimRounds = c.timing().Claims
			r.Drain = w.stats.snapshot()
		}
	case w.idleFrom == 0:
		if elapsed >= w.drainedAt+w.settle {
			w.idleFrom, w.atIdle, w.roundsAtIdle = elapsed, w.stats.snapshot(), c.timing().Claims
		}
	case !w.finished:
		if elapsed >= w.idleFrom+w.idle {
			r.Idle, r.IdleSeconds = w.stats.snapshot().minus(w.atIdle), (elapsed - w.idleFrom).Seconds()
			r.IdleRounds = c.timing().Claims - w.roundsAtIdle
			w.finished = true
		}
	}
}

func fleetPerEntry(s cmdSnapshot, acked, rounds, users float64) fleetFigures {
	if acked <= 0 {
		return fleetFigures{}
	}
	t := s.total().scaled(1 / acked)
	f := fleetFigures{Commands: t.Commands, Sent: t.Sent, Received: t.Received, Docs: t.Docs,
		LostInserts: s.LostInserts / acked, Claim: s.Stages[stageClaim].scaled(1 / acked), StartUp: s.StartUpCommands / acked}
	if users > 0 {
		f.RoundsPerUser = rounds / users
	}
	return f
}

// fleetMetric is one per-entry figure of the fleet tables.
type fleetMetric struct {
	name string
	get  func(*fleetRun) float64
	unit string
	// startUp marks the figures results from before start-up was counted
	// (an older results.json) cannot give.
	startUp bool
}

var fleetMetrics = []fleetMetric{
	{"commands", func(r *fleetRun) float64 { return r.PerEntry.Commands }, "%.2f", false},
	{"bytes sent", func(r *fleetRun) float64 { return r.PerEntry.Sent }, "%.0f", false},
	{"bytes received", func(r *fleetRun) float64 { return r.PerEntry.Received }, "%.0f", false},
	{"documents returned", func(r *fleetRun) float64 { return r.PerEntry.Docs }, "%.2f", false},
	{"lost lease inserts", func(r *fleetRun) float64 { return r.PerEntry.LostInserts }, "%.3f", false},
	{"claim rounds per claimed user", func(r *fleetRun) float64 { return r.PerEntry.RoundsPerUser }, "%.3f", false},
}

var claimMetrics = []fleetMetric{
	{"claim commands", func(r *fleetRun) float64 { return r.PerEntry.Claim.Commands }, "%.2f", false},
	{"claim bytes sent", func(r *fleetRun) float64 { return r.PerEntry.Claim.Sent }, "%.0f", false},
	{"claim bytes received", func(r *fleetRun) float64 { return r.PerEntry.Claim.Received }, "%.0f", false},
	{"claim documents returned", func(r *fleetRun) float64 { return r.PerEntry.Claim.Docs }, "%.2f", false},
}

// fixedMetrics split off what each replica costs whatever the backlog: its
// start-up commands, and the one claim round it runs before it can know
// the head is taken. Over a backlog that does not grow with N they become
// per-entry figures growing with N, which the 1.3× target counts as the
// claim path's.
var fixedMetrics = []fleetMetric{
	{"start-up commands per replica", func(r *fleetRun) float64 { return r.Drain.StartUpCommands / float64(r.Replicas) }, "%.1f", true},
	{"start-up commands per entry", func(r *fleetRun) float64 { return r.PerEntry.StartUp }, "%.2f", true},
	{"commands per entry, net of start-up", func(r *fleetRun) float64 { return r.PerEntry.Commands - r.PerEntry.StartUp }, "%.2f", true},
	{"claim rounds per claimed user if each replica ran one round", func(r *fleetRun) float64 {
		if r.Users <= 0 {
			return 0
		}
		return float64(r.Replicas) / r.Users
	}, "%.3f", false},
}

var idleMetrics = []fleetMetric{
	{"commands/s", func(r *fleetRun) float64 { return r.IdlePerReplicaSecond.Commands }, "%.2f", false},
	{"bytes sent/s", func(r *fleetRun) float64 { return r.IdlePerReplicaSecond.Sent }, "%.0f", false},
	{"bytes received/s", func(r *fleetRun) float64 { return r.IdlePerReplicaSecond.Received }, "%.0f", false},
	{"documents returned/s", func(r *fleetRun) float64 { return r.IdlePerReplicaSecond.Docs }, "%.2f", false},
}

// fleetTolerance is how far the largest fleet's per-entry figures may be
// from one replica's.
const fleetTolerance = 1.3

func (r *fleetResult) targets() []target {
	if len(r.Runs) < 2 {
		return nil
	}
	one, big := r.Runs[0], r.Runs[len(r.Runs)-1]
	var ts []target
	for _, m := range fleetMetrics {
		a, z := m.get(one), m.get(big)
		t := target{Scenario: "fleet", Target: fmt.Sprintf("%s per entry at %d replicas ≤ %.1f× that of %d", m.name, big.Replicas, fleetTolerance, one.Replicas),
			Applies: a > 0}
		t.Value = z / a
		t.Met = t.Value <= fleetTolerance && big.Drained
		t.Figure = fmt.Sprintf(m.unit+" vs "+m.unit+": %.2f×", z, a, t.Value)
		switch {
		case !big.Drained || !one.Drained:
			t.Value, t.Met, t.Applies = -1, false, true
			t.Figure = fmt.Sprintf("not drained within -fleet-max (%.0f of %d entries at %d replicas, %.0f at %d)", big.Acked, r.Entries, big.Replicas, one.Acked, one.Replicas)
		case a == 0:
			t.Value = -1
			t.Figure = fmt.Sprintf(m.unit+" vs 0 (no ratio: one replica never contends)", z)
		}
		ts = append(ts, t)
	}
	lo, hi := math.Inf(1), 0.0
	for _, x := range r.Runs {
		lo, hi = math.Min(lo, x.IdlePerReplicaSecond.Commands), math.Max(hi, x.IdlePerReplicaSecond.Commands)
	}
	ts = append(ts, target{Scenario: "fleet", Target: fmt.Sprintf("idle commands/s per replica independent of N (largest ≤ %.1f× smallest)", fleetTolerance),
		Figure: fmt.Sprintf("%.2f to %.2f commands/s per replica over %d to %d replicas", lo, hi, one.Replicas, big.Replicas),
		Value:  hi / lo, Met: hi <= fleetTolerance*lo, Applies: lo > 0})
	return ts
}

// loadCompare reads another version's results.json for -compare.
func loadCompare(path, label string) (*Report, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading -compare results: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("reading -compare results %s: %w", path, err)
	}
	if label != "" {
		if r.Fleet != nil {
			r.Fleet.Label = label
		}
		if r.Storm != nil {
			r.Storm.Label = label
		}
	}
	return &r, nil
}

// fleetMarkdown writes the fleet tables: this version's and, side by side,
// the -compare version's.
func fleetMarkdown(w func(string, ...any), cur, old *fleetResult) {
	w("## Fleet")
	w("")
	scorer := "every refresh recomputes the user's score (12 components)"
	if cur.Scorer == scorerInstant {
		scorer = "refreshes succeed at once (`-fleet-scorer instant`): the figures are the claim, lease and ack path's, and refreshes put no load on the server"
	}
	w("%d entries of %d users drained by N replicas (in process, each a full service with its own client and pool) through the proxy at RTT %.0f ms; %s; then the fleet idles on an empty queue. Counted by each client's command monitor: commands, bytes of commands and replies, documents in cursor batches, duplicate-key errors on lease inserts. Claim rounds from `scorerefresh_claim_duration_seconds`.",
		cur.Entries, cur.Users, cur.RTTms, scorer)
	w("")
	versions := []*fleetResult{cur}
	if old != nil {
		versions = append([]*fleetResult{old}, cur)
	}
	table := func(title string, ms []fleetMetric) {
		w("%s", title)
		w("")
		head, rule := "| figure | version |", "|---|---|"
		for _, x := range cur.Runs {
			head += fmt.Sprintf(" N=%d |", x.Replicas)
			rule += "---:|"
		}
		head += fmt.Sprintf(" N=%d / N=%d |", cur.Runs[len(cur.Runs)-1].Replicas, cur.Runs[0].Replicas)
		rule += "---:|"
		w("%s", head)
		w("%s", rule)
		for _, m := range ms {
			for _, f := range versions {
				line := fmt.Sprintf("| %s | %s |", m.name, f.Label)
				for _, x := range cur.Runs {
					line += " " + fleetCell(f, x.Replicas, m) + " |"
				}
				line += " " + fleetRatio(f, m) + " |"
				w("%s", line)
			}
		}
		w("")
	}
	table("Per acknowledged entry (whole service: claim, refresh, ack, renewal, sampler, pings):", fleetMetrics)
	table("Per acknowledged entry, claim rounds only:", claimMetrics)
	table("What a replica costs whatever the backlog (start-up: commands before its first claim round; the last row is a floor no claim path that polls the head can go under, since every replica needs one round to learn the head is taken):", fixedMetrics)
	table("Idle fleet (queue empty), per replica per second:", idleMetrics)
	drain := "Drain seconds:"
	for _, f := range versions {
		var parts []string
		for _, x := range f.Runs {
			parts = append(parts, fmt.Sprintf("N=%d %.1f s (%.0f rounds)%s", x.Replicas, x.Seconds, x.ClaimRounds, map[bool]string{false: " NOT drained", true: ""}[x.Drained]))
		}
		drain += fmt.Sprintf(" %s: %s.", f.Label, strings.Join(parts, ", "))
	}
	w("%s", drain)
	w("")
}

func fleetCell(f *fleetResult, n int, m fleetMetric) string {
	for _, x := range f.Runs {
		if x.Replicas == n && x.Acked == 0 {
			return "nothing acked"
		}
		if x.Replicas == n && m.startUp && x.Drain.StartUpCommands == 0 {
			return "not counted"
		}
		if x.Replicas == n {
			return fmt.Sprintf(m.unit, m.get(x))
		}
	}
	return "–"
}

func fleetRatio(f *fleetResult, m fleetMetric) string {
	if len(f.Runs) < 2 {
		return "–"
	}
	a, z := m.get(f.Runs[0]), m.get(f.Runs[len(f.Runs)-1])
	if a == 0 || f.Runs[0].Acked == 0 || f.Runs[len(f.Runs)-1].Acked == 0 {
		return "–"
	}
	if m.startUp && (f.Runs[0].Drain.StartUpCommands == 0 || f.Runs[len(f.Runs)-1].Drain.StartUpCommands == 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", z/a)
}

// deadLettered and claimErrors read the fleet's counters.
func (s *scorerefresh) deadLettered() float64 {
	return s.sum(func(svc *app.Service) float64 {
		return metrics.Read(svc.Metrics.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts))
	})
}

func (s *scorerefresh) claimErrors() float64 {
	return s.sum(func(svc *app.Service) float64 { return metrics.Read(svc.Metrics.ClaimErrors) })
}

func (s *scorerefresh) failedRefreshes() float64 {
	return s.sum(func(svc *app.Service) float64 {
		return metrics.Read(svc.Metrics.Refreshes.WithLabelValues(metrics.OutcomeError))
	})
}
