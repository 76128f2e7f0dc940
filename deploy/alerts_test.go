package deploy

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Paths of the assets, relative to the repository root.
const (
	alertsPath         = "deploy/prometheus/alerts.yml"
	alertsTestPath     = "deploy/prometheus/alerts_test.yml"
	prometheusRulePath = "deploy/k8s/prometheusrule.yaml"
	dashboardPath      = "deploy/grafana/scorerefresh.json"
	runbookPath        = "docs/runbook.md"
)

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []rule `yaml:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// promtoolTests is the part of a `promtool test rules` file the tests read.
type promtoolTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// repoRoot finds the module root from the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

func readAsset(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeYAML(t *testing.T, rel string, v any) {
	t.Helper()
	if err := yaml.Unmarshal(readAsset(t, rel), v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

func loadAlerts(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	decodeYAML(t, alertsPath, &f)
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no rules", alertsPath)
	}
	return rules
}

// promtool returns promtool's path, skipping the test where it is not
// installed, except in CI, which installs it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("promtool not on PATH (apt-get install prometheus); CI runs this test")
		}
		t.Fatalf("promtool not on PATH in CI: %v", err)
	}
	return path
}

// runPromtool runs promtool from the repository root, failing the test on
// a non-zero exit.
func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestPromtoolRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	root := repoRoot(t)
	run := func(t *testing.T, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Run("check", func(t *testing.T) {
		t.Parallel()
		run(t, "check", "rules", alertsPath)
	})
	t.Run("unit tests", func(t *testing.T) {
		t.Parallel()
		run(t, "test", "rules", alertsTestPath)
	})
	t.Run("dashboard expressions parse", func(t *testing.T) {
		t.Parallel()
		// promtool has no offline "check this expression", so the dashboard's
		// queries go through `check rules` as recording rules, with Grafana's
		// variables replaced by values of the right kind.
		vars := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m",
			"$namespace", "ns", "$job", "job")
		var rules []map[string]string
		for _, p := range loadDashboard(t).allPanels() {
			for _, tg := range p.Targets {
				rules = append(rules, map[string]string{"record": "dashboard:query:" + tg.RefID, "expr": vars.Replace(tg.Expr)})
			}
		}
		b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "dashboard_queries.yml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		run(t, "check", "rules", path)
	})
}

func TestPrometheusRuleMatchesAlertsFile(t *testing.T) {
	t.Parallel()
	// Decoded generically, so a field the rule type does not know still counts.
	var alerts map[string]any
	decodeYAML(t, alertsPath, &alerts)
	var pr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec map[string]any `yaml:"spec"`
	}
	decodeYAML(t, prometheusRulePath, &pr)

	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s is %s %s, want monitoring.coreos.com/v1 PrometheusRule", prometheusRulePath, pr.APIVersion, pr.Kind)
	}
	if pr.Metadata.Name != "scorerefresh" || pr.Metadata.Labels["app.kubernetes.io/name"] != "scorerefresh" {
		t.Errorf("%s metadata = %+v, want name and app.kubernetes.io/name scorerefresh", prometheusRulePath, pr.Metadata)
	}
	want, got := alerts["groups"], pr.Spec["groups"]
	if want == nil {
		t.Fatalf("%s has no groups", alertsPath)
	}
	if !reflect.DeepEqual(got, want) {
		wantYAML, _ := yaml.Marshal(want)
		gotYAML, _ := yaml.Marshal(got)
		t.Errorf("%s spec.groups differ from %s groups; copy them over.\n--- %s\n%s\n--- %s\n%s",
			prometheusRulePath, alertsPath, alertsPath, wantYAML, prometheusRulePath, gotYAML)
	}
	if extra := slices.DeleteFunc(slices.Collect(maps.Keys(pr.Spec)), func(k string) bool { return k == "groups" }); len(extra) > 0 {
		t.Errorf("%s spec has fields besides groups: %v", prometheusRulePath, extra)
	}
}

func TestAlertsAreComplete(t *testing.T) {
	t.Parallel()
	anchors := markdownAnchors(string(readAsset(t, runbookPath)))
	seen := map[string]bool{}
	for _, r := range loadAlerts(t) {
		if r.Alert == "" {
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if !strings.HasPrefix(r.Alert, "ScoreRefresh") {
			t.Errorf("alert %s: name must start with ScoreRefresh", r.Alert)
		}
		// kube-prometheus-stack's severities, which its Alertmanager routes
		// and inhibits on.
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s: no %s annotation", r.Alert, a)
			}
		}
		// absent() is always 1: nothing to state.
		if !strings.HasPrefix(r.Expr, "absent(") && !strings.Contains(r.Annotations["description"], "$value") {
			t.Errorf("alert %s: the description should state the value", r.Alert)
		}
		anchor := strings.ToLower(r.Alert)
		if url, want := r.Annotations["runbook_url"], runbookBase(t)+"/"+runbookPath+"#"+anchor; url != want {
			t.Errorf("alert %s: runbook_url %q, want %q (this release's runbook; deploy/k8s/runbook overrides the base)", r.Alert, url, want)
		}
		if !anchors[anchor] {
			t.Errorf("alert %s: %s has no section with anchor #%s (a heading %q)", r.Alert, runbookPath, anchor, "## "+r.Alert)
		}
	}
}

// runbookBase is where the alerts' runbook_url points by default: the
// repository at this release's tag, so an alert links to the runbook of the
// version that raised it rather than whatever main says today.
func runbookBase(t *testing.T) string {
	t.Helper()
	return "https://github.com/scorerefresh/scorerefresh/blob/" + releaseVersion(t)
}

// markdownAnchors returns the anchors GitHub generates for a document's
// headings: lower case, punctuation dropped, spaces turned into hyphens.
func markdownAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	for line := range strings.Lines(doc) {
		heading, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "#")
		if !ok {
			continue
		}
		heading = strings.TrimSpace(strings.TrimLeft(heading, "#"))
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")
		anchors[a] = true
	}
	return anchors
}

func TestMarkdownAnchors(t *testing.T) {
	t.Parallel()
	got := markdownAnchors("# Title\n## ScoreRefreshAbsent\ntext # not a heading\n### What to do (now!)\n")
	for _, want := range []string{"title", "scorerefreshabsent", "what-to-do-now"} {
		if !got[want] {
			t.Errorf("markdownAnchors: no %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("markdownAnchors took a line with # inside for a heading")
	}
}

func TestEveryAlertHasFiringAndQuietUnitTests(t *testing.T) {
	t.Parallel()
	var tests promtoolTests
	decodeYAML(t, alertsTestPath, &tests)
	if !slices.Contains(tests.RuleFiles, filepath.Base(alertsPath)) {
		t.Errorf("%s: rule_files %v does not load %s", alertsTestPath, tests.RuleFiles, filepath.Base(alertsPath))
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range loadAlerts(t) {
		if r.Alert == "" {
			continue
		}
		if !fires[r.Alert] {
			t.Errorf("%s: no case where %s must fire", alertsTestPath, r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no case where %s must not fire", alertsTestPath, r.Alert)
		}
	}
}

var absentJobRE = regexp.MustCompile(`up\{job=~"([^"]+)"`)

