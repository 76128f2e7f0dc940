package app

import (
	"testing"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// The score store names the reason of a skipped write and the metric
// declares its label values up front; New joins the two (OnSkip), and
// neither package imports the other, so only this test sees that they
// agree. A reason the metric does not declare still counts, but under a
// series no dashboard or alert reads.
func TestSkipReasonsAreTheMetricsLabels(t *testing.T) {
	if scoring.SkipNewer != metrics.SkipNewer {
		t.Errorf("scoring skips writes as %q, the metric declares %q", scoring.SkipNewer, metrics.SkipNewer)
	}
}
