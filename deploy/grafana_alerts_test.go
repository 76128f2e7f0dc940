package deploy

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/scorerefresh/scorerefresh/deploy/internal/grafanaalerts"
)

const grafanaAlertsPath = "deploy/grafana/provisioning/alerting/scorerefresh.yaml"

// TestGrafanaAlertsAreGenerated: the committed provisioning file is what the
// generator writes from the Prometheus rules today.
func TestGrafanaAlertsAreGenerated(t *testing.T) {
	t.Parallel()
	want, err := grafanaalerts.Generate(readAsset(t, alertsPath), grafanaalerts.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAsset(t, grafanaAlertsPath); !bytes.Equal(got, want) {
		t.Errorf("%s is not what the generator writes from %s: run go generate ./deploy", grafanaAlertsPath, alertsPath)
	}
}

// TestGrafanaAlertsMatchPrometheusRules reads the committed file as Grafana
// would and holds every rule to its Prometheus alert: present once, the
// same expression (recording rules spelt out), for, labels, annotations
// (Grafana's $values.A.Value for $value) and runbook URL, querying the
// datasource variable, with a threshold step as its condition.
func TestGrafanaAlertsMatchPrometheusRules(t *testing.T) {
	t.Parallel()
	var got struct {
		APIVersion int `yaml:"apiVersion"`
		Groups     []struct {
			Name     string `yaml:"name"`
			Folder   string `yaml:"folder"`
			Interval string `yaml:"interval"`
			Rules    []struct {
				UID       string `yaml:"uid"`
				Title     string `yaml:"title"`
				Condition string `yaml:"condition"`
				Data      []struct {
					RefID         string         `yaml:"refId"`
					DatasourceUID string         `yaml:"datasourceUid"`
					Model         map[string]any `yaml:"model"`
				} `yaml:"data"`
				NoDataState string            `yaml:"noDataState"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	decodeYAML(t, grafanaAlertsPath, &got)
	if got.APIVersion != 1 || len(got.Groups) == 0 {
		t.Fatalf("%s: apiVersion %d, %d groups; want 1 and some", grafanaAlertsPath, got.APIVersion, len(got.Groups))
	}
	recorded := map[string]string{}
	prom := map[string]rule{}
	for _, r := range loadAlerts(t) {
		if r.Record != "" {
			recorded[r.Record] = strings.TrimSpace(r.Expr)
		} else {
			prom[r.Alert] = r
		}
	}
	seen := map[string]bool{}
	uids := map[string]bool{}
	var exprs []map[string]string
	for _, g := range got.Groups {
		if g.Folder == "" || g.Interval == "" {
			t.Errorf("%s: group %s has no folder or interval", grafanaAlertsPath, g.Name)
		}
		for _, r := range g.Rules {
			p, ok := prom[r.Title]
			switch {
			case !ok:
				t.Errorf("%s: rule %s is no alert of %s", grafanaAlertsPath, r.Title, alertsPath)
				continue
			case seen[r.Title]:
				t.Errorf("%s: rule %s twice", grafanaAlertsPath, r.Title)
			case r.UID == "" || len(r.UID) > 40 || uids[r.UID]:
				t.Errorf("%s: rule %s: uid %q empty, too long for Grafana or shared", grafanaAlertsPath, r.Title, r.UID)
			}
			seen[r.Title], uids[r.UID] = true, true
			if len(r.Data) != 2 {
				t.Errorf("%s: rule %s has %d steps, want the query and the threshold", grafanaAlertsPath, r.Title, len(r.Data))
				continue
			}
			q, cond := r.Data[0], r.Data[1]
			wantExpr := p.Expr
			for name, body := range recorded {
				wantExpr = strings.ReplaceAll(wantExpr, name, "("+body+")")
			}
			if q.Model["expr"] != wantExpr {
				t.Errorf("%s: rule %s queries\n%v\nwant the alert's expression\n%s", grafanaAlertsPath, r.Title, q.Model["expr"], wantExpr)
			}
			if q.DatasourceUID != "${DS_PROMETHEUS}" || q.Model["instant"] != true {
				t.Errorf("%s: rule %s: datasource %q, instant %v; want ${DS_PROMETHEUS} and an instant query", grafanaAlertsPath, r.Title, q.DatasourceUID, q.Model["instant"])
			}
			if r.Condition != cond.RefID || cond.DatasourceUID != "__expr__" || cond.Model["expression"] != q.RefID {
				t.Errorf("%s: rule %s: condition %s is not an expression on the query %s", grafanaAlertsPath, r.Title, r.Condition, q.RefID)
			}
			if typ := cond.Model["type"]; typ != "threshold" && typ != "math" {
				t.Errorf("%s: rule %s: condition type %v, want threshold or math", grafanaAlertsPath, r.Title, typ)
			}
			// An empty answer is the alert not firing, as in Prometheus.
			if r.NoDataState != "OK" {
				t.Errorf("%s: rule %s: noDataState %s, want OK", grafanaAlertsPath, r.Title, r.NoDataState)
			}
			wantFor := p.For
			if wantFor == "" {
				wantFor = "0s"
			}
			if r.For != wantFor {
				t.Errorf("%s: rule %s: for %s, want %s", grafanaAlertsPath, r.Title, r.For, wantFor)
			}
			if !maps.Equal(r.Labels, p.Labels) {
				t.Errorf("%s: rule %s: labels %v, want %v", grafanaAlertsPath, r.Title, r.Labels, p.Labels)
			}
			wantAnn := map[string]string{}
			for k, v := range p.Annotations {
				wantAnn[k] = strings.ReplaceAll(v, "$value", "$values.A.Value")
			}
			if !maps.Equal(r.Annotations, wantAnn) {
				t.Errorf("%s: rule %s: annotations %v, want %v", grafanaAlertsPath, r.Title, r.Annotations, wantAnn)
			}
			if r.Annotations["runbook_url"] != p.Annotations["runbook_url"] {
				t.Errorf("%s: rule %s: runbook_url %s, want %s", grafanaAlertsPath, r.Title, r.Annotations["runbook_url"], p.Annotations["runbook_url"])
			}
			exprs = append(exprs, map[string]string{"record": "grafana:" + r.Title, "expr": wantExpr})
		}
	}
	for name := range prom {
		if !seen[name] {
			t.Errorf("%s: no rule for the alert %s", grafanaAlertsPath, name)
		}
	}
	// The spelt-out expressions must still be PromQL.
	if bin := promtool(t); bin != "" {
		b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "grafana", "rules": exprs}}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "grafana_queries.yml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		runPromtool(t, bin, "check", "rules", path)
	}
}

func TestGrafanaAlertsRunbookBase(t *testing.T) {
	t.Parallel()
	opts := grafanaalerts.DefaultOptions
	opts.RunbookBase = "https://git.example.com/ops/scorerefresh/blob/v9.9.9/"
	f, err := grafanaalerts.Convert(readAsset(t, alertsPath), opts)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			n++
			if want := "https://git.example.com/ops/scorerefresh/blob/v9.9.9/docs/runbook.md#" + strings.ToLower(r.Title); r.Annotations["runbook_url"] != want {
				t.Errorf("rule %s: runbook_url %s, want %s", r.Title, r.Annotations["runbook_url"], want)
			}
		}
	}
	if n == 0 {
		t.Error("no rules")
	}
}
