//go:build !oldrelease

package bench

import (
	"fmt"
	"math"
	"slices"

	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
)

// Colours of the configurations in the batched charts, in run order.
var configColors = []string{colorReference, colorScorerefresh, "#2b8a3e", "#7048e8", "#e67700", "#0b7285", "#c2255c", "#5c940d"}

func configColor(i int) string { return configColors[i%len(configColors)] }

// fin keeps non-finite figures out of results.json, as sanitize does.
func fin(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -1
	}
	return v
}

// timelinePanels draws depth and oldest age of each run, one colour each.
func timelinePanels(runs []batchRun, label func(batchRun) string) (depth, age svgchart.Panel) {
	depth = svgchart.Panel{Title: "queue depth (entries)"}
	age = svgchart.Panel{Title: "oldest entry age (s)"}
	for i, r := range runs {
		d := svgchart.Series{Name: label(r), Color: configColor(i)}
		a := svgchart.Series{Name: label(r), Color: configColor(i)}
		for _, s := range r.Run.Timeline {
			d.Points = append(d.Points, [2]float64{s.T, float64(s.Depth)})
			a.Points = append(a.Points, [2]float64{s.T, s.OldestAge})
		}
		depth.Series = append(depth.Series, d)
		age.Series = append(age.Series, a)
	}
	return depth, age
}

func (x *batchedResult) charts() map[string]svgchart.Chart {
	out := map[string]svgchart.Chart{}
	label := func(r batchRun) string { return r.Config.Rules + ", " + r.Config.Label }
	if len(x.Diverse) > 0 {
		depth, _ := timelinePanels(x.Diverse, label)
		done := svgchart.Panel{Title: "entries acknowledged"}
		for i, r := range x.Diverse {
			l := svgchart.Series{Name: label(r), Color: configColor(i)}
			for _, s := range r.Run.Timeline {
				l.Points = append(l.Points, [2]float64{s.T, s.Progress})
			}
			done.Series = append(done.Series, l)
		}
		out["batched-diverse"] = svgchart.Chart{PanelHeight: chartPanelHeight, Title: fmt.Sprintf("Batched recompute: diverse drain of %d entries, per configuration", x.Entries),
			XLabel: "seconds since the consumer started", Panels: []svgchart.Panel{done, depth}}
	}
	if len(x.Far) > 0 {
		done := svgchart.Panel{Title: "entries acknowledged"}
		for i, r := range x.Far {
			l := svgchart.Series{Name: r.Config.Label, Color: configColor(i)}
			for _, s := range r.Run.Timeline {
				l.Points = append(l.Points, [2]float64{s.T, s.Progress})
			}
			done.Series = append(done.Series, l)
		}
		out["batched-far"] = svgchart.Chart{PanelHeight: chartPanelHeight, Title: fmt.Sprintf("Batched recompute: diverse drain at RTT %.0f ms (latency-bound)", x.FarRTTms),
			XLabel: "seconds since the consumer started", Panels: []svgchart.Panel{done}}
	}
	if len(x.Wedge) > 0 {
		depth, age := timelinePanels(x.Wedge, func(r batchRun) string { return r.Config.Label })
		out["batched-wedge"] = svgchart.Chart{PanelHeight: chartPanelHeight, Title: fmt.Sprintf("Batched recompute: wedge, diverse arrivals at %.1f/s", x.WedgeRate),
			XLabel: "seconds since the consumer started", Panels: []svgchart.Panel{depth, age}}
	}
	if len(x.Recovery) > 0 {
		depth, age := timelinePanels(x.Recovery, func(r batchRun) string { return r.Config.Label })
		out["batched-recovery"] = svgchart.Chart{PanelHeight: chartPanelHeight, Title: fmt.Sprintf("Batched recompute: arrivals at %.1f/s, RTT %.0f ms between the markers", x.RecoveryRate, x.TriggerRTTms),
			XLabel: "seconds since the consumer started", Panels: []svgchart.Panel{depth, age},
			Markers: []svgchart.Marker{{Label: "trigger", X: x.TriggerAt}, {Label: "restore", X: x.RestoreAt}}}
	}
	return out
}

