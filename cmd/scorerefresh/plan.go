package main

import (
	"io"

	"github.com/scorerefresh/scorerefresh/internal/plancmd"
)

// runPlan is `scorerefresh plan`: drain time, replicas and stability for a
// backlog and a configuration (docs/capacity-planning.md). The bench runs
// the same command in process to validate it, hence internal/plancmd.
func runPlan(args, environ []string, stdout, stderr io.Writer) int {
	return plancmd.Run(args, environ, stdout, stderr)
}
