package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
)

// errScorerDown is the storm's fault: not a MongoDB error, so the consumer
// sees a failure of the user's refresh, not an outage.
var errScorerDown = errors.New("scorer unavailable (fault injected by the bench)")

// faultyScorer fails every refresh while failing is set. With instant set
// it succeeds at once otherwise, so a drain measures the claim and ack
// path (what a storm's backoffs could slow down) rather than the scorer.
type faultyScorer struct {
	inner   consumer.Refresher
	failing *atomic.Bool
	instant bool
}

func (f faultyScorer) Refresh(ctx context.Context, user string, startedAt time.Time) error {
	if f.failing.Load() {
		return errScorerDown
	}
	if f.instant {
		return nil
	}
	return f.inner.Refresh(ctx, user, startedAt)
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}

// stormRun is one drain of the storm's backlog, with or without the storm.
type stormRun struct {
	Storm           bool        `json:"storm"`
	Drained         bool        `json:"drained"`
	Seconds         float64     `json:"seconds"` // until every entry was acknowledged or dead-lettered
	HealAt          float64     `json:"heal_at,omitempty"`
	Acked           float64     `json:"entries_acked"`
	AckedAtHeal     float64     `json:"entries_acked_during_storm"`
	DeadLettered    float64     `json:"entries_dead_lettered"`
	FailedRefreshes float64     `json:"failed_refreshes"`
	ClaimErrors     float64     `json:"claim_round_errors"`
	ClaimRounds     float64     `json:"claim_rounds"`
	StormRounds     float64     `json:"claim_rounds_during_storm"`
	Rate            float64     `json:"drain_rate"` // entries acknowledged per second after the heal (or from the start)
	Commands        cmdSnapshot `json:"commands"`
	StormCommands   cmdSnapshot `json:"commands_during_storm"`
}

// stormResult is the backoff-storm scenario of one service version.
type stormResult struct {
	Label        string    `json:"label"`
	Scorer       string    `json:"scorer"`
	Users        int       `json:"users"`
	Replicas     int       `json:"replicas"`
	StormSeconds float64   `json:"storm_seconds"`
	RTTms        float64   `json:"rtt_ms"`
	Baseline     *stormRun `json:"baseline"`
	Storm        *stormRun `json:"storm"`
	RateRatio    float64   `json:"rate_ratio"` // storm's after-heal drain rate / baseline's
}

// The storm's scorers (-storm-scorer).
const (
	scorerInstant = "instant" // succeeds at once: the drain is the claim and ack path's
	scorerReal    = "real"    // the service's scorer (14 round trips a refresh)
)

// mib is the storm's bound on what one claim round sends or receives.
const mib = 1 << 20

func (b *Bench) storm(ctx context.Context) (*stormResult, error) {
	o := b.cfg.Fleet
	r := &stormResult{Label: o.Label, Scorer: o.StormScorer, Users: o.StormUsers, Replicas: o.StormReplicas, StormSeconds: o.StormFailFor.Seconds(), RTTms: ms(o.RTT)}
	b.logf("\n== backoff storm: %d users queued, %d replicas at RTT %s; every refresh fails for %s, then healed; and the same backlog without a storm",
		o.StormUsers, o.StormReplicas, o.RTT, o.StormFailFor)
	backlog := diverseBacklog(o.StormUsers, time.Now(), b.cfg.Seed+5)
	var err error
	if r.Baseline, err = b.measureStorm(ctx, backlog, false); err != nil {
		return nil, err
	}
	if r.Storm, err = b.measureStorm(ctx, backlog, true); err != nil {
		return nil, err
	}
	if r.Baseline.Rate > 0 {
		r.RateRatio = r.Storm.Rate / r.Baseline.Rate
	}
	for _, x := range []*stormRun{r.Baseline, r.Storm} {
		b.logf("    storm=%v: %.0f acked, %.0f dead-lettered, %.0f failed refreshes, %.0f claim errors, %.0f rounds; drain %.1f entries/s; largest claim command %d B, reply %d B, round %d B sent / %d B received",
			x.Storm, x.Acked, x.DeadLettered, x.FailedRefreshes, x.ClaimErrors, x.ClaimRounds, x.Rate, x.Commands.MaxCommand, x.Commands.MaxReply, x.Commands.MaxRoundSent, x.Commands.MaxRoundReceived)
	}
	b.targets = append(b.targets, r.targets()...)
	return r, nil
}

