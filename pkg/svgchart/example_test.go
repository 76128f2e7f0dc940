package svgchart_test

import (
	"fmt"

	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
)

// A bench-style chart: two consumers' queue depth over time, one panel, a
// marker where a fault began.
func ExampleChart() {
	c := svgchart.Chart{
		Title:    "Drain of 20,000 entries",
		Subtitle: []string{"embedded server; REFRESH_CONCURRENCY=16"},
		XLabel:   "seconds since the consumer started",
		Panels: []svgchart.Panel{{
			Title: "queue depth (entries)",
			Series: []svgchart.Series{
				{Name: "reference", Color: "#d9480f", Points: [][2]float64{{0, 20000}, {30, 9000}, {60, 0}}},
				{Name: "scorerefresh", Color: "#1c7ed6", Points: [][2]float64{{0, 20000}, {12, 0}}},
			},
		}},
		Markers: []svgchart.Marker{{Label: "trigger", X: 5}},
	}
	fmt.Print(c.SVG())
}

func ExampleNiceTicks() {
	fmt.Println(svgchart.NiceTicks(73, 8))
	fmt.Println(svgchart.NiceTicks(0.3, 3))
	// Output:
	// [0 10 20 30 40 50 60 70 80]
	// [0 0.1 0.2 0.3]
}
