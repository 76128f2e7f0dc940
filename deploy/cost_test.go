package deploy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// TestREADMECostSection derives every figure of README.md's "Cost at the
// defaults" from the code (the consumer's exported costs, the pool
// formula, the shipped rules) or from the results it cites, so the table
// cannot drift from what the service does.
func TestREADMECostSection(t *testing.T) {
	t.Parallel()
	readme := string(readAsset(t, "README.md"))
	_, sec, ok := strings.Cut(readme, "## Cost at the defaults\n")
	if !ok {
		t.Fatal("README.md has no \"Cost at the defaults\" section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	row := func(name string) string {
		t.Helper()
		for _, line := range strings.Split(sec, "\n") {
			if strings.HasPrefix(line, "| "+name+" |") {
				return line
			}
		}
		t.Fatalf("README.md's cost table has no %q row", name)
		return ""
	}
	cfg, err := config.Parse([]string{"MONGODB_URI=mongodb://localhost"})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := scoring.ParseRules("deploy/k8s/rules/rules.yaml", readAsset(t, "deploy/k8s/rules/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"per user refreshed": {"rule components + 2 round trips", fmt.Sprintf("%d for the shipped %s-component", len(rules.Components)+2, spelled(len(rules.Components)))},
		"per claim round": {fmt.Sprintf("%d round trips for up to %d users", consumer.ClaimRoundTrips, cfg.MaxUsersInFlight),
			fmt.Sprintf("%d when nobody", consumer.EmptyClaimRoundTrips)},
		"per flush": {fmt.Sprintf("%d round trips", consumer.AckRoundTrips), fmt.Sprintf("up to %d users", consumer.AckFlushBatch)},
		"documents": {fmt.Sprintf("at most %d", cfg.MaxUsersInFlight)},
		"connections": {fmt.Sprintf("%d per replica (a pool of %d, %d slots + %d, and the driver's %d monitoring",
			app.ConnectionsPerReplica(cfg), app.PoolSize(cfg), cfg.RefreshConcurrency, app.PoolOverhead, app.MonitoringConnections)},
	}
	for name, parts := range want {
		line := row(name)
		for _, p := range parts {
			if !strings.Contains(line, p) {
				t.Errorf("README.md cost row %q should say %q (from the code): %s", name, p, line)
			}
		}
	}

	// Commands per entry: the mean of the defaults' rows of the results cited.
	report := string(readAsset(t, "bench/results/batched-spread/report.md"))
	var sum float64
	var n int
	col := -1 // the column headed "commands per acked entry" of the table being read
	for _, line := range strings.Split(report, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") {
			col = -1
			continue
		}
		for i, c := range cells {
			if strings.TrimSpace(c) == "commands per acked entry" {
				col = i
			}
		}
		if col > 0 && len(cells) > col && strings.Contains(line, "default batch (unset)") {
			v, err := strconv.ParseFloat(strings.TrimSpace(cells[col]), 64)
			if err != nil {
				t.Fatalf("bench/results/batched-spread/report.md: commands per acked entry %q: %v", cells[col], err)
			}
			sum, n = sum+v, n+1
		}
	}
	if n == 0 {
		t.Fatal("bench/results/batched-spread/report.md has no row of the defaults")
	}
	if w := fmt.Sprintf("| %.1f on a diverse backlog", sum/float64(n)); !strings.Contains(row("commands per acknowledged entry"), w) {
		t.Errorf("README.md: commands per acknowledged entry should be %q (the mean of the defaults' %d rows)", w, n)
	}

	// Memory: the peak RSS recorded by the pod-size test.
	peaks := regexp.MustCompile(`\| ([\d.]+) MiB, ([\d.]+) MiB \|`).FindStringSubmatch(string(readAsset(t, "docs/dead-letters.md")))
	if peaks == nil {
		t.Fatal("docs/dead-letters.md records no peak RSS")
	}
	if w := fmt.Sprintf("%s to %s MiB peak RSS", peaks[1], peaks[2]); !strings.Contains(row("memory"), w) {
		t.Errorf("README.md: memory should say %q (docs/dead-letters.md's measured peaks)", w)
	}
}

func spelled(n int) string {
	if words := []string{"zero", "one", "two", "three", "four", "five", "six"}; n < len(words) {
		return words[n]
	}
	return strconv.Itoa(n)
}