// absentJobRegexp is the job matcher of the alerts' absent(up{job=~...})
// rule, nil if there is none.
func absentJobRegexp(t *testing.T) *regexp.Regexp {
	t.Helper()
	m := absentJobRE.FindStringSubmatch(string(readAsset(t, alertsPath)))
	if m == nil {
		return nil
	}
	return regexp.MustCompile("^(?:" + m[1] + ")$")
}

// TestRecordingRulesAreNotRepeated: an expression the rules record is read
// through its series by the alerts and the dashboard, never spelled out
// again, so a fix to it reaches every reader. Expressions are compared with
// whitespace, label matchers and grouping clauses removed, which is how the
// dashboard's copies (max(x{namespace="$namespace"}) for max by (namespace)
// (x)) differ from the rule's.
func TestRecordingRulesAreNotRepeated(t *testing.T) {
	t.Parallel()
	strip := regexp.MustCompile(`\{[^}]*\}|\b(?:by|without)\s*\([^)]*\)|\s+`)
	norm := func(e string) string {
		e = strip.ReplaceAllString(e, "")
		return strings.ReplaceAll(strings.ReplaceAll(e, "(", ""), ")", "")
	}
	rules := loadAlerts(t)
	var readers []struct{ where, expr string }
	for _, r := range rules {
		if r.Alert != "" {
			readers = append(readers, struct{ where, expr string }{alertsPath + ": " + r.Alert, r.Expr})
		}
	}
	for _, p := range loadDashboard(t).allPanels() {
		for _, tg := range p.Targets {
			readers = append(readers, struct{ where, expr string }{dashboardPath + `: panel "` + p.Title + `" ` + tg.RefID, tg.Expr})
		}
	}
	recorded := 0
	for _, r := range rules {
		if r.Record == "" {
			continue
		}
		recorded++
		body, used := norm(r.Expr), false
		for _, rd := range readers {
			if strings.Contains(norm(rd.expr), body) {
				t.Errorf("%s repeats the expression recorded as %s; select %s instead", rd.where, r.Record, r.Record)
			}
			used = used || strings.Contains(rd.expr, r.Record)
		}
		if !used {
			t.Errorf("%s: %s is recorded but nothing reads it", alertsPath, r.Record)
		}
	}
	if recorded == 0 {
		t.Errorf("%s: no recording rule (the fleet's arrivals are one)", alertsPath)
	}
}
