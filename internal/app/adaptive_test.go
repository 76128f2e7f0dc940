package app

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAdaptiveServiceDrainsAndWarnsAboutTheBudget(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	cfg, err := config.Parse([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(), "METRICS_ADDR=127.0.0.1:0",
		"POLL_INTERVAL=50ms", "ADAPTIVE_CONCURRENCY=true", "REFRESH_CONCURRENCY=8", "MONGODB_CONNECTION_BUDGET=10",
	})
	if err != nil {
		t.Fatal(err)
	}
	var entries []any
	for i := range 60 {
		entries = append(entries, bson.D{{Key: "username", Value: string(rune('a' + i%26))}, {Key: "createdAt", Value: time.Now()}})
	}
	if _, err := db.Collection("score_events").InsertMany(t.Context(), entries); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	svc := newService(t, cfg, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	// 8 refresh slots + 5 overhead + 2 monitoring = 15 > 10.
	if !strings.Contains(logs.String(), "MONGODB_CONNECTION_BUDGET") || !strings.Contains(logs.String(), `"max_per_server":15`) {
		t.Errorf("no budget warning naming 15 connections:\n%s", logs.String())
	}
	if got := metrics.Read(svc.Metrics.ConcurrencyLimit); got != 2 {
		t.Errorf("adaptive starting limit %v, want REFRESH_CONCURRENCY/4 = 2", got)
	}
	stop := run(t, svc)
	deadline := time.Now().Add(60 * time.Second)
	for metrics.Read(svc.Metrics.EntriesAcked) < 60 {
		if time.Now().After(deadline) {
			t.Fatalf("only %v of 60 entries acked", metrics.Read(svc.Metrics.EntriesAcked))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
