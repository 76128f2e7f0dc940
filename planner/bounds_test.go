package planner

import (
	"math"
	"testing"
)

func TestCeilings(t *testing.T) {
	t.Parallel()
	// 16 users in refresh, 14 trips of 25 ms: 16 / 0.35 s.
	if got, want := LatencyCeiling(16, 14, 0.025), 16/0.35; math.Abs(got-want) > 1e-9 {
		t.Errorf("LatencyCeiling = %v, want %v", got, want)
	}
	if got := ServerCeiling(1400, 14); got != 100 {
		t.Errorf("ServerCeiling = %v, want 100", got)
	}
	if LatencyCeiling(16, 0, 0.025) != 0 || ServerCeiling(0, 14) != 0 {
		t.Error("an unknown cost must give 0, not a ceiling")
	}
}
