package app

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestRealPrometheusScrapesTheService runs the service on the test server,
// points a real Prometheus (Debian's package; CI installs it) at it, and
// queries scorerefresh_queue_depth back through Prometheus' HTTP API: the
// whole path a dashboard or an alert takes.
func TestRealPrometheusScrapesTheService(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus is not installed; .ci/run installs Debian's prometheus package")
		}
		t.Skip("prometheus not installed (apt-get install prometheus); CI runs this test")
	}
	db := mongotest.Database(t, mongotest.Options{})
	cfg, err := config.Parse([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(),
		"METRICS_ADDR=127.0.0.1:0", "SLI_INTERVAL=100ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := newService(t, cfg, Options{Version: "test"})
	run(t, svc)

	dir := t.TempDir()
	promAddr := freeAddr(t)
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: scorerefresh
    static_configs:
      - targets: [%q]
`, svc.MetricsAddr())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	prom := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	logs, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	prom.Stdout, prom.Stderr = logs, logs
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Process.Kill(); _ = prom.Wait() })

	query := "http://" + promAddr + "/api/v1/query?query=scorerefresh_queue_depth%7Bjob%3D%22scorerefresh%22%7D"
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := getQuiet(query)
		if code == 200 {
			var r struct {
				Status string `json:"status"`
				Data   struct {
					Result []struct {
						Metric map[string]string `json:"metric"`
						Value  []any             `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatalf("decoding %s: %v", body, err)
			}
			if r.Status == "success" && len(r.Data.Result) == 1 {
				if v := r.Data.Result[0].Value; len(v) != 2 || v[1] != "0" {
					t.Errorf("scorerefresh_queue_depth through Prometheus = %v, want 0", v)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("Prometheus never returned scorerefresh_queue_depth (last: %d %s)\n%s", code, body, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
