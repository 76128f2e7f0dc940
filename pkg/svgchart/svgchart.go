// Package svgchart draws stacked line charts as self-contained SVG: panels
// sharing an x axis from 0, each with its own y axis from 0 and a legend,
// optional vertical markers across them all, and "nice" ticks (NiceTicks).
package svgchart

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// Series is one line of a panel, drawn over the series before it.
type Series struct {
	Name, Color string       // legend text; any SVG colour (Palette has ten)
	Fill        bool         // shade the area under the line
	Points      [][2]float64 // (x, y) in drawing order; a gap is a missing point
}

// Panel is one plot of a chart.
type Panel struct {
	Title  string
	Unit   string // appended to the y tick labels ("s" draws 30s)
	Series []Series
}

// Marker is a labelled dashed vertical line across every panel at X.
type Marker struct {
	Label string
	X     float64
}

// Chart is stacked panels under a title.
type Chart struct {
	Title    string
	Subtitle []string // one line each, under the title
	Panels   []Panel
	Markers  []Marker
	XUnit    string // appended to the x tick labels
	XLabel   string // centred under the last panel
	Footer   string // small print at the bottom left (provenance)
}

// Palette is colours for series to take in turn.
var Palette = []string{"#2563eb", "#dc2626", "#16a34a", "#9333ea", "#d97706", "#0891b2", "#db2777", "#4b5563", "#65a30d", "#7c3aed"}

// Geometry, in SVG user units.
const (
	width       = 960
	marginLeft  = 78
	marginRight = 24
	panelHeight = 150
	panelGap    = 46
	xTickCount  = 8
	yTickCount  = 4
)

// SVG returns the chart as a self-contained SVG document.
func (c Chart) SVG() string {
	top0 := 63 + 15*len(c.Subtitle)
	height := top0 + len(c.Panels)*(panelHeight+panelGap) + 10
	if c.XLabel != "" {
		height += 16
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="17" font-weight="600" fill="#111">%s</text>`+"\n", marginLeft, html.EscapeString(c.Title))
	for i, line := range c.Subtitle {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", marginLeft, 46+15*i, html.EscapeString(line))
	}
	xMax := 0.0
	for _, p := range c.Panels {
		xMax = math.Max(xMax, most(p.Series, 0))
	}
	for _, m := range c.Markers {
		xMax = math.Max(xMax, m.X)
	}
	if !(xMax > 0) || math.IsInf(xMax, 0) {
		xMax = 1
	}
	pl := plot{b: &b, height: float64(panelHeight), right: width - marginRight, xMax: xMax, xWidth: float64(width - marginLeft - marginRight),
		xTicks: slices.DeleteFunc(NiceTicks(xMax, xTickCount), func(t float64) bool { return t > xMax*(1+1e-9) })}
	for i, p := range c.Panels {
		pl.top = float64(top0 + i*(panelHeight+panelGap))
		pl.draw(p, c.Markers, c.XUnit)
	}
	if c.XLabel != "" {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", marginLeft+pl.xWidth/2, height-22, html.EscapeString(c.XLabel))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#888" font-size="11">%s</text>`+"\n", marginLeft, height-6, html.EscapeString(c.Footer))
	b.WriteString("</svg>\n")
	return b.String()
}

// most is the largest coordinate i of the points, at least 0.
func most(series []Series, i int) float64 {
	v := 0.0
	for _, s := range series {
		for _, pt := range s.Points {
			v = math.Max(v, pt[i])
		}
	}
	return v
}

// plot draws one panel whose top edge is at top; x maps 0…xMax onto the plots' width.
type plot struct {
	b                 *strings.Builder
	top, height, yTop float64 // yTop: the y axis's highest tick
	right             int
	xMax, xWidth      float64
	xTicks            []float64
}

func (pl *plot) x(v float64) float64 { return marginLeft + v/pl.xMax*pl.xWidth }

func (pl *plot) y(v float64) float64 { return pl.top + pl.height - v/pl.yTop*pl.height }

