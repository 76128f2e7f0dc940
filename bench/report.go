package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Report is everything one run measured; results.json is this, report.md
// and the charts are drawn from it.
type Report struct {
	Started     string          `json:"started"`
	Seconds     float64         `json:"seconds"`
	Short       bool            `json:"short"`
	Command     string          `json:"command"`
	Server      string          `json:"server"`
	Machine     string          `json:"machine"`
	GoVersion   string          `json:"go_version"`
	RTTms       float64         `json:"rtt_ms"`
	Concurrency int             `json:"concurrency"`
	Rules       int             `json:"rule_components"`
	Sources     int             `json:"source_documents"`
	Pool        int             `json:"user_pool"`
	Calibration calibration     `json:"calibration"`
	Diverse     *drainResult    `json:"diverse,omitempty"`
	Firehose    *drainResult    `json:"firehose,omitempty"`
	Wedge       *wedgeResult    `json:"wedge,omitempty"`
	Recovery    *recoveryResult `json:"recovery,omitempty"`
	Overload    []overloadLevel `json:"overload,omitempty"`
	Scale       *scaleResult    `json:"scale,omitempty"`
	Adaptive    *adaptiveResult `json:"adaptive,omitempty"`
	Fleet       *fleetResult    `json:"fleet,omitempty"`
	Storm       *stormResult    `json:"storm,omitempty"`
	Batched     *batchedResult  `json:"batched,omitempty"`
	Slowdown    *slowdownResult `json:"slowdown,omitempty"`
	// Compare is another version's run of the fleet and storm scenarios
	// (-compare), reported side by side.
	Compare *Report           `json:"compare,omitempty"`
	Targets []target          `json:"targets"`
	Charts  map[string]string `json:"charts"`
}

func (r *Report) write(dir string) error {
	r.Charts = map[string]string{}
	for name, c := range r.timelineCharts() {
		file := name + ".svg"
		if err := os.WriteFile(filepath.Join(dir, file), []byte(c.SVG()), 0o644); err != nil {
			return err
		}
		r.Charts[name] = file
	}
	for name, c := range r.moreCharts() {
		file := name + ".svg"
		if err := os.WriteFile(filepath.Join(dir, file), []byte(c.SVG()), 0o644); err != nil {
			return err
		}
		r.Charts[name] = file
	}
	if len(r.Overload) > 0 {
		if err := os.WriteFile(filepath.Join(dir, "overload.svg"), []byte(r.overloadSVG()), 0o644); err != nil {
			return err
		}
		r.Charts["overload"] = "overload.svg"
	}
	data, err := json.MarshalIndent(sanitize(r), "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644); err != nil {
		return err
	}
	md := r.markdown()
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "index.html"), []byte(r.html(md)), 0o644)
}

// sanitize replaces non-finite floats in the report's own fields.
func sanitize(r *Report) *Report {
	c := *r
	fix := func(f *float64) {
		if math.IsNaN(*f) || math.IsInf(*f, 0) {
			*f = -1
		}
	}
	for _, d := range []*drainResult{c.Diverse, c.Firehose} {
		if d != nil {
			fix(&d.Ratio)
			fix(&d.FractionLower)
		}
	}
	for i := range c.Targets {
		fix(&c.Targets[i].Value)
	}
	if c.Scale != nil {
		fix(&c.Scale.Efficiency)
	}
	if c.Adaptive != nil {
		for _, v := range []*float64{&c.Adaptive.Fraction, &c.Adaptive.Fairness, &c.Adaptive.ThreeOverOne, &c.Adaptive.ThreeFraction} {
			fix(v)
		}
	}
	for i := range c.Overload {
		fix(&c.Overload[i].Goodput)
	}
	if c.Storm != nil {
		fix(&c.Storm.RateRatio)
	}
	return &c
}

