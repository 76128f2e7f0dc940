package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// specMetrics are the contract's (docs/contract.md) names: dashboards and alerts depend on them.
var specMetrics = []string{
	"scorerefresh_queue_depth", "scorerefresh_queue_oldest_age_seconds", "scorerefresh_deadletter_depth",
	"scorerefresh_entries_claimed_total", "scorerefresh_entries_acked_total", "scorerefresh_entries_deadlettered_total",
	"scorerefresh_refreshes_total", "scorerefresh_refresh_duration_seconds", "scorerefresh_occ_conflicts_total",
	"scorerefresh_users_in_flight", "scorerefresh_refresh_concurrency_limit", "scorerefresh_claim_duration_seconds",
	"scorerefresh_coalesced_entries", "scorerefresh_arrival_rate", "scorerefresh_drain_capacity",
	"scorerefresh_time_to_drain_seconds",
	// plus the Go and process collectors and the MongoDB pool
	"go_goroutines", "process_cpu_seconds_total", "scorerefresh_mongo_pool_connections_in_use",
	"scorerefresh_mongo_pool_checkout_wait_seconds", "scorerefresh_build_info",
}

// newService builds the service for a test and closes it when the test ends.
func newService(t *testing.T, cfg config.Config, opts Options) *Service {
	t.Helper()
	svc, err := New(t.Context(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	return svc
}

// run runs svc until stop, which shuts it down and returns Run's error
// (stop runs at the test's end too; calling it again returns the same).
func run(t *testing.T, svc *Service) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestServiceServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	cfg, err := config.Parse([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(),
		"METRICS_ADDR=127.0.0.1:0", "SLI_INTERVAL=50ms", "POLL_INTERVAL=50ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("score_events").InsertOne(t.Context(), bson.D{{Key: "username", Value: "ann"}, {Key: "createdAt", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	svc := newService(t, cfg, Options{Version: "test"})
	base := "http://" + svc.MetricsAddr()
	stop := run(t, svc)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never became 200: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s", code, body)
	}
	// Wait for the entry to be acknowledged and sampled, then check every name.
	for {
		_, body := get(t, base+"/metrics")
		if strings.Contains(body, "scorerefresh_entries_acked_total 1") && strings.Contains(body, "scorerefresh_queue_depth 0") {
			for _, name := range specMetrics {
				if !strings.Contains(body, "\n"+name) {
					t.Errorf("/metrics lacks %s", name)
				}
			}
			if strings.Contains(body, "ann") {
				t.Error("a username appears in /metrics")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry never acked and sampled:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getQuiet is get without failing the test: for polling a server that may
// not be up yet.
func getQuiet(url string) (int, string) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