func (x *batchedResult) markdown(w func(string, ...any), r *Report) {
	w("## Batched recompute")
	w("")
	w("Per-user recompute (`REFRESH_BATCH_SIZE=1`) against batched, side by side in this run, on the same server, data and RTT. Every other setting is the service's default unless the configuration names it (`batch N, in flight M` is `REFRESH_BATCH_SIZE=N MAX_USERS_IN_FLIGHT=M`). Rules: `bench` is rules.yaml (12 components, 2 of them max); `nomax` is rules-nomax.yaml (the same with each max replaced by a sum: 12 components, 14 round trips per batch, the shape a batch has on MongoDB, which has the `$max` accumulator FerretDB 1.24 lacks); `count12` is rules-count12.yaml (12 count components, 14 round trips per refresh or batch on any server). A configuration `default batch (unset)` leaves `REFRESH_BATCH_SIZE` unset, the service's default, which picks by the server; `N slots` is `REFRESH_CONCURRENCY=N` (otherwise the bench's).")
	w("")
	w("Batch calibration (direct connection, no proxy; capacity = most users refreshed per second with 4 or 16 batches at once):")
	w("")
	w("| rules | batch size | round trips per batch | ms per batch | ms per query | capacity users/s |")
	w("|---|---:|---:|---:|---:|---:|")
	for _, c := range x.Calibrations {
		w("| %s | %d | %.1f | %.1f | %.2f | %.0f (%d at once) |", c.Rules, c.BatchSize, c.RoundTrips, c.BatchMs, c.ServerMs, c.Capacity, c.Workers)
	}
	w("")
	x.diverseTable(w)
	x.oneSlotTables(w)
	x.cpuTable(w)
	x.farTable(w)
	x.wedgeTable(w)
	x.recoveryTable(w)
	r.markdownCharts(w, "batched-diverse", "batched-far", "batched-wedge", "batched-recovery")
}

// perUserRatio is run's rate over the per-user run's, bold, or 1.0× for
// the per-user run itself (or without one).
func perUserRatio(run batchRun, perUser *batchRun) string {
	if perUser != nil && run.Config != perUser.Config && perUser.Run.Rate > 0 {
		return fmt.Sprintf("**%.1f×**", run.Run.Rate/perUser.Run.Rate)
	}
	return "1.0×"
}

func (x *batchedResult) diverseTable(w func(string, ...any)) {
	w("Diverse drain, %d entries of distinct users (each run at most %.0f s):", x.Entries, x.MaxSeconds)
	w("")
	w("| rules | configuration | entries done | seconds | entries/s | × per-user | users per batch | claim rounds per 100 entries | refresh round trips per user | commands per acked entry | bound users/s | of bound |")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, b := range x.Diverse {
		w("| %s | %s | %.0f | %.1f | %.1f | %s | %.1f | %.1f | %.2f | %.2f | %.0f (%s) | %.0f%% |", b.Config.Rules, b.Config.Label, b.Run.Progress, b.Run.Seconds, b.Run.Rate,
			perUserRatio(b, x.perUserOf(b.Config.Rules)), b.UsersPerBatch, 100*b.Run.Claims/math.Max(b.Run.Acked, 1), b.TripsPerUser, b.CommandsPerAcked, b.Bounds.Lower, b.Bounds.Which, 100*b.FractionOfLower)
	}
	w("")
	w("The bound is the lower of the latency bound (min(REFRESH_CONCURRENCY × batch size, MAX_USERS_IN_FLIGHT) users over a batch's round trips plus its start mark, at the measured proxy RTT) and the server's capacity above. Commands per acked entry: every MongoDB command of the consumer (claims, leases, acks, samples included) over the entries it acknowledged, the final flush at shutdown included.")
	w("")
}

func (x *batchedResult) farTable(w func(string, ...any)) {
	if len(x.Far) == 0 {
		return
	}
	w("The same drain at RTT %.0f ms, where every configuration is latency-bound far below the server's capacity (each run at most %.0f s): what batching saves in waiting alone.", x.FarRTTms, x.MaxSeconds)
	w("")
	w("| configuration | entries done | seconds | entries/s | × per-user | users per batch | commands per acked entry | latency bound users/s | of it |")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	var pu *batchRun
	for i := range x.Far {
		if x.Far[i].Config.perUser() {
			pu = &x.Far[i]
		}
	}
	for _, b := range x.Far {
		w("| %s | %.0f | %.1f | %.1f | %s | %.1f | %.2f | %.1f | %.0f%% |", b.Config.Label, b.Run.Progress, b.Run.Seconds, b.Run.Rate, perUserRatio(b, pu),
			b.UsersPerBatch, b.CommandsPerAcked, b.Bounds.Latency, 100*fin(b.Run.Rate/b.Bounds.Latency))
	}
	w("")
}

func (x *batchedResult) wedgeTable(w func(string, ...any)) {
	if len(x.Wedge) == 0 {
		return
	}
	w("Wedge: diverse arrivals at %.1f/s for %.0f s (scenario 3's rate):", x.WedgeRate, x.WedgeSeconds)
	w("")
	w("| configuration | oldest age at most s | depth at the end | users per batch | commands per acked entry | CPU ms/entry: process | server total |")
	w("|---|---:|---:|---:|---:|---:|---:|")
	for _, b := range x.Wedge {
		w("| %s | %.1f | %d | %.1f | %.2f | %.2f | %.2f |", b.Config.Label, maxOldest(b.Run.Timeline, 0), last(b.Run.Timeline).Depth,
			b.UsersPerBatch, b.CommandsPerAcked, b.PerEntry.Process, b.PerEntry.ServerTotal)
	}
	w("")
}

