package grafanaalerts

import (
	"strings"
	"testing"
)

func TestInlineRecorded(t *testing.T) {
	t.Parallel()
	rec := map[string]string{"ns:x:rate5m": "sum by (ns) (rate(x[5m]))\n", "ns:y": "max(y)"}
	got, err := InlineRecorded("ns:x:rate5m+ns:x:rate5m - on(ns) ns:y > 0 and ns:x:rate5m_other", rec)
	if err != nil {
		t.Fatal(err)
	}
	want := "(sum by (ns) (rate(x[5m])))+(sum by (ns) (rate(x[5m]))) - on(ns) (max(y)) > 0 and ns:x:rate5m_other"
	if got != want {
		t.Errorf("InlineRecorded = %q, want %q", got, want)
	}
	for _, expr := range []string{`ns:y{ns="a"}`, "rate(ns:y [5m])"} {
		if got, err := InlineRecorded(expr, rec); err == nil {
			t.Errorf("InlineRecorded(%q) = %q, want an error: a selector with matchers or a range cannot be replaced by an expression", expr, got)
		}
	}
}

func TestGrafanaTemplate(t *testing.T) {
	t.Parallel()
	got := GrafanaTemplate(`{{ $value | humanize }} of {{ $labels.job }}, {{$value}}, $values kept`)
	if want := `{{ $values.A.Value | humanize }} of {{ $labels.job }}, {{$values.A.Value}}, $values kept`; got != want {
		t.Errorf("GrafanaTemplate = %q, want %q", got, want)
	}
}

func TestConvertRefusesNoAlerts(t *testing.T) {
	t.Parallel()
	if _, err := Convert([]byte("groups: [{name: r, rules: [{record: a:b, expr: up}]}]"), DefaultOptions); err == nil || !strings.Contains(err.Error(), "no alerting rules") {
		t.Errorf("Convert of recording rules alone: %v, want an error", err)
	}
}
