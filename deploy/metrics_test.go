package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/scorerefresh/scorerefresh/metrics"
)

// exportedFamilies returns the metric families the service exports, by name.
func exportedFamilies(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := metrics.NewRegistry() // Go + process collectors
	c := metrics.NewConsumer(reg)
	metrics.NewSLI(reg, nil)
	m := metrics.NewMongo(reg)
	metrics.NewBuildInfo(reg, "test", "test", "go")
	// A vector appears in Gather only once it has a child.
	c.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed)
	c.Refreshes.WithLabelValues(metrics.OutcomeOK)
	m.CheckoutFailures.WithLabelValues("timeout")
	m.Commands.WithLabelValues("find", "ok")
	m.CommandDuration.WithLabelValues("find")

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := make(map[string]dto.MetricType, len(mfs))
	for _, mf := range mfs {
		families[mf.GetName()] = mf.GetType()
	}
	return families
}

// isExported reports whether a name a query selects is a series the service
// exports: a family, or a histogram's (summary's) _bucket, _sum or _count.
// up is Prometheus's own, recorded for every target.
func isExported(name string, families map[string]dto.MetricType) bool {
	if name == "up" {
		return true
	}
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch typ, ok := families[base]; {
		case !ok:
		case typ == dto.MetricType_HISTOGRAM, typ == dto.MetricType_GAUGE_HISTOGRAM:
			return true
		case typ == dto.MetricType_SUMMARY && suffix != "_bucket":
			return true
		}
	}
	return false
}

func TestIsExported(t *testing.T) {
	t.Parallel()
	families := exportedFamilies(t)
	tests := map[string]bool{
		"up":                       true,
		"scorerefresh_queue_depth": true,
		"scorerefresh_refresh_duration_seconds_bucket":      true,
		"scorerefresh_mongo_command_duration_seconds_count": true,
		"go_gc_duration_seconds_sum":                        true,  // a summary
		"go_gc_duration_seconds_bucket":                     false, // summaries have no buckets
		"scorerefresh_queue_depth_bucket":                   false, // a gauge
		"scorerefresh_refresh_duration_seconds":             true,
		"scorerefresh_queue_depth_total":                    false,
		"scorerefresh_entries_acked":                        false,
	}
	for name, want := range tests {
		if got := isExported(name, families); got != want {
			t.Errorf("isExported(%q) = %v, want %v", name, got, want)
		}
	}
}

// labelValuesQuery picks the selector out of Grafana's label_values(selector, label).
var labelValuesQuery = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

func TestDashboardAndAlertsQueryOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	families := exportedFamilies(t)

	// Every expression, by where it comes from.
	type query struct{ where, expr string }
	var queries []query
	recorded := map[string]bool{} // the rules' own series, checked through their expressions
	for _, r := range loadAlerts(t) {
		queries = append(queries, query{alertsPath + ": " + r.Alert + r.Record, r.Expr})
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	d := loadDashboard(t)
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			queries = append(queries, query{dashboardPath + `: panel "` + p.Title + `" ` + tg.RefID, tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := variableQuery(v.Query)
		m := labelValuesQuery.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", dashboardPath, v.Name, q)
			continue
		}
		queries = append(queries, query{dashboardPath + ": variable " + v.Name, m[1]})
	}
	// The unit tests' input series should be real series too.
	var tests promtoolTests
	decodeYAML(t, alertsTestPath, &tests)
	for _, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			queries = append(queries, query{alertsTestPath + `: test "` + tc.Name + `"`, s.Series})
		}
	}

	var unknown []string
	referenced := map[string]bool{}
	for _, q := range queries {
		names, err := promqlMetricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, n := range names {
			referenced[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
			if !isExported(n, families) && !recorded[n] {
				unknown = append(unknown, n+" ("+q.where+")")
			}
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		t.Errorf("queries name metrics the service does not export (see metrics/*.go):\n  %s", strings.Join(unknown, "\n  "))
	}

	var unwatched []string
	for name := range families {
		if strings.HasPrefix(name, "scorerefresh_") && !referenced[name] {
			unwatched = append(unwatched, name)
		}
	}
	if len(unwatched) > 0 {
		slices.Sort(unwatched)
		t.Logf("exported but on no panel or alert: %s", strings.Join(unwatched, ", "))
	}
}
