package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

const inhibitRulesPath = "deploy/alertmanager/inhibit-rules.yaml"

type inhibitRule struct {
	Source []string `yaml:"source_matchers"`
	Target []string `yaml:"target_matchers"`
	Equal  []string `yaml:"equal"`
}

// amMatcher is one of Alertmanager's label matchers: name, operator, value.
type amMatcher struct {
	label, op, value string
	re               *regexp.Regexp
}

var amMatcherRE = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$`)

func parseAMMatchers(t *testing.T, where string, ms []string) []amMatcher {
	t.Helper()
	var out []amMatcher
	for _, s := range ms {
		m := amMatcherRE.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("%s: matcher %q is not label=\"value\" (=, !=, =~, !~)", where, s)
		}
		am := amMatcher{label: m[1], op: m[2], value: m[3]}
		if am.op == "=~" || am.op == "!~" {
			re, err := regexp.Compile("^(?:" + am.value + ")$") // Alertmanager anchors its regexps
			if err != nil {
				t.Fatalf("%s: matcher %q: %v", where, s, err)
			}
			am.re = re
		}
		out = append(out, am)
	}
	return out
}

func (m amMatcher) matches(labels map[string]string) bool {
	v := labels[m.label]
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default:
		return !m.re.MatchString(v)
	}
}

func matchAll(ms []amMatcher, labels map[string]string) bool {
	for _, m := range ms {
		if !m.matches(labels) {
			return false
		}
	}
	return len(ms) > 0
}

type parsedInhibit struct {
	source, target []amMatcher
	equal          []string
}

func loadInhibitRules(t *testing.T) []parsedInhibit {
	t.Helper()
	var f struct {
		InhibitRules []inhibitRule `yaml:"inhibit_rules"`
	}
	decodeYAML(t, inhibitRulesPath, &f)
	if len(f.InhibitRules) == 0 {
		t.Fatalf("%s: no inhibit_rules", inhibitRulesPath)
	}
	var out []parsedInhibit
	for i, r := range f.InhibitRules {
		where := inhibitRulesPath + " rule " + string(rune('1'+i))
		out = append(out, parsedInhibit{parseAMMatchers(t, where, r.Source), parseAMMatchers(t, where, r.Target), r.Equal})
	}
	return out
}

// inhibited returns which of the firing alerts Alertmanager mutes: an alert
// is muted by a rule when another firing alert matches the rule's source,
// it matches the target and the two agree on the equal labels. As in
// Alertmanager, an alert matching both sides of a rule cannot be muted
// through that rule by another that does too.
func inhibited(rules []parsedInhibit, firing []map[string]string) []bool {
	out := make([]bool, len(firing))
	for i, a := range firing {
		for _, r := range rules {
			if !matchAll(r.target, a) {
				continue
			}
			for j, s := range firing {
				if i == j || !matchAll(r.source, s) || (matchAll(r.source, a) && matchAll(r.target, s)) {
					continue
				}
				same := true
				for _, l := range r.equal {
					same = same && a[l] == s[l]
				}
				out[i] = out[i] || same
			}
		}
	}
	return out
}

// TestInhibitRulesNameExistingAlerts: a renamed alert must not silently fall
// out of the inhibition, and the snippet's regexps must match something.
func TestInhibitRulesNameExistingAlerts(t *testing.T) {
	t.Parallel()
	var names []string
	for _, r := range loadAlerts(t) {
		if r.Alert != "" {
			names = append(names, r.Alert)
		}
	}
	literal := regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)
	for _, r := range loadInhibitRules(t) {
		for _, m := range append(slices.Clone(r.source), r.target...) {
			if m.label != "alertname" {
				continue
			}
			switch {
			case m.re == nil:
				if !slices.Contains(names, m.value) {
					t.Errorf("%s: alert %s is not in %s", inhibitRulesPath, m.value, alertsPath)
				}
			case literal.MatchString(m.value):
				for _, n := range strings.Split(m.value, "|") {
					if !slices.Contains(names, n) {
						t.Errorf("%s: alert %s is not in %s", inhibitRulesPath, n, alertsPath)
					}
				}
			case !slices.ContainsFunc(names, m.re.MatchString):
				t.Errorf("%s: alertname=~%q matches no alert of %s", inhibitRulesPath, m.value, alertsPath)
			}
		}
		if len(r.equal) == 0 || !slices.Contains(r.equal, "namespace") {
			t.Errorf("%s: a rule without namespace in equal lets one namespace's alert mute another's", inhibitRulesPath)
		}
	}
}

// TestWedgePagesOnce fires every combination of the critical queue alerts
// for one queue, as a wedge does, and requires exactly one of them to reach
// a receiver; the same alerts of another namespace stay unmuted.
func TestWedgePagesOnce(t *testing.T) {
	t.Parallel()
	rules := loadInhibitRules(t)
	var f ruleFile
	decodeYAML(t, alertsPath, &f)
	var wedge []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if g.Name == "scorerefresh.queue" && r.Labels["severity"] == "critical" {
				wedge = append(wedge, r.Alert)
			}
		}
	}
	if len(wedge) != 5 {
		t.Fatalf("%s: %d critical alerts in scorerefresh.queue (%v); the inhibition is built for five", alertsPath, len(wedge), wedge)
	}
	for set := 1; set < 1<<len(wedge); set++ {
		var firing []map[string]string
		for i, name := range wedge {
			if set&(1<<i) != 0 {
				firing = append(firing, map[string]string{"alertname": name, "namespace": "production", "job": "scorerefresh", "severity": "critical"})
			}
		}
		// The warning of the same wedge, and one alert of another namespace.
		firing = append(firing,
			map[string]string{"alertname": "ScoreRefreshBacklogGrowing", "namespace": "production", "job": "scorerefresh", "severity": "warning"},
			map[string]string{"alertname": wedge[set%len(wedge)], "namespace": "staging", "job": "scorerefresh", "severity": "critical"})
		muted := inhibited(rules, firing)
		var paging []string
		for i, a := range firing {
			if !muted[i] && a["namespace"] == "production" && a["severity"] == "critical" {
				paging = append(paging, a["alertname"])
			}
		}
		if len(paging) != 1 {
			t.Errorf("%v firing in production: %d page (%v), want exactly one", names(firing[:len(firing)-2]), len(paging), paging)
		}
		if muted[len(firing)-2] != true {
			t.Errorf("%v firing: the BacklogGrowing warning of the same queue is not muted", names(firing[:len(firing)-2]))
		}
		if muted[len(firing)-1] {
			t.Errorf("%v firing in production mutes %s in staging", names(firing[:len(firing)-2]), firing[len(firing)-1]["alertname"])
		}
	}
}

func names(alerts []map[string]string) []string {
	var out []string
	for _, a := range alerts {
		out = append(out, a["alertname"])
	}
	return out
}

func TestInhibitedFollowsAlertmanager(t *testing.T) {
	t.Parallel()
	rule := []parsedInhibit{{
		source: parseAMMatchers(t, "test", []string{`severity="critical"`}),
		target: parseAMMatchers(t, "test", []string{`severity=~"critical|warning"`}),
		equal:  []string{"namespace"},
	}}
	firing := []map[string]string{
		{"severity": "critical", "namespace": "a"},
		{"severity": "critical", "namespace": "a"},
		{"severity": "warning", "namespace": "a"},
		{"severity": "warning", "namespace": "b"},
	}
	// The two criticals match both sides: they cannot mute each other.
	if got, want := inhibited(rule, firing), []bool{false, false, true, false}; !slices.Equal(got, want) {
		t.Errorf("inhibited = %v, want %v", got, want)
	}
}
