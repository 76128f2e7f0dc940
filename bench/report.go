package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Report is one run: results.json holds it, report.md shows it.
type Report struct {
	Started     string      `json:"started"`
	Seconds     float64     `json:"seconds"`
	Short       bool        `json:"short"`
	Command     string      `json:"command"`
	Server      string      `json:"server"`
	Machine     string      `json:"machine"`
	GoVersion   string      `json:"go"`
	RTTms       float64     `json:"rtt_ms"`
	Concurrency int         `json:"concurrency"`
	Calibration calibration `json:"calibration"`
	Results     []*Result   `json:"results"`
	Targets     []target    `json:"targets"`
}

// target is one of the judgements a preset makes of its rows.
type target struct {
	Preset  string `json:"preset"`
	Target  string `json:"target"`
	Figure  string `json:"figure"`
	Met     bool   `json:"met"`
	Applies bool   `json:"applies"` // false: the run cannot show it (say, no reference rate)
}

func (t target) verdict() string {
	if !t.Applies {
		return "n/a"
	}
	return map[bool]string{true: "met", false: "MISS"}[t.Met]
}

// find is the result of preset's row run by consumer, or nil.
func (r *Report) find(preset, row, consumer string) *Result {
	for _, x := range r.Results {
		if x.Preset == preset && x.Name == row && x.Consumer == consumer {
			return x
		}
	}
	return nil
}

// judge fills in the ratios to the reference and the targets that are
// cheap to judge, for the rows that have run.
func (r *Report) judge() {
	r.Targets = nil
	add := func(preset, what string, met, applies bool, format string, args ...any) {
		r.Targets = append(r.Targets, target{Preset: preset, Target: what, Figure: fmt.Sprintf(format, args...), Met: met, Applies: applies})
	}
	for _, x := range r.Results {
		// The baseline is the row's reference run; for the HTTP scorer, the
		// same backlog scored by rules.
		ref := r.find(x.Preset, x.Name, consumerReference)
		if x.Scorer == scorerHTTP {
			ref = r.find(x.Preset, "scorer-rules", consumerScorerefresh)
		}
		if ref != nil && x != ref && ref.Rate > 0 {
			x.Ratio = x.Rate / ref.Rate
		}
		if x.Ratio > 0 && (x.Preset == "diverse" || x.Preset == "firehose") {
			add(x.Preset, "≥ 10× the reference", x.Ratio >= 10, true, "%.1f×", x.Ratio)
		}
		switch {
		case x.Preset == "storm" || x.Preset == "slowdown":
			add(x.Preset, x.Name+": nobody dead-lettered, the backlog drains", x.DeadLettered == 0 && x.Drained, true,
				"%.0f dead-lettered; %.0f of %d entries done", x.DeadLettered, x.Done, int64(x.Backlog.Entries)+x.Produced)
		case x.Verified > 0:
			add(x.Preset, x.Name+": every score right", x.Wrong == 0, true, "%d verified, %d wrong", x.Verified, x.Wrong)
		}
	}
	svc := func(preset, row string) *Result { return r.find(preset, row, consumerScorerefresh) }
	if x, lower := svc("diverse", "diverse"), r.Calibration.Bounds.Lower; x != nil {
		add("diverse", "≥ 90% of the lower bound", x.Rate >= 0.9*lower, lower > 0, "%.1f/s of %.1f/s (%s)", x.Rate, lower, r.Calibration.Bounds)
	}
	if x := svc("recovery", "recovery"); x != nil && len(x.Steps) == 2 {
		pre, back := recovered(x.Samples, x.Steps[0].At.Seconds(), x.Steps[1].At.Seconds())
		add("recovery", "back under the pre-trigger oldest age ≤ 60 s after restore", back >= 0 && back <= 60, pre > 0,
			"pre-trigger %.1f s; back after %.0f s (-1: never)", pre, back)
	}
	if one, two := svc("overload", "overload-1.0x"), svc("overload", "overload-2.0x"); one != nil && two != nil {
		add("overload", "goodput plateaus: at 2× it keeps ≥ 80% of the goodput at 1×", two.Rate >= 0.8*one.Rate, true, "%.1f/s at 2×, %.1f/s at 1×", two.Rate, one.Rate)
	}
	if one, three := svc("scale", "scale-1"), svc("scale", "scale-3"); one != nil && three != nil && one.Rate > 0 {
		e := three.Rate / (3 * one.Rate)
		add("scale", "3-process rate / (3 × 1-process rate) ≥ 0.9", e >= 0.9, true, "%.2f (%.1f/s against %.1f/s)", e, three.Rate, one.Rate)
	}
}

