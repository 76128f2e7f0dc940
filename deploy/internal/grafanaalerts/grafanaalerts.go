// Package grafanaalerts turns Prometheus alerting rules into Grafana-managed
// alert rules (file provisioning, apiVersion 1), so Grafana unified alerting
// and Prometheus with Alertmanager run the same alerts from one definition.
//
// Each alert becomes a rule of two queries: A, the alert's PromQL as an instant query, and B, a
// threshold on A. The PromQL already holds the condition, so B only turns each returned series
// into a firing instance, and an empty answer is a normal state (noDataState OK), not a missing one.
//
// Differences forced by Grafana, and nothing else: recording rules are not provisioned (an alert
// gets the recorded expression in their place); {{ $value }} becomes {{ $values.A.Value }} (in
// Grafana $value lists every query's value); runbook_url may get another base
// (Options.RunbookBase), as the kustomize component deploy/k8s/runbook does for the PrometheusRule.
package grafanaalerts

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Options says where the rules go and what they query (flags of
// cmd/grafana-alerts); Source is named in the generated file's header.
type Options struct {
	DatasourceUID, Folder, Interval, RunbookBase, Source string
}

// DefaultOptions are those of the committed file: the datasource uid comes
// from Grafana's environment (docker-compose.yml sets DS_PROMETHEUS).
var DefaultOptions = Options{
	DatasourceUID: "${DS_PROMETHEUS}",
	Folder:        "scorerefresh",
	Interval:      "1m",
	Source:        "deploy/prometheus/alerts.yml",
}

type promRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// File is Grafana's alerting provisioning file.
type File struct {
	APIVersion int     `yaml:"apiVersion"`
	Groups     []Group `yaml:"groups"`
}

type Group struct {
	OrgID    int    `yaml:"orgId"`
	Name     string `yaml:"name"`
	Folder   string `yaml:"folder"`
	Interval string `yaml:"interval"`
	Rules    []Rule `yaml:"rules"`
}

type Rule struct {
	UID          string            `yaml:"uid"`
	Title        string            `yaml:"title"`
	Condition    string            `yaml:"condition"`
	Data         []Query           `yaml:"data"`
	NoDataState  string            `yaml:"noDataState"`
	ExecErrState string            `yaml:"execErrState"`
	For          string            `yaml:"for"`
	Annotations  map[string]string `yaml:"annotations"`
	Labels       map[string]string `yaml:"labels"`
	IsPaused     bool              `yaml:"isPaused"`
}

// Query is one step of a rule, A or B. Grafana requires a time range
// (seconds before now) of datasource queries, though an instant one ignores it.
type Query struct {
	RefID             string         `yaml:"refId"`
	RelativeTimeRange map[string]int `yaml:"relativeTimeRange,omitempty"`
	DatasourceUID     string         `yaml:"datasourceUid"`
	Model             Model          `yaml:"model"`
}

// Model is a step's model: PromQL for refId A, a threshold for B.
type Model struct {
	RefID      string                 `yaml:"refId"`
	Expr       string                 `yaml:"expr,omitempty"`
	Instant    bool                   `yaml:"instant,omitempty"`
	Type       string                 `yaml:"type,omitempty"`
	Expression string                 `yaml:"expression,omitempty"`
	Conditions []map[string]Evaluator `yaml:"conditions,omitempty"` // {evaluator: ...}
}

type Evaluator struct {
	Type   string    `yaml:"type"`
	Params []float64 `yaml:"params"`
}

const (
	runbookPath = "/docs/runbook.md#"
	maxUID      = 40 // Grafana's limit
)

// Convert builds the provisioning file from a Prometheus rule file.
func Convert(src []byte, opts Options) (*File, error) {
	var pf struct {
		Groups []struct {
			Name  string     `yaml:"name"`
			Rules []promRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(src, &pf); err != nil {
		return nil, fmt.Errorf("reading the Prometheus rules: %w", err)
	}
	recorded := map[string]string{}
	for _, g := range pf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = r.Expr
			}
		}
	}
	out := &File{APIVersion: 1}
	uids := map[string]string{}
	for _, g := range pf.Groups {
		grp := Group{OrgID: 1, Name: g.Name, Folder: opts.Folder, Interval: opts.Interval}
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			rule, err := convertRule(r, recorded, opts)
			if err != nil {
				return nil, fmt.Errorf("alert %s: %w", r.Alert, err)
			}
			if other, dup := uids[rule.UID]; dup {
				return nil, fmt.Errorf("alerts %s and %s would share the uid %s", other, r.Alert, rule.UID)
			}
			uids[rule.UID] = r.Alert
			grp.Rules = append(grp.Rules, rule)
		}
		if len(grp.Rules) > 0 {
			out.Groups = append(out.Groups, grp)
		}
	}
	if len(out.Groups) == 0 {
		return nil, fmt.Errorf("no alerting rules in the Prometheus rules")
	}
	return out, nil
}

