package metrics

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

func TestSamplerMeasuresQueueAndKeepsAgeRisingWhenStalled(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	queue, dead := db.Collection("q"), db.Collection("dead")
	clock := clocktest.NewFake(time.Now().Truncate(time.Second)) // ObjectIds keep whole seconds
	reg := prometheus.NewRegistry()
	sli := NewSLI(reg, clock)
	s := NewSampler(SamplerConfig{Queue: queue, DeadLetter: dead, Clock: clock}, sli, NewConsumer(reg), nil)

	if err := s.RunOnce(t.Context()); err != nil {
		t.Fatalf("sampling an empty queue: %v", err)
	}
	if d, a := testutil.ToFloat64(sli.QueueDepth), sli.OldestAge(); d != 0 || a != 0 {
		t.Fatalf("empty queue: depth %v, oldest age %v; want 0, 0", d, a)
	}

	now := clock.Now()
	_, err := queue.InsertMany(t.Context(), []any{
		bson.D{{Key: "username", Value: "a"}, {Key: "createdAt", Value: now.Add(-30 * time.Second)}},
		bson.D{{Key: "username", Value: "b"}, {Key: "createdAt", Value: now.Add(-90 * time.Second)}},
		bson.D{{Key: "username", Value: "c"}, {Key: "createdAt", Value: now.Add(-10 * time.Second)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.InsertOne(t.Context(), bson.D{{Key: "username", Value: "z"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := testutil.ToFloat64(sli.QueueDepth); d != 3 {
		t.Errorf("depth = %v, want 3", d)
	}
	if d := testutil.ToFloat64(sli.DeadLetterDepth); d != 1 {
		t.Errorf("dead-letter depth = %v, want 1", d)
	}
	if a := sli.OldestAge(); a != 90 {
		t.Errorf("oldest age = %v, want 90", a)
	}

	// An undated entry whose ObjectId is older still is the oldest.
	oid := bson.NewObjectIDFromTimestamp(now.Add(-10 * time.Minute))
	if _, err := queue.InsertOne(t.Context(), bson.D{{Key: "_id", Value: oid}, {Key: "username", Value: "d"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a := sli.OldestAge(); a != 600 {
		t.Errorf("oldest age with an undated ObjectId entry = %v, want 600", a)
	}

	// No more samples (MongoDB gone, loop wedged): the age keeps rising.
	clock.Advance(5 * time.Minute)
	if a := sli.OldestAge(); a != 900 {
		t.Errorf("oldest age 5 minutes after the last sample = %v, want 900", a)
	}
	if got := testutil.ToFloat64(sli.LastSample); got != float64(now.UnixNano())/1e9 {
		t.Errorf("last sample timestamp = %v, want %v", got, float64(now.UnixNano())/1e9)
	}
}

// TestSampleThatRunsOutOfTimeGetsLongerNextTime holds the first sample's
// reads of the queue until their deadline (a server that cannot answer in
// time), then lets the next sample's through. The first fails and says the
// next gets twice as long; the next one's reads carry that deadline, and it
// succeeds. With a fixed deadline the next sample had the same 300 ms, and
// on a server needing more, failed every time, each leaving an abandoned
// read behind.
func TestSampleThatRunsOutOfTimeGetsLongerNextTime(t *testing.T) {
	t.Parallel()
	name := mongotest.Database(t, mongotest.Options{}).Name()
	var mu sync.Mutex
	var hold bool
	var deadlines []time.Time // of the queue's finds
	slow := &mongotest.Commands{OnStarted: func(ctx context.Context, e mongotest.Command) {
		if e.Name != "find" || e.Collection != "q" {
			return
		}
		dl, _ := ctx.Deadline()
		mu.Lock()
		deadlines = append(deadlines, dl)
		held := hold
		mu.Unlock()
		if held {
			<-ctx.Done() // the server's work outlasts the sample
		}
	}}
	db := mongotest.Client(t, mongotest.Options{Monitor: slow.Monitor(nil)}).Database(name)
	if _, err := db.Collection("q").InsertOne(t.Context(), bson.D{{Key: "username", Value: "a"}, {Key: "createdAt", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	sli := NewSLI(reg, nil)
	s := NewSampler(SamplerConfig{Queue: db.Collection("q"), DeadLetter: db.Collection("dead"), Interval: time.Hour, Timeout: 300 * time.Millisecond}, sli, NewConsumer(reg), nil)
	budget := func(began time.Time) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if len(deadlines) == 0 {
			t.Fatal("the sample read nothing from the queue")
		}
		d := deadlines[len(deadlines)-1].Sub(began)
		deadlines = nil
		return d
	}

	mu.Lock()
	hold = true
	mu.Unlock()
	began := time.Now()
	err := s.RunOnce(t.Context())
	if err == nil || !strings.Contains(err.Error(), "the next one gets 600ms") {
		t.Fatalf("first sample: %v, want it to run out of its 300ms and say the next gets 600ms", err)
	}
	if b := budget(began); b > 600*time.Millisecond {
		t.Fatalf("first sample's reads had %s, want its 300ms", b)
	}
	mu.Lock()
	hold = false
	mu.Unlock()
	began = time.Now()
	if err := s.RunOnce(t.Context()); err != nil {
		t.Fatalf("second sample, with a longer deadline: %v", err)
	}
	if b := budget(began); b < 600*time.Millisecond {
		t.Errorf("second sample's reads had %s, want 600ms", b)
	}
	if d := testutil.ToFloat64(sli.QueueDepth); d != 1 {
		t.Errorf("depth = %v, want 1", d)
	}
}
