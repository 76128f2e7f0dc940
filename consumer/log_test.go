package consumer

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogger sends the consumer's logs to the test's own output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// logCounter counts log lines at info and above.
type logCounter struct {
	mu sync.Mutex
	n  int
}

func (l *logCounter) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (l *logCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.n++
	l.mu.Unlock()
	return len(p), nil
}

func (l *logCounter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}
