//go:build oldrelease

package bench

import (
	"context"
	"errors"
	"flag"

	"github.com/scorerefresh/scorerefresh/pkg/svgchart"
)

// Releases older than the batched recompute and the capacity planner
// (v0.1.0) lack what the batched and plan scenarios measure.
// bench/fleet/run.sh builds the bench against such a release with
// -tags oldrelease, for the fleet and storm scenarios; this file stands in
// for the two scenarios there.

var errOldRelease = errors.New("not in a build for an old release (-tags oldrelease)")

// PlanConfig and BatchedConfig have no settings in this build.
type (
	PlanConfig    struct{}
	BatchedConfig struct{}
)

func planFlags(*flag.FlagSet, *PlanConfig)               {}
func batchedFlags(*flag.FlagSet, *BatchedConfig)         {}
func shrinkBatched(func(string, func()), *BatchedConfig) {}
func (b *Bench) plan(context.Context) (struct{}, error)  { return struct{}{}, errOldRelease }
func (b *Bench) batched(context.Context, float64) (*batchedResult, error) {
	return nil, errOldRelease
}

// batchedResult is never set in this build.
type batchedResult struct{}

func (*batchedResult) charts() map[string]svgchart.Chart      { return nil }
func (*batchedResult) markdown(func(string, ...any), *Report) {}
