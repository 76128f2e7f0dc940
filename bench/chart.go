package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Colours of the two consumers, the same in every chart.
const (
	colorReference    = "#d9480f"
	colorScorerefresh = "#1c7ed6"
)

// line is one polyline of a panel.
type line struct {
	name, color string
	points      [][2]float64
}

// panel is one plot; panels of a chart share the x axis.
type panel struct {
	title, unit string
	lines       []line
}

// chart is stacked panels over one x axis, with vertical markers.
type chart struct {
	title, subtitle string
	xLabel          string
	panels          []panel
	markers         map[string]float64 // label -> x
}

// timelineCharts draws depth and oldest age over time, reference vs.
// scorerefresh, for each scenario that has a timeline of both.
func (r *Report) timelineCharts() map[string]chart {
	out := map[string]chart{}
	add := func(name, title string, p pair, markers map[string]float64) {
		if p.Scorerefresh == nil {
			return
		}
		c := chart{title: title, xLabel: "seconds since the consumer started", markers: markers}
		depth := panel{title: "queue depth", unit: "entries"}
		age := panel{title: "oldest entry age", unit: "s"}
		for _, run := range []*runResult{p.Reference, p.Scorerefresh} {
			if run == nil {
				continue
			}
			color := colorScorerefresh
			if run.Consumer == consumerReference {
				color = colorReference
			}
			d := line{name: run.Consumer, color: color}
			a := line{name: run.Consumer, color: color}
			for _, s := range run.Timeline {
				d.points = append(d.points, [2]float64{s.T, float64(s.Depth)})
				a.points = append(a.points, [2]float64{s.T, s.OldestAge})
			}
			depth.lines = append(depth.lines, d)
			age.lines = append(age.lines, a)
		}
		c.subtitle = fmt.Sprintf("%s; RTT %.0f ms; REFRESH_CONCURRENCY %d", r.Server, r.RTTms, r.Concurrency)
		c.panels = []panel{depth, age}
		out[name] = c
	}
	if x := r.Diverse; x != nil {
		add("diverse", fmt.Sprintf("1. Diverse drain: %d entries of %d users (reference %.1f/s, scorerefresh %.1f/s, %.1f×)",
			x.Entries, x.Users, x.Reference.Rate, x.Scorerefresh.Rate, x.Ratio), x.pair, nil)
	}
	if x := r.Firehose; x != nil {
		add("firehose", fmt.Sprintf("2. Firehose drain: %d entries of %d users (reference %.1f/s, scorerefresh %.1f/s, %.1f×)",
			x.Entries, x.Users, x.Reference.Rate, x.Scorerefresh.Rate, x.Ratio), x.pair, nil)
	}
	if x := r.Wedge; x != nil {
		add("wedge", fmt.Sprintf("3. Wedge: diverse arrivals at %.1f/s", x.Rate), x.pair, nil)
	}
	if x := r.Recovery; x != nil {
		add("recovery", fmt.Sprintf("4. Trigger and recovery: arrivals at %.1f/s, RTT × %.0f between the markers", x.Rate, x.TriggerRTTms/r.RTTms),
			x.pair, map[string]float64{"trigger": x.TriggerAt, "restore": x.RestoreAt})
	}
	return out
}

// moreCharts are the charts of the scenarios that draw their own.
func (r *Report) moreCharts() map[string]chart {
	out := map[string]chart{}
	sub := fmt.Sprintf("%s; RTT %.0f ms; REFRESH_CONCURRENCY %d", r.Server, r.RTTms, r.Concurrency)
	if x := r.Batched; x != nil {
		for name, c := range x.charts() {
			c.subtitle = sub
			out[name] = c
		}
	}
	if x := r.Slowdown; x != nil {
		c := x.chart()
		c.subtitle = sub
		out["slowdown"] = c
	}
	return out
}

