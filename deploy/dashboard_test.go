package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dashboard is the part of a Grafana dashboard model the tests read.
type dashboard struct {
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string         `json:"name"`
			Type       string         `json:"type"`
			Query      any            `json:"query"` // a string, or {query: ...} in newer models
			Datasource *datasourceRef `json:"datasource"`
			Multi      bool           `json:"multi"`
			IncludeAll bool           `json:"includeAll"`
			AllValue   string         `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Datasource  *datasourceRef `json:"datasource"`
	Targets     []target       `json:"targets"`
	Panels      []panel        `json:"panels"` // a collapsed row's panels
	FieldConfig struct {
		Defaults struct {
			Unit       string `json:"unit"`
			Thresholds struct {
				Steps []struct {
					Value *float64 `json:"value"`
				} `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

const datasourceVar = "${datasource}"

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readAsset(t, dashboardPath), &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// allPanels returns every panel, including those inside collapsed rows.
func (d dashboard) allPanels() []panel {
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return all
}

// variableQuery returns a template variable's query, whichever shape it has.
func variableQuery(q any) string {
	switch q := q.(type) {
	case string:
		return q
	case map[string]any:
		s, _ := q["query"].(string)
		return s
	}
	return ""
}

func TestDashboardStructure(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.UID != "scorerefresh" {
		t.Errorf("uid %q, want scorerefresh", d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want 36 or later (datasource references by uid)", d.SchemaVersion)
	}

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		switch v.Type {
		case "datasource":
			if q := variableQuery(v.Query); q != "prometheus" {
				t.Errorf("variable %s: datasource type %q, want prometheus", v.Name, q)
			}
		case "query":
			if v.Datasource == nil || v.Datasource.UID != datasourceVar {
				t.Errorf("variable %s: datasource %+v, want uid %s", v.Name, v.Datasource, datasourceVar)
			}
		}
	}
	for _, v := range d.Templating.List {
		// One replica or several: the per-replica panels select pod=~"$pod",
		// which "All" must turn into every pod.
		if v.Name == "pod" && (!v.Multi || !v.IncludeAll || v.AllValue != ".*") {
			t.Errorf("variable pod: multi %v, includeAll %v, allValue %q; want several pods, an All, and .* for it", v.Multi, v.IncludeAll, v.AllValue)
		}
	}
	perPod := 0
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, `pod=~"$pod"`) {
				perPod++
			}
		}
	}
	if perPod == 0 {
		t.Errorf("no panel selects pod=~\"$pod\": the pod variable does nothing")
	}
	for name, typ := range map[string]string{"datasource": "datasource", "namespace": "query", "job": "query", "pod": "query"} {
		if vars[name] != typ {
			t.Errorf("template variable %s: type %q, want %q", name, vars[name], typ)
		}
	}

	ids := map[int]string{}
	for _, p := range d.allPanels() {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if p.Datasource == nil || p.Datasource.UID != datasourceVar || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: datasource %+v, want {prometheus %s}", p.Title, p.Datasource, datasourceVar)
		}
		if p.Type != "heatmap" && p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %q: no unit", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		refIDs := map[string]bool{}
		for _, tg := range p.Targets {
			if refIDs[tg.RefID] {
				t.Errorf("panel %q: refId %q used twice", p.Title, tg.RefID)
			}
			refIDs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s: no expr", p.Title, tg.RefID)
			}
			if tg.Datasource == nil || tg.Datasource.UID != datasourceVar {
				t.Errorf("panel %q target %s: datasource %+v, want uid %s", p.Title, tg.RefID, tg.Datasource, datasourceVar)
			}
			for _, m := range []string{`namespace="$namespace"`, `job="$job"`} {
				if !strings.Contains(tg.Expr, m) {
					t.Errorf("panel %q target %s: %s does not select %s", p.Title, tg.RefID, tg.Expr, m)
				}
			}
		}
	}
}

// alertThreshold returns the number an alert expression ends by comparing
// against ("... > 300" gives 300).
var alertThreshold = regexp.MustCompile(`>\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*$`)

func TestDashboardThresholdsMatchAlerts(t *testing.T) {
	t.Parallel()
	// Panels that draw an alert's threshold, by alert.
	drawn := map[string]string{
		"ScoreRefreshOldestEntryTooOld":    "Oldest entry age",
		"ScoreRefreshQueueDepthHigh":       "Queue depth",
		"ScoreRefreshOCCConflictRatioHigh": "OCC conflicts",
		"ScoreRefreshMongoPoolSaturated":   "Pool checkout wait",
		"ScoreRefreshSLISamplerStale":      "SLI sample age",
	}
	panels := loadDashboard(t).allPanels()
	for _, r := range loadAlerts(t) {
		title, ok := drawn[r.Alert]
		if !ok {
			continue
		}
		delete(drawn, r.Alert)
		m := alertThreshold.FindStringSubmatch(strings.TrimSpace(r.Expr))
		if m == nil {
			t.Errorf("alert %s: no trailing '> threshold' in %q", r.Alert, r.Expr)
			continue
		}
		threshold, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, p := range panels {
			if p.Title != title {
				continue
			}
			found++
			var steps []float64
			for _, s := range p.FieldConfig.Defaults.Thresholds.Steps {
				if s.Value != nil {
					steps = append(steps, *s.Value)
				}
			}
			if !slices.Contains(steps, threshold) {
				t.Errorf("panel %q (%s): thresholds %v do not include the alert's %v", title, p.Type, steps, threshold)
			}
		}
		if found == 0 {
			t.Errorf("alert %s: no panel titled %q", r.Alert, title)
		}
	}
	for alert := range drawn {
		t.Errorf("alert %s is not in %s any more; update this test", alert, alertsPath)
	}
}

var labelValuesRE = regexp.MustCompile(`label_values\(\s*(?:[^,()]*(?:\{[^}]*\})?\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)

// dashboardTargetLabels are the labels the dashboard's variables read with
// label_values() that Prometheus does not attach by itself (job, instance):
// the scrape configuration must.
func dashboardTargetLabels(t *testing.T) []string {
	t.Helper()
	var labels []string
	for _, v := range loadDashboard(t).Templating.List {
		for _, m := range labelValuesRE.FindAllStringSubmatch(variableQuery(v.Query), -1) {
			if l := m[1]; l != "job" && l != "instance" && !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	slices.Sort(labels)
	return labels
}

// dashboardDatasourceTypes are the plugin types of the dashboard's datasource
// variables.
func dashboardDatasourceTypes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, v := range loadDashboard(t).Templating.List {
		if q := variableQuery(v.Query); q != "" && v.Type == "datasource" {
			out = append(out, q)
		}
	}
	return out
}
