package app

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

func TestConnectErrorHidesTheURIsSecrets(t *testing.T) {
	t.Parallel()
	for _, uri := range []string{
		// The driver quotes an option value it cannot unescape, without its name.
		"mongodb://admin:hunter2@db:27017/?tlsCertificateKeyFilePassword=hunter2%zz",
		"mongodb://admin:hunter2%zz@db:27017/",
		"mongodb://admin:hunter2@db:27017/?maxPoolSize=hunter2",
	} {
		cfg, err := config.Parse([]string{"MONGODB_URI=" + uri, "METRICS_ADDR="})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := New(t.Context(), cfg, Options{})
		if err == nil {
			_ = svc.Close(context.Background())
			t.Fatalf("%s: no error", uri)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the secret reached the error: %v", err)
		}
	}
}

// TestRunningServiceNeverShowsTheURIsSecrets runs the service on a URI that
// carries secrets the driver accepts without using them, and looks for them
// in the log, /metrics, /healthz and /readyz.
func TestRunningServiceNeverShowsTheURIsSecrets(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	u, err := url.Parse(mongotest.URI(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("tlsCertificateKeyFilePassword", "hunter2")
	u.RawQuery = q.Encode()
	cfg, err := config.Parse([]string{"MONGODB_URI=" + u.String(), "MONGODB_DATABASE=" + db.Name(),
		"METRICS_ADDR=127.0.0.1:0", "POLL_INTERVAL=50ms", "LOG_LEVEL=debug"})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	svc := newService(t, cfg, Options{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Version: "test"})
	stop := run(t, svc)
	base := "http://" + svc.MetricsAddr()
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := getQuiet(base + "/readyz"); code != 200; code, _ = getQuiet(base + "/readyz") {
		if time.Now().After(deadline) {
			_, body := getQuiet(base + "/readyz")
			t.Fatalf("never ready: %s\n%s", body, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var seen strings.Builder
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		_, body := get(t, base+path)
		seen.WriteString(body)
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	seen.WriteString(logs.String())
	if !strings.Contains(logs.String(), `"msg":"consumer starting"`) {
		t.Fatalf("no start-up line in the log:\n%s", logs.String())
	}
	for _, secret := range []string{"hunter2"} {
		if strings.Contains(seen.String(), secret) {
			t.Errorf("%s appears in the log or an endpoint:\n%s", secret, seen.String())
		}
	}
}