func (x *batchedResult) recoveryTable(w func(string, ...any)) {
	if len(x.Recovery) == 0 {
		return
	}
	w("Recovery: arrivals at %.1f/s (half the per-user drain rate), RTT %.0f ms from %.0f s to %.0f s:", x.RecoveryRate, x.TriggerRTTms, x.TriggerAt, x.RestoreAt)
	w("")
	w("| configuration | pre-trigger oldest age s | peak oldest age s | peak depth | back under the pre-trigger level | commands per acked entry |")
	w("|---|---:|---:|---:|---|---:|")
	for i, b := range x.Recovery {
		w("| %s | %.1f | %.0f | %d | %s | %.2f |", b.Config.Label, x.PreLevels[i], maxOldest(b.Run.Timeline, x.TriggerAt), peakDepth(b.Run.Timeline, 0),
			seconds(x.Recovered[i], "after restore"), b.CommandsPerAcked)
	}
	w("")
}

func (x *batchedResult) cpuTable(w func(string, ...any)) {
	w("CPU per acknowledged entry over each drain (ms): the bench process (FerretDB, the proxy, the consumer, the producers) from getrusage, split by its CPU profile: the consumer is every goroutine scorerefresh started (its driver included; its share of the runtime's background GC work is not), the proxy is pkg/faultproxy, and the server in process is the rest (FerretDB, the runtime, the bench's sampler). PostgreSQL is its processes' CPU from /proc. Server total = server in process + PostgreSQL: what MongoDB's side costs.")
	if !x.Profiled {
		w("")
		w("(-cpuprofile held the profiler: the process is not split, and \"server in process\" is the whole process.)")
	}
	w("")
	w("| rules | configuration | process | consumer | proxy | server in process | PostgreSQL | **server total** | profile samples |")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, b := range x.Diverse {
		p := b.PerEntry
		w("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | **%.2f** | %d |", b.Config.Rules, b.Config.Label, p.Process, p.Consumer, p.Proxy, p.Server, p.PostgreSQL, p.ServerTotal, b.CPU.Samples)
	}
	w("")
}

// oneSlotTables set each rule set's drains that include a one-slot run
// against it, and the drain capacity the service estimated against the ack
// rate it reached while the backlog was deep.
func (x *batchedResult) oneSlotTables(w func(string, ...any)) {
	var done []string
	for _, r := range x.Diverse {
		rules := r.Config.Rules
		ones := x.oneSlotOf(rules)
		if len(ones) == 0 || slices.Contains(done, rules) {
			continue
		}
		done = append(done, rules)
		base := 0.0
		for _, o := range ones {
			base += o.Saturated.Rate / float64(len(ones))
		}
		w("Against one slot, %s rules: every drain of them, in the order they ran, divided by the one-slot drain (`REFRESH_CONCURRENCY=1 REFRESH_BATCH_SIZE=1`; the mean of them when the list repeats it: here %d at %.2f acked/s on average). "+
			"At saturation is the stretch from a tenth of the run to the last sample with more than twice MAX_USERS_IN_FLIGHT entries queued, where every slot could be busy; the ratios are of those rates. "+
			"The estimate is planner.DrainRate(REFRESH_CONCURRENCY, users per batch, mean batch seconds, entries per user) over that stretch from the service's own histograms (`scorerefresh_refresh_batch_duration_seconds`, `scorerefresh_refresh_batch_users`), the formula of `scorerefresh_drain_capacity`; "+
			"the gauge is that metric as the service last set it within the stretch (its sampler runs every SLI_INTERVAL over a 2-minute window).", rules, len(ones), base)
		w("")
		w("| # | configuration | REFRESH_CONCURRENCY | REFRESH_BATCH_SIZE | MAX_USERS_IN_FLIGHT | entries done | drain entries/s | at saturation acked/s | **× one slot** | users per batch | mean batch ms | estimate entries/s | estimate ÷ measured | drain_capacity gauge (at s) |")
		w("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for i, b := range x.Diverse {
			if b.Config.Rules != rules {
				continue
			}
			s := b.Saturated
			size := fmt.Sprintf("%d", b.Config.BatchSize)
			if b.Config.BatchSize == 0 {
				size = fmt.Sprintf("unset (default; %d here)", b.Config.Effective)
			}
			w("| %d | %s | %d | %s | %d | %.0f | %.1f | %.1f | **%.1f×** | %.2f | %.1f | %.1f | %.2f | %.1f (%.0f) |", i+1, b.Config.Label, b.Run.Concurrency, size, b.Config.MaxUsersInFlight,
				b.Run.Progress, b.Run.Rate, s.Rate, fin(s.Rate/base), s.UsersPerBatch, s.BatchMs, s.Estimate, fin(s.Estimate/s.Rate), s.Gauge, s.GaugeAt)
		}
		w("")
	}
}