// overloadSVG draws goodput against offered load.
func (r *Report) overloadSVG() string {
	good := line{name: "scorerefresh goodput", color: colorScorerefresh}
	ideal := line{name: "offered", color: "#999"}
	for _, l := range r.Overload {
		good.points = append(good.points, [2]float64{l.Offered, l.Goodput})
		ideal.points = append(ideal.points, [2]float64{l.Offered, l.Offered})
	}
	c := chart{
		title:    "5. Overload: goodput against offered load",
		subtitle: fmt.Sprintf("%s; RTT %.0f ms; REFRESH_CONCURRENCY %d", r.Server, r.RTTms, r.Concurrency),
		xLabel:   "offered entries/s",
		panels:   []panel{{title: "entries acknowledged per second", unit: "entries/s", lines: []line{ideal, good}}},
	}
	return c.svg()
}

// Geometry, in SVG user units.
const (
	svgWidth    = 960
	svgPanelH   = 200
	svgPanelGap = 60
	svgLeft     = 80
	svgRight    = 24
	svgTop      = 80
)

func (c chart) svg() string {
	xMax := 1e-9
	for _, p := range c.panels {
		for _, l := range p.lines {
			for _, pt := range l.points {
				xMax = math.Max(xMax, pt[0])
			}
		}
	}
	height := svgTop + len(c.panels)*(svgPanelH+svgPanelGap) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="16" font-weight="600" fill="#111">%s</text>`+"\n", svgLeft, html.EscapeString(c.title))
	fmt.Fprintf(&b, `<text x="%d" y="46" fill="#555">%s</text>`+"\n", svgLeft, html.EscapeString(c.subtitle))
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(v float64) float64 { return svgLeft + v/xMax*plotW }
	for i, p := range c.panels {
		top := float64(svgTop + i*(svgPanelH+svgPanelGap))
		yMax := 1e-9
		for _, l := range p.lines {
			for _, pt := range l.points {
				yMax = math.Max(yMax, pt[1])
			}
		}
		yTicks := ticks(yMax, 5)
		yMax = math.Max(yMax, yTicks[len(yTicks)-1])
		y := func(v float64) float64 { return top + svgPanelH - v/yMax*svgPanelH }
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-weight="600" fill="#333">%s (%s)</text>`+"\n", svgLeft, top-8, html.EscapeString(p.title), html.EscapeString(p.unit))
		for _, t := range yTicks {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`, svgLeft, y(t), svgWidth-svgRight, y(t))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#666">%s</text>`+"\n", svgLeft-6, y(t)+4, num(t))
		}
		for _, t := range ticks(xMax, 10) {
			if t > xMax {
				break
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ccc"/>`, x(t), top+svgPanelH, x(t), top+svgPanelH+4)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#666">%s</text>`+"\n", x(t), top+svgPanelH+17, num(t))
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.0f" height="%d" fill="none" stroke="#bbb"/>`+"\n", svgLeft, top, plotW, svgPanelH)
		for label, at := range c.markers {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#888" stroke-dasharray="4 3"/>`, x(at), top, x(at), top+svgPanelH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" fill="#666">%s</text>`+"\n", x(at)+3, top+12, html.EscapeString(label))
		}
		for j, l := range p.lines {
			var pts []string
			for _, pt := range l.points {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(pt[0]), y(pt[1])))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", l.color, strings.Join(pts, " "))
			lx := float64(svgWidth-svgRight) - 190
			ly := top + 16 + float64(j)*16
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/><text x="%.0f" y="%.0f" fill="#333">%s</text>`+"\n",
				lx, ly-4, lx+18, ly-4, l.color, lx+24, ly, html.EscapeString(l.name))
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", svgLeft+plotW/2, height-8, html.EscapeString(c.xLabel))
	b.WriteString("</svg>\n")
	return b.String()
}

// ticks returns round values from 0 covering max, about n of them.
func ticks(max float64, n int) []float64 {
	if max <= 0 || math.IsNaN(max) || math.IsInf(max, 0) {
		return []float64{0, 1}
	}
	raw := max / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, v)
		if v >= max {
			break
		}
	}
	return out
}

func num(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
