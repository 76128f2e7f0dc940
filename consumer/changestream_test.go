package consumer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
)

// fakeStream delivers scripted events, then ends with err.
type fakeStream struct {
	tokens []string
	err    error
	i      int
	token  bson.Raw
}

func (f *fakeStream) Next(ctx context.Context) bool {
	if f.i >= len(f.tokens) {
		return false
	}
	f.token = tokenDoc(f.tokens[f.i])
	f.i++
	return true
}
func (f *fakeStream) ResumeToken() bson.Raw       { return f.token }
func (f *fakeStream) Err() error                  { return f.err }
func (f *fakeStream) Close(context.Context) error { return nil }
func tokenDoc(s string) bson.Raw                  { b, _ := bson.Marshal(bson.D{{Key: "_data", Value: s}}); return b }

// scriptedWatch hands out streams in order and records the resume tokens asked for.
type scriptedWatch struct {
	mu      sync.Mutex
	streams []func() (changeStream, error)
	resumed []string
	done    chan struct{} // closed when the script runs out
}

func (w *scriptedWatch) watch(ctx context.Context, token bson.Raw) (changeStream, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if token != nil {
		w.resumed = append(w.resumed, token.Lookup("_data").StringValue())
	} else {
		w.resumed = append(w.resumed, "")
	}
	if len(w.streams) == 0 {
		close(w.done)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	next := w.streams[0]
	w.streams = w.streams[1:]
	return next()
}

// immediately is a clock whose waits end at once: the test drives the
// source through its retries without waiting.
func immediately() *clocktest.Fake { return clocktest.NewAuto(time.Now()) }

func TestChangeStreamResumesWithItsTokenAfterAnError(t *testing.T) {
	t.Parallel()
	reset := mongo.CommandError{Message: "connection reset", Labels: []string{"NetworkError"}}
	w := &scriptedWatch{done: make(chan struct{}), streams: []func() (changeStream, error){
		func() (changeStream, error) { return &fakeStream{tokens: []string{"t1", "t2"}, err: reset}, nil },
		func() (changeStream, error) { return &fakeStream{tokens: []string{"t3"}, err: reset}, nil },
	}}
	m := metrics.NewConsumer(prometheus.NewRegistry())
	src := newChangeStreamSource(w.watch, ChangeStreamConfig{Clock: immediately()}, m, nil)
	ctx, cancel := context.WithCancel(t.Context())
	var wakes int
	done := make(chan error)
	go func() { done <- src.Run(ctx, func() { wakes++ }) }()
	<-w.done
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := []string{"", "t2", "t3"}; !equalStrings(w.resumed, want) {
		t.Errorf("watch resumed after %q, want %q", w.resumed, want)
	}
	if got := testutil.ToFloat64(m.Wakeups.WithLabelValues(metrics.WakeupChangeStream)); got != 3 {
		t.Errorf("change-stream wake-ups = %v, want 3", got)
	}
	if wakes < 3 {
		t.Errorf("wake called %d times, want at least 3", wakes)
	}
	if got := testutil.ToFloat64(m.WakeupSource.WithLabelValues(metrics.WakeupChangeStream)); got != 1 {
		t.Errorf("change_stream source gauge = %v, want 1", got)
	}
}

func TestChangeStreamFallsBackToPollingAfterRepeatedFailures(t *testing.T) {
	t.Parallel()
	fail := func() (changeStream, error) { return nil, errors.New("server selection timeout") }
	w := &scriptedWatch{done: make(chan struct{}), streams: []func() (changeStream, error){fail, fail, fail}}
	m := metrics.NewConsumer(prometheus.NewRegistry())
	src := newChangeStreamSource(w.watch, ChangeStreamConfig{Clock: immediately(), MaxFailures: 3}, m, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- src.Run(ctx, func() {}) }()
	<-w.done
	cancel()
	<-done
	if got := testutil.ToFloat64(m.WakeupSource.WithLabelValues(metrics.WakeupPoll)); got != 1 {
		t.Errorf("poll source gauge = %v after %d failures, want 1", got, 3)
	}
	if len(w.resumed) != 4 {
		t.Errorf("watch attempts = %d, want 3 failures then a retry after RetryAfter", len(w.resumed))
	}
}

// TestChangeStreamFallsBackOnTheEmbeddedServer runs the real source against
// FerretDB, which has no change streams: it must fall back with one log line
// and no error loop.
func TestChangeStreamFallsBackOnTheEmbeddedServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := metrics.NewConsumer(prometheus.NewRegistry())
	var logs logCounter
	still := clocktest.NewFake(time.Now()) // the retry never comes
	src := NewChangeStreamSource(b.colls.Queue, ChangeStreamConfig{Clock: still}, m, logs.logger())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- src.Run(ctx, func() {}) }()
	waitFor(t, "the source to settle on polling or the stream", func() bool {
		return testutil.ToFloat64(m.WakeupSource.WithLabelValues(metrics.WakeupPoll))+testutil.ToFloat64(m.WakeupSource.WithLabelValues(metrics.WakeupChangeStream)) == 1 && logs.count() > 0
	})
	cancel()
	<-done
	if src.active == metrics.WakeupChangeStream {
		t.Skip("this server has change streams (TEST_MONGODB_URI is a replica set); the fallback is covered by the fake-stream tests")
	}
	if n := logs.count(); n != 1 {
		t.Errorf("%d log lines, want exactly one for the fallback", n)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