func (pl *plot) draw(p Panel, markers []Marker, xUnit string) {
	yTicks := NiceTicks(most(p.Series, 1), yTickCount)
	pl.yTop = yTicks[len(yTicks)-1]
	b := pl.b
	fmt.Fprintf(b, `<text x="%d" y="%.1f" font-weight="600" fill="#222">%s</text>`+"\n", marginLeft, pl.top-8, html.EscapeString(p.Title))
	for _, v := range yTicks {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, marginLeft, pl.right, pl.y(v), pl.y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#666">%s</text>`+"\n", marginLeft-6, pl.y(v)+4, html.EscapeString(Label(v)+p.Unit))
	}
	bottom := pl.top + pl.height
	for _, t := range pl.xTicks {
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#f0f0f0"/>`, pl.x(t), pl.x(t), pl.top, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#666">%s</text>`+"\n", pl.x(t), bottom+15, html.EscapeString(Label(t)+xUnit))
	}
	fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="%.1f" height="%.0f" fill="none" stroke="#bbb"/>`+"\n", marginLeft, pl.top, pl.xWidth, pl.height)
	for _, m := range markers {
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/>`, pl.x(m.X), pl.x(m.X), pl.top, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#666">%s</text>`+"\n", pl.x(m.X)+3, pl.top+12, html.EscapeString(m.Label))
	}
	for _, s := range p.Series { // a line, and the area under it with Fill
		if len(s.Points) == 0 {
			continue
		}
		var pts strings.Builder
		for _, p := range s.Points {
			fmt.Fprintf(&pts, "%.1f,%.1f ", pl.x(p[0]), pl.y(p[1]))
		}
		if s.Fill {
			first, last := s.Points[0], s.Points[len(s.Points)-1]
			fmt.Fprintf(b, `<polygon points="%.1f,%.1f %s%.1f,%.1f" fill="%s" fill-opacity="0.18"/>`+"\n",
				pl.x(first[0]), bottom, pts.String(), pl.x(last[0]), bottom, html.EscapeString(s.Color))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.8" stroke-linejoin="round"/>`+"\n",
			strings.TrimSpace(pts.String()), html.EscapeString(s.Color))
	}
	pl.legend(p)
}

// Approximate text widths at 12px, to lay legends out without measuring.
const (
	charWidth     = 6.6
	boldCharWidth = 7.4
)

// legend names the series in one row right of the panel's title or, if it would
// run into the title, in a column on a white backing in the top right corner.
func (pl *plot) legend(p Panel) {
	name := func(x, y float64, s Series) {
		fmt.Fprintf(pl.b, `<rect x="%.1f" y="%.1f" width="12" height="4" fill="%s"/><text x="%.1f" y="%.1f" fill="#333">%s</text>`+"\n",
			x, y-6, html.EscapeString(s.Color), x+16, y, html.EscapeString(s.Name))
	}
	row, widest := 0.0, 0
	entry := func(s Series) float64 { return float64(len([]rune(s.Name)))*charWidth + 26 }
	for _, s := range p.Series {
		row, widest = row+entry(s), max(widest, len([]rune(s.Name)))
	}
	if marginLeft+float64(len([]rune(p.Title)))*boldCharWidth+12+row <= float64(pl.right) {
		x := float64(pl.right)
		for _, s := range slices.Backward(p.Series) {
			x -= entry(s)
			name(x, pl.top-8, s)
		}
		return
	}
	w := float64(widest)*charWidth + 30
	x := float64(pl.right) - w - 6
	fmt.Fprintf(pl.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#ffffff" fill-opacity="0.85" stroke="#ddd"/>`+"\n",
		x, pl.top+4, w, 16*len(p.Series)+6)
	for j, s := range p.Series {
		name(x+6, pl.top+20+float64(16*j), s)
	}
}

// NiceTicks returns 0 and the multiples of a step up to the first at or above
// top: the smallest 1, 2 or 5 times a power of ten that is at least top/n (n
// below 1 counts as 1). A top that is not positive and finite gives {0, 1}.
func NiceTicks(top float64, n int) []float64 {
	if !(top > 0) || math.IsInf(top, 0) {
		return []float64{0, 1}
	}
	raw := top / float64(max(n, 1))
	exp := math.Floor(math.Log10(raw))
	mult := 10.0
	for _, m := range []float64{1, 2, 5} {
		if m*math.Pow(10, exp) >= raw*(1-1e-9) {
			mult = m
			break
		}
	}
	ticks := []float64{0}
	for i := 1.0; ticks[len(ticks)-1] < top*(1-1e-9); i++ {
		t := i * mult * math.Pow(10, exp)
		if exp < 0 {
			t = i * mult / math.Pow(10, -exp) // so that 3·10^-1 is 0.3, not 0.30000000000000004
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// Label prints a tick value briefly: 1500 as 1.5k, 20000 as 20k, 2500000 as 2.5M, 0.25 as 0.25.
func Label(v float64) string {
	switch {
	case math.Abs(v) >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e6), ".0") + "M"
	case math.Abs(v) >= 1e3:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e3), ".0") + "k"
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
