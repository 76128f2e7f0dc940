package bench

import (
	"fmt"
	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
)

// Colours of the two consumers, the same in every chart.
const (
	colorReference    = "#d9480f"
	colorScorerefresh = "#1c7ed6"
)

// chartPanelHeight is the height of each panel of the bench's charts.
const chartPanelHeight = 200

// timelineCharts draws depth and oldest age over time, reference vs.
// scorerefresh, for each scenario that has a timeline of both.
func (r *Report) timelineCharts() map[string]svgchart.Chart {
	out := map[string]svgchart.Chart{}
	add := func(name, title string, p pair, markers []svgchart.Marker) {
		if p.Scorerefresh == nil {
			return
		}
		c := svgchart.Chart{PanelHeight: chartPanelHeight, Title: title, XLabel: "seconds since the consumer started", Markers: markers}
		depth := svgchart.Panel{Title: "queue depth (entries)"}
		age := svgchart.Panel{Title: "oldest entry age (s)"}
		for _, run := range []*runResult{p.Reference, p.Scorerefresh} {
			if run == nil {
				continue
			}
			color := colorScorerefresh
			if run.Consumer == consumerReference {
				color = colorReference
			}
			d := svgchart.Series{Name: run.Consumer, Color: color}
			a := svgchart.Series{Name: run.Consumer, Color: color}
			for _, s := range run.Timeline {
				d.Points = append(d.Points, [2]float64{s.T, float64(s.Depth)})
				a.Points = append(a.Points, [2]float64{s.T, s.OldestAge})
			}
			depth.Series = append(depth.Series, d)
			age.Series = append(age.Series, a)
		}
		c.Subtitle = []string{fmt.Sprintf("%s; RTT %.0f ms; REFRESH_CONCURRENCY %d", r.Server, r.RTTms, r.Concurrency)}
		c.Panels = []svgchart.Panel{depth, age}
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
			x.pair, []svgchart.Marker{{Label: "trigger", X: x.TriggerAt}, {Label: "restore", X: x.RestoreAt}})
	}
	return out
}

// moreCharts are the charts of the scenarios that draw their own.
func (r *Report) moreCharts() map[string]svgchart.Chart {
	out := map[string]svgchart.Chart{}
	sub := fmt.Sprintf("%s; RTT %.0f ms; REFRESH_CONCURRENCY %d", r.Server, r.RTTms, r.Concurrency)
	if x := r.Batched; x != nil {
		for name, c := range x.charts() {
			c.Subtitle = []string{sub}
			out[name] = c
		}
	}
	if x := r.Slowdown; x != nil {
		c := x.chart()
		c.Subtitle = []string{sub}
		out["slowdown"] = c
	}
	return out
}

// overloadSVG draws goodput against offered load.
func (r *Report) overloadSVG() string {
	good := svgchart.Series{Name: "scorerefresh goodput", Color: colorScorerefresh}
	ideal := svgchart.Series{Name: "offered", Color: "#999"}
	for _, l := range r.Overload {
		good.Points = append(good.Points, [2]float64{l.Offered, l.Goodput})
		ideal.Points = append(ideal.Points, [2]float64{l.Offered, l.Offered})
	}
	c := svgchart.Chart{
		PanelHeight: chartPanelHeight,
		Title:       "5. Overload: goodput against offered load",
		Subtitle:    []string{fmt.Sprintf("%s; RTT %.0f ms; REFRESH_CONCURRENCY %d", r.Server, r.RTTms, r.Concurrency)},
		XLabel:      "offered entries/s",
		Panels:      []svgchart.Panel{{Title: "entries acknowledged per second", Series: []svgchart.Series{ideal, good}}},
	}
	return c.SVG()
}
