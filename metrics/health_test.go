package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
)

func TestLivenessFailsOnlyWhenALoopStopsBeating(t *testing.T) {
	t.Parallel()
	clock := clocktest.NewFake(time.Unix(1_700_000_000, 0))
	h := NewHealth(clock)
	beat := h.Watch("claim loop", time.Minute)
	h.Set("mongodb", false, "down") // readiness must not affect liveness
	for range 10 {
		clock.Advance(50 * time.Second)
		beat() // busy but alive
		if ok, why := h.Live(); !ok {
			t.Fatalf("live loop reported dead: %s", why)
		}
	}
	clock.Advance(61 * time.Second)
	if ok, why := h.Live(); ok || why == "" {
		t.Fatalf("a loop silent for 61s with 60s allowed is live (%q)", why)
	}
	beat()
	if ok, _ := h.Live(); !ok {
		t.Fatal("liveness did not recover after a beat")
	}
}

func TestReadinessFollowsConditions(t *testing.T) {
	t.Parallel()
	h := NewHealth(nil)
	h.Set("mongodb", false, "not yet reached")
	h.Set("claiming", true, "")
	srv := httptest.NewServer(Handler(prometheus.NewRegistry(), h))
	defer srv.Close()
	check := func(path string, want int) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s = %d (%s), want %d", path, resp.StatusCode, body, want)
		}
	}
	check("/readyz", http.StatusServiceUnavailable)
	check("/healthz", http.StatusOK)
	h.Set("mongodb", true, "")
	check("/readyz", http.StatusOK)
	h.Set("claiming", false, "claim failed: connection refused")
	check("/readyz", http.StatusServiceUnavailable)
	check("/metrics", http.StatusOK)
}
