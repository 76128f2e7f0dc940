package consumer

import (
	"context"
	"errors"
	"slices"
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

// fakeStream delivers scripted insert events, then ends with err. An err of
// nil is how the driver reports a stream the server invalidated while
// $match filtered the invalidate event out: Next says false, Err nil, and
// ResumeToken stays the last insert's. With invalidate set, the invalidate
// event itself comes after the inserts (a pipeline that lets it through),
// with its own token, before the end.
type fakeStream struct {
	tokens     []string
	invalidate bool
	err        error
	i          int
	token      bson.Raw
	op         string
}

func (f *fakeStream) Next(ctx context.Context) bool {
	switch {
	case f.i < len(f.tokens):
		f.token, f.op = tokenDoc(f.tokens[f.i]), "insert"
	case f.i == len(f.tokens) && f.invalidate:
		f.token, f.op = tokenDoc("invalidate"), "invalidate"
	default:
		return false
	}
	f.i++
	return true
}

// Decode decodes the event as the source's pipeline projects it: the
// resume token, and operationType only for an invalidate event.
func (f *fakeStream) Decode(v any) error {
	ev := bson.D{{Key: "_id", Value: f.token}}
	if f.op == "invalidate" {
		ev = append(ev, bson.E{Key: "operationType", Value: f.op})
	}
	b, err := bson.Marshal(ev)
	if err != nil {
		return err
	}
	return bson.Unmarshal(b, v)
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
	src := NewChangeStreamSource(nil, immediately(), m, nil)
	src.watch = w.watch
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

// TestChangeStreamStartsAfreshAfterAnInvalidation: a drop or rename of the
// queue invalidates the stream. Whether the invalidate event is filtered
// out (the stream just ends) or delivered, the next stream is a fresh one,
// without the token: resuming from it would meet the invalidation again, and
// the source would fall back to polling for good.
func TestChangeStreamStartsAfreshAfterAnInvalidation(t *testing.T) {
	t.Parallel()
	reset := mongo.CommandError{Message: "connection reset", Labels: []string{"NetworkError"}}
	w := &scriptedWatch{done: make(chan struct{}), streams: []func() (changeStream, error){
		func() (changeStream, error) { return &fakeStream{tokens: []string{"t1", "t2"}}, nil },
		func() (changeStream, error) { return &fakeStream{tokens: []string{"t3"}, invalidate: true}, nil },
		func() (changeStream, error) { return &fakeStream{tokens: []string{"t4"}, err: reset}, nil },
	}}
	m := metrics.NewConsumer(prometheus.NewRegistry())
	src := NewChangeStreamSource(nil, immediately(), m, nil)
	src.watch = w.watch
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- src.Run(ctx, func() {}) }()
	<-w.done
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The last stream ended on a network error: that one resumes.
	if want := []string{"", "", "", "t4"}; !equalStrings(w.resumed, want) {
		t.Errorf("watch resumed after %q, want %q", w.resumed, want)
	}
	if got := testutil.ToFloat64(m.Wakeups.WithLabelValues(metrics.WakeupChangeStream)); got != 4 {
		t.Errorf("change-stream wake-ups = %v, want 4 (the inserts, not the invalidate event)", got)
	}
	if got := testutil.ToFloat64(m.WakeupSource.WithLabelValues(metrics.WakeupChangeStream)); got != 1 {
		t.Errorf("change_stream source gauge = %v, want 1: an invalidation is no reason to poll", got)
	}
}

// TestChangeStreamDropsATokenTheServerRefuses: errors saying the token can
// never be resumed from (codes from MongoDB's error_codes.yml, as the driver
// builds them from the server's reply) start a fresh stream.
func TestChangeStreamDropsATokenTheServerRefuses(t *testing.T) {
	t.Parallel()
	nonResumable := []string{"NonResumableChangeStreamError"}
	for _, refused := range []mongo.CommandError{
		{Code: 260, Name: "InvalidResumeToken", Message: "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification."},
		{Code: 280, Name: "ChangeStreamFatalError", Message: "cannot resume stream", Labels: nonResumable},
		{Code: 286, Name: "ChangeStreamHistoryLost", Message: "Resume of change stream was not possible, as the resume point may no longer be in the oplog.", Labels: nonResumable},
	} {
		t.Run(refused.Name, func(t *testing.T) {
			t.Parallel()
			reset := mongo.CommandError{Message: "connection reset", Labels: []string{"NetworkError"}}
			w := &scriptedWatch{done: make(chan struct{}), streams: []func() (changeStream, error){
				func() (changeStream, error) { return &fakeStream{tokens: []string{"t1"}, err: reset}, nil },
				func() (changeStream, error) { return nil, refused },
			}}
			src := NewChangeStreamSource(nil, immediately(), metrics.NewConsumer(prometheus.NewRegistry()), nil)
			src.watch = w.watch
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- src.Run(ctx, func() {}) }()
			<-w.done
			cancel()
			<-done
			if want := []string{"", "t1", ""}; !equalStrings(w.resumed, want) {
				t.Errorf("watch resumed after %q, want %q", w.resumed, want)
			}
		})
	}
}

func TestChangeStreamFallsBackToPollingAfterRepeatedFailures(t *testing.T) {
	t.Parallel()
	fail := func() (changeStream, error) { return nil, errors.New("server selection timeout") }
	w := &scriptedWatch{done: make(chan struct{}), streams: slices.Repeat([]func() (changeStream, error){fail}, maxStreamFailures)}
	m := metrics.NewConsumer(prometheus.NewRegistry())
	src := NewChangeStreamSource(nil, immediately(), m, nil)
	src.watch = w.watch
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- src.Run(ctx, func() {}) }()
	<-w.done
	cancel()
	<-done
	if got := testutil.ToFloat64(m.WakeupSource.WithLabelValues(metrics.WakeupPoll)); got != 1 {
		t.Errorf("poll source gauge = %v after %d failures, want 1", got, maxStreamFailures)
	}
	if len(w.resumed) != maxStreamFailures+1 {
		t.Errorf("watch attempts = %d, want %d failures then a retry after streamRetryAfter", len(w.resumed), maxStreamFailures)
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
	src := NewChangeStreamSource(b.colls.Queue, still, m, logs.logger())
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
