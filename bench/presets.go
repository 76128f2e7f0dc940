package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/backlog"
)

// size says whether the rows are the smoke run's (-short).
type size bool

// pick is a row's full or smoke figure.
func pick[T any](s size, full, short T) T {
	if s {
		return short
	}
	return full
}

// preset is a named table of rows; the short size is every row in seconds.
type preset struct {
	name string
	rows func(short size) []Row
}

// The presets, in the order they run (RateOf: see Row).
var presets = []preset{
	{"diverse", func(s size) []Row { // each entry its own user: refreshes all the way
		spec := backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 2000, 30), Users: pick(s, 2000, 30)}
		return pair(Row{Name: "diverse", Backlog: spec, Max: pick(s, 10*time.Minute, 30*time.Second)}, pick(s, 90*time.Second, 2*time.Second))
	}},
	{"firehose", func(s size) []Row { // 94% one user: coalescing does the work
		spec := backlog.Spec{Shape: backlog.Firehose, Hot: 0.94, Entries: pick(s, 20000, 200), Users: pick(s, 500, 10)}
		return pair(Row{Name: "firehose", Backlog: spec, Max: pick(s, 10*time.Minute, 30*time.Second)}, pick(s, 90*time.Second, 2*time.Second))
	}},
	{"wedge", func(s size) []Row { // arrivals at 5× the reference's capacity
		d := pick(s, 5*time.Minute, 3*time.Second)
		return pair(Row{Name: "wedge", Rate: 5, RateOf: consumerReference, For: d, Max: d}, d)
	}},
	{"recovery", func(s size) []Row { // arrivals at half scorerefresh's rate; RTT ×10 for a minute
		before, trigger, watch := pick(s, 30*time.Second, 1500*time.Millisecond), pick(s, 60*time.Second, 1500*time.Millisecond), pick(s, 120*time.Second, 3*time.Second)
		return pair(Row{Name: "recovery", Rate: 0.5, RateOf: consumerScorerefresh, For: before + trigger + watch, Max: before + trigger + watch,
			Steps: rttSpike(before, trigger, 10*s.rtt())}, before+trigger+watch)
	}},
	{"overload", func(s size) []Row { // offered load past scorerefresh's capacity: goodput must plateau
		var rows []Row
		for _, f := range pick(s, []float64{0.5, 1, 1.5, 2}, []float64{1, 2}) {
			d := pick(s, 60*time.Second, 2*time.Second)
			rows = append(rows, Row{Name: fmt.Sprintf("overload-%.1fx", f), Rate: f, RateOf: consumerScorerefresh, For: d, Max: d})
		}
		return rows
	}},
	{"scale", func(s size) []Row { // one against three processes, latency-bound
		spec := backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 3000, 30), Users: pick(s, 3000, 30)}
		rtt, d := pick(s, 60*time.Millisecond, 10*time.Millisecond), pick(s, 35*time.Second, 3*time.Second)
		return []Row{{Name: "scale-1", Backlog: spec, RTT: rtt, Max: d}, {Name: "scale-3", Backlog: spec, Replicas: 3, RTT: rtt, Max: d}}
	}},
	{"adaptive", adaptiveRows},
	{"fleet", func(s size) []Row { // what each replica costs: per entry while draining, per second while idle
		var rows []Row
		for _, n := range []int{1, 4, 16, 32}[:pick(s, 4, 2)] {
			rows = append(rows, Row{Name: fmt.Sprintf("fleet-%d", n), Replicas: n, RTT: 2 * time.Millisecond, Scorer: scorerInstant,
				Backlog: backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 2000, 60), Users: pick(s, 1000, 30)}, Max: pick(s, 3*time.Minute, 30*time.Second)})
		}
		idle := pick(s, 30*time.Second, time.Second)
		return append(rows, Row{Name: "fleet-idle-" + fmt.Sprint(pick(s, 16, 2)), Replicas: pick(s, 16, 2), RTT: 2 * time.Millisecond, For: idle, Max: idle})
	}},
	{"storm", func(s size) []Row { // every refresh fails for a minute, then heals: nobody is dead-lettered
		spec := backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 20000, 100), Users: pick(s, 20000, 100)}
		base := Row{Name: "storm-none", Backlog: spec, Replicas: pick(s, 3, 2), RTT: 2 * time.Millisecond, Scorer: scorerInstant, Max: pick(s, 40*time.Minute, 30*time.Second)}
		storm := base
		storm.Name, storm.Steps = "storm", []Step{{RTT: base.RTT, Fail: true}, {At: pick(s, 60*time.Second, 1500*time.Millisecond), RTT: base.RTT}}
		return []Row{base, storm}
	}},
	{"batched", func(s size) []Row { // per-user recompute against batches of users
		spec := backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 4000, 30), Users: pick(s, 4000, 30)}
		var rows []Row
		for _, far := range []bool{false, true}[:pick(s, 2, 1)] {
			for _, c := range pick(s, []string{"1", "16", "16x256", "64x256"}, []string{"1", "16x256"}) {
				// REFRESH_BATCH_SIZE[xMAX_USERS_IN_FLIGHT]
				r := Row{Name: "batched-" + c, Backlog: spec, Env: strings.Split("REFRESH_BATCH_SIZE="+strings.Replace(c, "x", ",MAX_USERS_IN_FLIGHT=", 1), ","),
					Max: pick(s, 60*time.Second, 3*time.Second)}
				if far { // latency-bound, far below the server's capacity
					r.Name, r.RTT = "batched-far-"+c, pick(s, 200*time.Millisecond, 50*time.Millisecond)
				}
				rows = append(rows, r)
			}
		}
		return rows
	}},
	{"batched-spread", func(s size) []Row { // one slot against per-user, the default and batches of 16, twice, A B C D D C B A
		spec := backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 3000, 30), Users: pick(s, 3000, 30)}
		env := map[string][]string{"1c1": {"REFRESH_BATCH_SIZE=1", "REFRESH_CONCURRENCY=1"}, "1": {"REFRESH_BATCH_SIZE=1"}, "0": nil, "16": {"REFRESH_BATCH_SIZE=16"}}
		var rows []Row
		for i, c := range pick(s, []string{"1c1", "1", "0", "16", "16", "0", "1", "1c1"}, []string{"1c1", "16"}) {
			rows = append(rows, Row{Name: fmt.Sprintf("spread-%s-%c", c, 'a'+rune(i/4)), Backlog: spec, Scorer: scorerCount12,
				Env: append([]string{"MAX_USERS_IN_FLIGHT=64"}, env[c]...), Max: pick(s, 75*time.Second, 5*time.Second)})
		}
		return rows
	}},
	{"slowdown", func(s size) []Row { // every refresh outlives its deadline for two minutes
		before, slow, watch := pick(s, 30*time.Second, 1500*time.Millisecond), pick(s, 2*time.Minute, 3*time.Second), pick(s, 3*time.Minute, 15*time.Second)
		return []Row{{Name: "slowdown", Env: []string{"LEASE_DURATION=" + pick(s, 10*time.Second, 2*time.Second).String()},
			Rate: 0.5, RateOf: consumerScorerefresh, For: before + slow, Max: before + slow + watch,
			Steps: rttSpike(before, slow, pick(s, time.Second, 400*time.Millisecond))}}
	}},
	{"plan", planRows},
	{"scorer", func(s size) []Row { // bring your own score: the diverse drain with the HTTP scorer, against the same score as rules
		spec := backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 2000, 40), Users: pick(s, 2000, 40)}
		limit := pick(s, 10*time.Minute, 60*time.Second)
		return []Row{{Name: "scorer-rules", Backlog: spec, Scorer: scorerActivity, Max: limit}, {Name: "scorer-http", Backlog: spec, Scorer: scorerHTTP, Max: limit}}
	}},
}