// rows are the table's runs in scenario order.
func (r *Report) rows() [][]*runResult {
	var rows [][]*runResult
	add := func(p pair) {
		rows = append(rows, []*runResult{p.Reference, p.Scorerefresh})
	}
	if r.Diverse != nil {
		add(r.Diverse.pair)
	}
	if r.Firehose != nil {
		add(r.Firehose.pair)
	}
	if r.Wedge != nil {
		add(r.Wedge.pair)
	}
	if r.Recovery != nil {
		add(r.Recovery.pair)
	}
	for _, l := range r.Overload {
		rows = append(rows, []*runResult{l.Run})
	}
	if r.Scale != nil {
		rows = append(rows, []*runResult{r.Scale.One}, []*runResult{r.Scale.Three})
	}
	if r.Adaptive != nil {
		rows = append(rows, r.Adaptive.runs()...)
	}
	return rows
}

// markdown is report.md.
func (r *Report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	r.markdownHeader(w)
	r.Calibration.markdown(w, r.Concurrency)
	r.markdownResults(w)
	r.markdownScenarioFigures(w)
	r.markdownSections(w)
	w("## Targets")
	w("")
	w("| scenario | target | figure | verdict |")
	w("|---|---|---|---|")
	for _, t := range r.Targets {
		w("| %s | %s | %s | %s |", t.Scenario, t.Target, t.Figure, verdict(t))
	}
	w("")
	w("## Charts")
	w("")
	r.markdownCharts(w, "diverse", "firehose", "wedge", "recovery", "overload")
	return b.String()
}

// markdownCharts links the named charts that were drawn.
func (r *Report) markdownCharts(w func(string, ...any), names ...string) {
	for _, name := range names {
		if f, ok := r.Charts[name]; ok {
			w("![%s](%s)", name, f)
			w("")
		}
	}
}

func (r *Report) markdownHeader(w func(string, ...any)) {
	w("# scorerefresh-bench results")
	w("")
	w("- command: `%s`", r.Command)
	w("- when: %s, %.0f s; machine: %s, %s", r.Started, r.Seconds, r.Machine, r.GoVersion)
	w("- server: %s", r.Server)
	w("- network: pkg/faultproxy adds an RTT of %.0f ms to every MongoDB command of both consumers; producers and the depth sampler connect directly", r.RTTms)
	w("- scoring: %d rule components over %d source documents (bench/results/rules.yaml); REFRESH_CONCURRENCY %d; every other setting is the service's default", r.Rules, r.Sources, r.Concurrency)
	if r.Short {
		w("- **smoke run (-short): sizes and durations are tiny; the figures mean nothing**")
	}
}

func (c calibration) markdown(w func(string, ...any), concurrency int) {
	w("")
	w("## Calibration")
	w("")
	w("Server time per query, one at a time on a direct connection:")
	w("")
	w("| query | count | mean ms |")
	w("|---|---:|---:|")
	for _, k := range c.Kinds {
		w("| %s | %d | %.2f |", k.Kind, k.Count, k.MeanMs)
	}
	w("")
	levels := []string{}
	for _, l := range c.Levels {
		levels = append(levels, fmt.Sprintf("%.0f queries/s with %d refreshes at once", l.QPS, l.Workers))
	}
	w("%.1f round trips per refresh, %.2f ms mean server time per query; throughput %s.", c.RoundTrips, c.ServerMs, strings.Join(levels, ", "))
	w("")
	w("A ping through the proxy set to %.0f ms, %d at once, takes **%.1f ms**: the RTT the consumers actually get (the proxy's timers and goroutines and the driver add to the nominal figure); the bounds use it.", c.RTTms, c.Concurrency, c.ProxyRTTms)
	w("")
	w("- latency bound: %d / (%.1f × (%.1f ms + %.2f ms)) = **%.1f refreshes/s** (with the nominal %.0f ms: %.1f/s)", concurrency, c.RoundTrips, c.ProxyRTTms, c.ServerMs, c.Bounds.Latency,
		c.RTTms, float64(concurrency)/(c.RoundTrips*(c.RTTms+c.ServerMs)/1000))
	w("- server bound: %.0f queries/s / %.1f = **%.1f refreshes/s**", c.QPS, c.RoundTrips, c.Bounds.Server)
	w("- binding: **%s** (%.1f refreshes/s)", c.Bounds.Which, c.Bounds.Lower)
	w("")
}