// measureStorm drains backlog with the storm's replicas; with storm set,
// every refresh fails until StormFailFor has passed.
func (b *Bench) measureStorm(ctx context.Context, backlog []any, storm bool) (*stormRun, error) {
	o := b.cfg.Fleet
	stats, err := b.newReplicaStats(o.StormReplicas)
	if err != nil {
		return nil, err
	}
	w := &stormWatch{run: &stormRun{Storm: storm}, stats: stats, target: float64(len(backlog))}
	w.failing.Store(storm)
	var events []timedEvent
	if storm {
		events = []timedEvent{{at: o.StormFailFor, name: "heal: refreshes succeed again", do: func() { w.failing.Store(false) }}}
	}
	res, err := b.measure(ctx, runSpec{scenario: map[bool]string{false: "storm-baseline", true: "storm"}[storm], consumer: consumerScorerefresh,
		instances: o.StormReplicas, rtt: o.RTT, backlog: backlog, events: events, max: o.StormFailFor + o.StormMax,
		tune: func(i int, ao *app.Options) {
			// Every failed refresh logs a warning: tens of thousands here.
			ao.Logger = slog.New(minLevel{Handler: b.svcLog.Handler(), min: slog.LevelError})
			ao.Monitor = stats[i].monitor()
			ao.WrapRefresher = func(r consumer.Refresher) consumer.Refresher {
				return faultyScorer{inner: r, failing: &w.failing, instant: o.StormScorer == scorerInstant}
			}
		},
		observe: w.observe,
		done:    func([]sample) bool { return w.finished },
	})
	if err != nil {
		return nil, err
	}
	return w.result(res), nil
}

// stormWatch follows a storm run: when it heals, when every entry is
// acknowledged or dead-lettered.
type stormWatch struct {
	run      *stormRun
	stats    replicaStats
	target   float64 // entries to settle
	failing  atomic.Bool
	healed   bool
	finished bool
	fleet    *scorerefresh
}

func (w *stormWatch) observe(elapsed time.Duration, c running) {
	s := c.(*scorerefresh)
	w.fleet = s
	r := w.run
	if r.Storm && !w.healed && !w.failing.Load() {
		w.healed = true
		r.HealAt, r.AckedAtHeal = elapsed.Seconds(), s.acked()
		r.StormRounds = s.timing().Claims
		r.StormCommands = w.stats.snapshot()
	}
	if !w.finished && s.acked()+s.deadLettered() >= w.target {
		w.finished, r.Drained, r.Seconds = true, true, elapsed.Seconds()
	}
}

// result completes the run's figures from the measured run.
func (w *stormWatch) result(res *runResult) *stormRun {
	r := w.run
	if !r.Drained {
		r.Seconds = res.Seconds
	}
	r.Acked = res.Acked
	r.ClaimRounds = res.Claims
	r.Commands = w.stats.snapshot()
	if w.fleet != nil {
		r.DeadLettered, r.ClaimErrors, r.FailedRefreshes = w.fleet.deadLettered(), w.fleet.claimErrors(), w.fleet.failedRefreshes()
	}
	from := 0.0
	if r.Storm {
		from = r.HealAt
	}
	if r.Seconds > from {
		r.Rate = (r.Acked - r.AckedAtHeal) / (r.Seconds - from)
	}
	return r
}

