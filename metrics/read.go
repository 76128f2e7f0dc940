package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Read returns the current value of a counter or gauge, or the sample count
// of a histogram, for in-process reports (the demo's progress line, the
// bench) that would otherwise have to scrape themselves.
func Read(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	return 0
}

// histogramSum returns the sum of a histogram's observations.
func histogramSum(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil || d.Histogram == nil {
		return 0
	}
	return d.Histogram.GetSampleSum()
}