// markdownResults is the table of every run, scenario by scenario.
func (r *Report) markdownResults(w func(string, ...any)) {
	w("## Results")
	w("")
	w("| scenario | consumer | RTT ms | entries | seconds | entries/s | ratio | refreshes | commands/entry | notes |")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, row := range r.rows() {
		var ref *runResult
		for _, x := range row {
			if x == nil {
				continue
			}
			if x.Consumer == consumerReference {
				ref = x
			}
			w("| %s | %s%s | %.0f | %d | %.1f | %.1f | %s | %.0f | %.2f | %s |", x.Scenario, x.Consumer, instancesCol(x), x.RTTms, x.Backlog+int(x.Produced),
				x.Seconds, x.Rate, ratioCell(x, ref), x.Refreshes, x.CommandsPerEntry, r.note(x))
		}
	}
	w("")
	w("entries/s is entries done over the run's seconds (drains: until drained, or for the reference until its time cap; ")
	w("the reference counts an entry done when its user's refresh completes, since it acknowledges only after each 200-entry batch). ")
	w("commands/entry is every MongoDB command of the consumer (command monitor, `scorerefresh_mongo_commands_total`) per entry done.")
	w("")
}

// ratioCell is scorerefresh's rate over the reference's run in the same
// row, if there is one.
func ratioCell(x, ref *runResult) string {
	if x.Consumer == consumerScorerefresh && ref != nil && ref.Rate > 0 {
		return fmt.Sprintf("%.1f×", x.Rate/ref.Rate)
	}
	return ""
}

// markdownScenarioFigures sums scenarios 3 to 6 up in a line each.
func (r *Report) markdownScenarioFigures(w func(string, ...any)) {
	if r.Wedge != nil || r.Recovery != nil || len(r.Overload) > 0 || r.Scale != nil {
		w("## Scenario figures")
		w("")
	}
	if x := r.Wedge; x != nil {
		w("- wedge: arrivals %.1f/s. %s Reference: depth %d at the end, growing %.1f/s over the second half, oldest age up to %.0f s. scorerefresh: depth %d at the end, oldest age at most %.1f s.",
			x.Rate, x.Note, x.ReferenceFinalDepth, x.ReferenceDepthSlope, x.ReferenceMaxOldestAge, x.ScorerefreshFinalDepth, x.ScorerefreshMaxOldestAge)
	}
	if x := r.Recovery; x != nil {
		w("- recovery: arrivals %.1f/s, RTT %.0f ms from %.0f s to %.0f s. scorerefresh: pre-trigger oldest age ≤ %.1f s, peak %.0f s and depth %d, back under the pre-trigger level %s. Reference: %s.",
			x.Rate, x.TriggerRTTms, x.TriggerAt, x.RestoreAt, x.PreLevel, x.PeakAge, x.PeakDepth, seconds(x.Recovery, "after restore"),
			refRecovery(x))
	}
	if len(r.Overload) > 0 {
		var parts []string
		for _, l := range r.Overload {
			parts = append(parts, fmt.Sprintf("%.1f× (%.1f/s) → %.1f/s", l.Factor, l.Offered, l.Goodput))
		}
		w("- overload (offered → goodput, after warm-up): %s.", strings.Join(parts, "; "))
	}
	if x := r.Scale; x != nil {
		w("- scale-out at RTT %.0f ms (%d diverse entries; three in-process instances, each with its own client and pool): one %.1f/s, three %.1f/s, efficiency %.2f. Bounds: latency %.1f/s for one, %.1f/s for three; server %.1f/s.",
			x.RTTms, x.Entries, x.RateOne, x.RateThree, x.Efficiency, x.BoundsOne.Latency, x.LatencyThree, x.BoundsOne.Server)
	}
	w("")
}

// markdownSections are the sections of the scenarios that write their own.
func (r *Report) markdownSections(w func(string, ...any)) {
	if r.Adaptive != nil {
		r.Adaptive.markdown(w)
	}
	var compare Report
	if r.Compare != nil {
		compare = *r.Compare
	}
	if r.Fleet != nil {
		fleetMarkdown(w, r.Fleet, compare.Fleet)
	}
	if r.Storm != nil {
		stormMarkdown(w, r.Storm, compare.Storm)
	}
	if r.Batched != nil {
		r.Batched.markdown(w, r)
	}
	if r.Slowdown != nil {
		r.Slowdown.markdown(w, r)
	}
}