// rtt is the -rtt default of the size, which the spike factors multiply.
func (s size) rtt() time.Duration { return pick(s, 20*time.Millisecond, 5*time.Millisecond) }

// pair is row drained by the reference (for at most refMax: its rate is
// steady) and then by scorerefresh, on identical data.
func pair(row Row, refMax time.Duration) []Row {
	ref := row
	ref.Consumer, ref.Max = consumerReference, refMax
	return []Row{ref, row}
}

// rttSpike is the round trip at slow from at for lasts, then back to the
// row's (0: the run's).
func rttSpike(at, lasts, slow time.Duration) []Step {
	return []Step{{At: at, RTT: slow}, {At: at + lasts}}
}

// adaptiveRows: a server with a knee drained at fixed limits, with the
// adaptive limit, through a ×10 delay spike, and by three adaptive instances.
func adaptiveRows(s size) []Row {
	spec := backlog.Spec{Shape: backlog.Distinct, Entries: pick(s, 4000, 30), Users: pick(s, 4000, 30)}
	drain := pick(s, 30*time.Second, 2*time.Second)
	var rows []Row
	for _, n := range []int{2, 4, 8, 16}[pick(s, 0, 1):pick(s, 4, 2)] {
		rows = append(rows, Row{Name: fmt.Sprintf("adaptive-fixed-%d", n), Backlog: spec, Env: []string{fmt.Sprintf("REFRESH_CONCURRENCY=%d", n)}, Max: drain})
	}
	adaptive := []string{"ADAPTIVE_CONCURRENCY=true", "REFRESH_CONCURRENCY=16"}
	before, spike, after := pick(s, 20*time.Second, time.Second), pick(s, 20*time.Second, time.Second), pick(s, 30*time.Second, 2*time.Second)
	three := pick(s, 60*time.Second, 2*time.Second)
	rows = append(rows,
		Row{Name: "adaptive", Backlog: spec, Env: adaptive, Max: drain},
		Row{Name: "adaptive-spike", Env: adaptive, Rate: 0.5, RateOf: consumerScorerefresh, For: before + spike + after, Max: before + spike + after,
			Steps: rttSpike(before, spike, 10*s.rtt())},
		Row{Name: "adaptive-three", Backlog: spec, Env: adaptive, Replicas: 3, For: three, Max: three})
	for i := range rows {
		rows[i] = withKnee(rows[i])
	}
	return rows
}