func convertRule(r promRule, recorded map[string]string, opts Options) (Rule, error) {
	expr, err := InlineRecorded(r.Expr, recorded)
	if err != nil {
		return Rule{}, err
	}
	uid := "scorerefresh-" + strings.ToLower(strings.TrimPrefix(r.Alert, "ScoreRefresh"))
	if len(uid) > maxUID {
		return Rule{}, fmt.Errorf("uid %s is longer than Grafana's %d characters", uid, maxUID)
	}
	ann := map[string]string{}
	for k, v := range r.Annotations {
		ann[k] = GrafanaTemplate(v)
	}
	if u, ok := ann["runbook_url"]; ok && opts.RunbookBase != "" {
		i := strings.Index(u, runbookPath)
		if i < 0 {
			return Rule{}, fmt.Errorf("runbook_url %s does not contain %s to rebase", u, runbookPath)
		}
		ann["runbook_url"] = strings.TrimSuffix(opts.RunbookBase, "/") + u[i:]
	}
	return Rule{
		UID:       uid,
		Title:     r.Alert,
		Condition: "B",
		Data: []Query{
			{RefID: "A", RelativeTimeRange: map[string]int{"from": 600, "to": 0}, DatasourceUID: opts.DatasourceUID,
				Model: Model{RefID: "A", Expr: expr, Instant: true}},
			// __expr__ is Grafana's uid for server-side expressions.
			{RefID: "B", DatasourceUID: "__expr__", Model: Model{RefID: "B", Type: "threshold", Expression: "A",
				Conditions: []map[string]Evaluator{{"evaluator": {Type: "gt", Params: []float64{0}}}}}},
		},
		NoDataState:  "OK",
		ExecErrState: "Error",
		For:          cmp.Or(r.For, "0s"),
		Annotations:  ann,
		Labels:       r.Labels,
	}, nil
}

// InlineRecorded replaces each recorded series an expression selects with the expression that
// records it, in parentheses; a selector with label matchers or a range cannot be, and is refused.
func InlineRecorded(expr string, recorded map[string]string) (string, error) {
	var out strings.Builder
	last := 0
	for _, m := range identRE.FindAllStringIndex(expr, -1) {
		body, ok := recorded[expr[m[0]:m[1]]]
		if !ok {
			continue
		}
		if rest := strings.TrimLeft(expr[m[1]:], " \t\n"); strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, "[") {
			return "", fmt.Errorf("%s is selected with matchers or a range; it cannot be inlined", expr[m[0]:m[1]])
		}
		out.WriteString(expr[last:m[0]])
		out.WriteString("(" + strings.TrimSpace(body) + ")")
		last = m[1]
	}
	out.WriteString(expr[last:])
	return out.String(), nil
}

// identRE finds PromQL identifiers, recording-rule names with colons included.
var identRE = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// GrafanaTemplate rewrites a Prometheus annotation template for Grafana: $value is query A's value.
func GrafanaTemplate(s string) string {
	return regexp.MustCompile(`\$value\b`).ReplaceAllString(s, "$$values.A.Value")
}

// Generate is Convert, then the file as YAML under a header naming its source.
func Generate(src []byte, opts Options) ([]byte, error) {
	f, err := Convert(src, opts)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Grafana-managed alert rules (file provisioning), generated from %s:\n", opts.Source)
	buf.WriteString("# do not edit; run go generate ./deploy. Mount this directory at\n")
	buf.WriteString("# /etc/grafana/provisioning/alerting; Grafana reads the Prometheus datasource's\n")
	buf.WriteString("# uid from its environment (DS_PROMETHEUS). See deploy/DEPLOYING.md, \"Alerts\".\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := errors.Join(enc.Encode(f), enc.Close()); err != nil {
		return nil, fmt.Errorf("writing the Grafana rules: %w", err)
	}
	return buf.Bytes(), nil
}