func (r *stormResult) targets() []target {
	s := r.Storm
	ts := []target{
		{Scenario: "storm", Target: "no claim round fails",
			Figure: fmt.Sprintf("%.0f claim errors in %.0f rounds (%.0f failed claim commands)", s.ClaimErrors, s.ClaimRounds, s.Commands.Stages[stageClaim].Failed),
			Value:  s.ClaimErrors, Met: s.ClaimErrors == 0 && s.Commands.Stages[stageClaim].Failed == 0, Applies: true},
		{Scenario: "storm", Target: "no claim round sends or receives more than 1 MiB",
			Figure: fmt.Sprintf("largest round %s sent, %s received (largest command %s, reply %s)",
				kib(s.Commands.MaxRoundSent), kib(s.Commands.MaxRoundReceived), kib(s.Commands.MaxCommand), kib(s.Commands.MaxReply)),
			Value: float64(max(s.Commands.MaxRoundSent, s.Commands.MaxRoundReceived)),
			Met:   s.Commands.MaxRoundSent <= mib && s.Commands.MaxRoundReceived <= mib, Applies: true},
		{Scenario: "storm", Target: "no user dead-lettered by the storm",
			Figure: fmt.Sprintf("%.0f entries dead-lettered (%.0f failed refreshes)", s.DeadLettered, s.FailedRefreshes),
			Value:  s.DeadLettered, Met: s.DeadLettered == 0, Applies: true},
		{Scenario: "storm", Target: "after the heal, drains at ≥ 90% of the no-storm rate",
			Figure: fmt.Sprintf("%.1f vs %.1f entries/s: %.0f%%%s", s.Rate, r.Baseline.Rate, 100*r.RateRatio, drainedSuffix(s)),
			Value:  r.RateRatio, Met: s.Drained && r.RateRatio >= 0.9, Applies: true},
	}
	return ts
}

func drainedSuffix(s *stormRun) string {
	if s.Drained {
		return ""
	}
	return " (NOT drained within the cap)"
}

func kib(n int) string {
	if n >= mib {
		return fmt.Sprintf("%.2f MiB", float64(n)/mib)
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}

// stormMarkdown writes the storm table: this version's and, side by side,
// the -compare version's.
func stormMarkdown(w func(string, ...any), cur, old *stormResult) {
	w("## Backoff storm")
	w("")
	w("%d distinct users queued (one entry each), %d replicas at RTT %.0f ms. Storm: every refresh fails (a scorer wrapper returns a non-transient error) for the first %.0f s, then succeeds. Baseline: the same backlog, no storm. Scorer: %s. Sizes are the claim rounds' commands and replies as the command monitor saw them; a round's bytes are its commands' added up.",
		cur.Users, cur.Replicas, cur.RTTms, cur.StormSeconds, scorerNote(cur.Scorer))
	w("")
	rs := []*stormResult{cur}
	if old != nil {
		rs = append([]*stormResult{old}, cur)
	}
	w("| version | run | seconds | acked | dead-lettered | failed refreshes | claim rounds | claim errors | largest round sent | largest round received | largest command | largest reply | drain rate /s | vs baseline |")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		for _, x := range []*stormRun{r.Baseline, r.Storm} {
			if x == nil {
				continue
			}
			name, vs := "baseline", ""
			if x.Storm {
				name, vs = fmt.Sprintf("storm (healed at %.0f s)", x.HealAt), fmt.Sprintf("%.0f%%", 100*r.RateRatio)
			}
			secs := fmt.Sprintf("%.1f", x.Seconds)
			if !x.Drained {
				secs += " (cap)"
			}
			w("| %s | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %.1f | %s |", r.Label, name, secs, x.Acked, x.DeadLettered, x.FailedRefreshes,
				x.ClaimRounds, x.ClaimErrors, kib(x.Commands.MaxRoundSent), kib(x.Commands.MaxRoundReceived), kib(x.Commands.MaxCommand), kib(x.Commands.MaxReply), x.Rate, vs)
		}
	}
	w("")
	w("Drain rate: entries acknowledged per second from the heal (baseline: from the start) until every entry was acknowledged or dead-lettered.")
	w("")
}

func scorerNote(s string) string {
	if s == scorerReal {
		return "the service's own (14 round trips a refresh)"
	}
	return "a stand-in that succeeds at once, so the drain measures the claim and ack path, which is what the storm's backoffs could slow down (-storm-scorer real for the service's own)"
}