// withKnee puts a server with a knee (no extra delay up to 6 busy
// connections, 15 ms per connection past them) under every step of r.
func withKnee(r Row) Row {
	r.Steps = append([]Step{{}}, r.Steps...)
	for i := range r.Steps {
		r.Steps[i].Knee, r.Steps[i].Slope = 6, 15*time.Millisecond
	}
	return r
}

// planRows are the cases `scorerefresh plan` predicts and the bench measures
// (docs/capacity-planning.md): static drains of the replay shapes at two
// configurations, paced arrivals, and transients on a server with a knee.
func planRows(s size) []Row {
	c16 := []string{"REFRESH_CONCURRENCY=16", "MAX_USERS_IN_FLIGHT=64", "CLAIM_WINDOW=500"}
	c4 := []string{"REFRESH_CONCURRENCY=4", "MAX_USERS_IN_FLIGHT=8", "CLAIM_WINDOW=100"}
	static := func(name string, shape backlog.Shape, entries, users int, env []string) Row {
		return Row{Name: name, Backlog: backlog.Spec{Shape: shape, Entries: pick(s, entries, entries/40), Users: pick(s, users, max(users/40, 5)), Hot: backlog.FirehoseShare},
			Env: env, Max: pick(s, 150*time.Second, 10*time.Second)}
	}
	// paced arrives entries over span at the original pace, with the RTT
	// ×10 from at for lasts (lasts 0: no transient).
	paced := func(name string, entries int, span, at, lasts time.Duration) Row {
		span = pick(s, span, span/15)
		r := Row{Name: name, Env: c16, Rate: float64(entries) / span.Seconds(), For: span, Max: pick(s, 150*time.Second, 15*time.Second),
			Arrivals: backlog.Spec{Shape: backlog.Diverse, Entries: pick(s, entries, entries/15), Users: 100000}}
		if lasts > 0 {
			r.Steps = rttSpike(pick(s, at, at/15), pick(s, lasts, lasts/15), 10*s.rtt())
		}
		return r
	}
	rows := []Row{
		static("diverse-c16", backlog.Diverse, 2000, 2000, c16), static("diverse-c4", backlog.Diverse, 500, 500, c4),
		static("firehose-c16", backlog.Firehose, 10000, 300, c16), static("firehose-c4", backlog.Firehose, 4000, 150, c4),
		static("mixed-c16", backlog.Mixed, 4000, 500, c16), static("mixed-c4", backlog.Mixed, 2000, 300, c4),
		{Name: "mixed-paced-c16", Env: c16, Rate: 4000 / 30.0, For: pick(s, 30*time.Second, 1500*time.Millisecond), Max: pick(s, 150*time.Second, 15*time.Second),
			Arrivals: backlog.Spec{Shape: backlog.Mixed, Entries: pick(s, 4000, 200), Users: pick(s, 500, 25)}},
		withKnee(paced("knee-wedge", 720, 90*time.Second, 15*time.Second, 15*time.Second)),
		withKnee(paced("knee-steady", 720, 90*time.Second, 0, 0)),
		withKnee(paced("knee-recovery", 450, 90*time.Second, 15*time.Second, 15*time.Second)),
		paced("recovery", 900, 75*time.Second, 15*time.Second, 30*time.Second),
	}
	if s {
		// The smoke runs one of each kind.
		rows = []Row{rows[0], rows[6], rows[7]}
	}
	return rows
}

func presetNames() (names []string) {
	for _, p := range presets {
		names = append(names, p.name)
	}
	return names
}

// selectRows is the rows of the named presets, only those named in rows
// when it is not empty.
func selectRows(names, rows []string, short bool) ([]Row, error) {
	var out []Row
	var known []string
	for _, p := range presets {
		if !slices.Contains(names, p.name) {
			continue
		}
		for _, r := range p.rows(size(short)) {
			r.Preset = p.name
			if short && r.Consumer != consumerReference {
				// A smoke row runs until its work is done (the race detector and a loaded
				// machine slow it tenfold): every row must drain what it was given.
				r.Max = r.For + 2*time.Minute
			}
			known = append(known, r.Name)
			if len(rows) == 0 || slices.Contains(rows, r.Name) {
				out = append(out, r)
			}
		}
	}
	for _, name := range rows {
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("no row %q in %s (have %s)", name, strings.Join(names, ","), strings.Join(known, ", "))
		}
	}
	return out, nil
}