// recovered is the highest oldest age before at (past its first third, the
// warm-up) and how long after restore the oldest age was back under it (-1:
// never).
func recovered(s []sample, at, restore float64) (pre, back float64) {
	for _, x := range s {
		if x.T >= at/3 && x.T < at {
			pre = math.Max(pre, x.OldestAge)
		}
	}
	for _, x := range s {
		if x.T >= restore && x.OldestAge <= pre {
			return pre, x.T - restore
		}
	}
	return pre, -1
}

// write writes results.json and report.md to dir.
func (r *Report) write(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644)
	}
	if err != nil {
		return fmt.Errorf("writing results.json: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644)
}

func (r *Report) markdown() string {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }
	w("# scorerefresh-bench results\n\n- command: `%s`", r.Command)
	w("- started %s, %.0f s; server: %s; machine: %s; %s", r.Started, r.Seconds, r.Server, r.Machine, r.GoVersion)
	w("- RTT %.0f ms (pkg/faultproxy) and REFRESH_CONCURRENCY %d unless a row says otherwise", r.RTTms, r.Concurrency)
	if r.Short {
		w("- **smoke run (-short)**: every row in seconds; the figures mean little")
	}
	c := r.Calibration
	w("\n## Calibration\n\nOn the direct connection: %.1f round trips per refresh of the bench's rules, %.2f ms of server per query, at most %.0f queries/s. "+
		"Bounds of a drain of distinct users at the run's RTT and concurrency (planner.LatencyCeiling, planner.ServerCeiling): %s.", c.RoundTrips, c.ServerMs, c.QPS, c.Bounds)
	w("\n## Results\n\n| preset | row | consumer | replicas | environment | scorer | RTT ms | backlog (users) | offered/s | seconds | done | drained | entries/s | × baseline | dead-lettered | peak depth | max oldest s | commands/entry | commands/s | capacity estimate/s | estimate ÷ entries/s |")
	w("|---|---|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.Results {
		ratio := strings.TrimPrefix(fmt.Sprintf("%.1f×", x.Ratio), "0.0×")
		estimate, vs := "", ""
		if x.Capacity > 0 {
			estimate = fmt.Sprintf("%.1f", x.Capacity)
			if x.Rate > 0 {
				vs = fmt.Sprintf("%.2f", x.Capacity/x.Rate)
			}
		}
		w("| %s | %s | %s | %d | %s | %s | %.0f | %d (%d) | %.1f | %.1f | %.0f | %v | %.1f | %s | %.0f | %d | %.1f | %.2f | %.0f | %s | %s |",
			x.Preset, x.Name, x.Consumer, x.Replicas, strings.Join(x.Env, " "), x.Scorer, ms(x.RTT), x.Backlog.Entries, x.Users, x.Row.Rate,
			x.Seconds, x.Done, x.Drained, x.Rate, ratio, x.DeadLettered, x.PeakDepth, x.MaxOldest, x.PerEntry, x.CommandsPer, estimate, vs)
	}
	w("\n## Faults and commands\n\nCommands per entry done, by command and collection, from the one recorder of each row (all its clients):\n")
	for _, x := range r.Results {
		var parts []string
		for _, s := range x.Steps {
			parts = append(parts, s.String())
		}
		keys := slices.SortedFunc(maps.Keys(x.Commands), func(a, b string) int {
			return cmp.Or(cmp.Compare(x.Commands[b], x.Commands[a]), strings.Compare(a, b))
		})
		for i, k := range keys {
			keys[i] = fmt.Sprintf("%s %.2f", k, x.Commands[k]/math.Max(x.Done, 1))
		}
		w("- %s/%s, %s%s: %s", x.Preset, x.Name, x.Consumer, strings.TrimSuffix(" ("+strings.Join(parts, "; ")+")", " ()"), strings.Join(keys, ", "))
	}
	w("\n## Targets\n\n| preset | target | figure | verdict |\n|---|---|---|---|")
	for _, t := range r.Targets {
		w("| %s | %s | %s | %s |", t.Preset, t.Target, t.Figure, t.verdict())
	}
	return sb.String()
}