func instancesCol(x *runResult) string {
	if x.Instances > 1 {
		return fmt.Sprintf(" ×%d", x.Instances)
	}
	return ""
}

func (r *Report) note(x *runResult) string {
	switch {
	case strings.HasPrefix(x.Scenario, "overload"):
		return fmt.Sprintf("offered %.1f/s", float64(x.Produced)/math.Max(x.Seconds, 1e-9))
	case x.Scenario == "scale1" || x.Scenario == "scale3":
		if r.Scale != nil {
			if x.Instances > 1 {
				return fmt.Sprintf("window rate %.1f/s", r.Scale.RateThree)
			}
			return fmt.Sprintf("window rate %.1f/s", r.Scale.RateOne)
		}
	case x.Drained:
		return "drained"
	case x.Backlog > 0 && x.Produced == 0:
		return fmt.Sprintf("time cap; %.0f acked", x.Acked)
	case x.Produced > 0:
		return fmt.Sprintf("arrivals %.1f/s; depth %d at the end", float64(x.Produced)/math.Max(x.Seconds, 1e-9), last(x.Timeline).Depth)
	}
	return ""
}

func seconds(v float64, what string) string {
	if v < 0 {
		return "never within the run"
	}
	return fmt.Sprintf("%.0f s %s", v, what)
}

func refRecovery(x *recoveryResult) string {
	if x.ReferenceRecovery >= 0 {
		return fmt.Sprintf("recovered %.0f s after restore", x.ReferenceRecovery)
	}
	return fmt.Sprintf("not recovered %.0f s after restore (depth %d)", x.ReferenceObserved, x.ReferenceFinalDepth)
}

// html is a page with the report's tables and the charts inline.
func (r *Report) html(md string) string {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<meta charset=\"utf-8\">\n<title>scorerefresh-bench results</title>\n")
	b.WriteString("<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,td:nth-child(2),th{text-align:left}img{max-width:100%}</style>\n")
	inTable := false
	for _, line := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
				continue
			}
			tag := "td"
			if !inTable {
				b.WriteString("<table>\n")
				inTable, tag = true, "th"
			}
			b.WriteString("<tr>")
			for _, c := range cells {
				fmt.Fprintf(&b, "<%s>%s</%s>", tag, inline(c), tag)
			}
			b.WriteString("</tr>\n")
			continue
		case inTable:
			b.WriteString("</table>\n")
			inTable = false
		}
		switch {
		case strings.HasPrefix(line, "## "):
			fmt.Fprintf(&b, "<h2>%s</h2>\n", html.EscapeString(line[3:]))
		case strings.HasPrefix(line, "# "):
			fmt.Fprintf(&b, "<h1>%s</h1>\n", html.EscapeString(line[2:]))
		case strings.HasPrefix(line, "!["):
			name, file, _ := strings.Cut(strings.TrimPrefix(line, "!["), "](")
			fmt.Fprintf(&b, "<p><img alt=\"%s\" src=\"%s\"></p>\n", html.EscapeString(name), html.EscapeString(strings.TrimSuffix(file, ")")))
		case strings.HasPrefix(line, "- "):
			fmt.Fprintf(&b, "<li>%s</li>\n", inline(line[2:]))
		case strings.TrimSpace(line) != "":
			fmt.Fprintf(&b, "<p>%s</p>\n", inline(line))
		}
	}
	if inTable {
		b.WriteString("</table>\n")
	}
	return b.String()
}

// inline renders **bold** and `code` of one Markdown line.
func inline(s string) string {
	s = html.EscapeString(strings.TrimSpace(s))
	for _, m := range []struct{ mark, open, close string }{{"**", "<b>", "</b>"}, {"`", "<code>", "</code>"}} {
		parts := strings.Split(s, m.mark)
		if len(parts) < 3 {
			continue
		}
		var b strings.Builder
		for i, p := range parts {
			if i > 0 {
				if i%2 == 1 {
					b.WriteString(m.open)
				} else {
					b.WriteString(m.close)
				}
			}
			b.WriteString(p)
		}
		s = b.String()
	}
	return s
}
