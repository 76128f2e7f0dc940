package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/serverclock"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// skewedClock is a host clock that is off by a fixed amount.
type skewedClock struct {
	clock.Real
	skew time.Duration
}

func (s skewedClock) Now() time.Time { return time.Now().Add(s.skew) }

// TestClockSkewBetweenReplicasLosesNoEvent runs two consumers whose host
// clocks are ten minutes fast and ten minutes slow on one queue while a
// producer writes source data and enqueues. Judged by their own clocks, the
// fast one would see every lease of the slow one as long expired, and its
// refreshedAt, ten minutes ahead, would make the slow one's later recomputes
// lose as "older" while their entries were acknowledged: events lost with
// no error. Judged by the server's clock (serverclock), every score ends
// equal to a recompute from the final source data.
func TestClockSkewBetweenReplicasLosesNoEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rules := &scoring.Rules{Source: "test", Components: []scoring.Component{
		{Name: "activity", Collection: "user_activity", UserField: "username", Op: scoring.OpSum, Field: "points", Weight: 1, TimeField: "at"},
	}}
	scores := b.db.Collection("user_scores")
	for i, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		clock := serverclock.New(b.db, skewedClock{skew: skew})
		if _, err := clock.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		c, m := b.newConsumer(t, nil, consumerOpts{limit: 4, serverTime: clock, cfg: Config{MaxUsersInFlight: 8, Owner: fmt.Sprintf("skewed-%d", i)}})
		c.refresher = scoring.NewRefresher(scoring.NewRecomputer(b.db, rules), scoring.NewStore(scores, scoring.StoreConfig{OnConflict: m.OCCConflicts.Inc}))
		start(t, c)
	}
	rnd := rand.New(rand.NewPCG(11, 11))
	activity := b.db.Collection("user_activity")
	for range 200 {
		user := fmt.Sprintf("u%d", rnd.IntN(6))
		if _, err := activity.InsertOne(t.Context(), bson.D{{Key: "username", Value: user}, {Key: "points", Value: 1 + rnd.IntN(9)}, {Key: "at", Value: time.Now()}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.colls.Queue.InsertOne(t.Context(), bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: time.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	b.waitDrained(t)
	if n := b.count(t, b.colls.DeadLetter, nil); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	rec := scoring.NewRecomputer(b.db, rules)
	for u := range 6 {
		user := fmt.Sprintf("u%d", u)
		var d scoring.ScoreDoc
		if err := scores.FindOne(t.Context(), bson.D{{Key: "_id", Value: user}}).Decode(&d); err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		want, err := rec.Recompute(t.Context(), user, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if d.Score != want.Score {
			t.Errorf("%s: stored score %v, recompute from the final data %v: events were lost", user, d.Score, want.Score)
		}
		if off := time.Until(d.RefreshedAt); off > time.Minute || off < -time.Minute {
			t.Errorf("%s: refreshedAt is %v off the server's clock", user, off)
		}
	}
}

// steppedServerClock is a server clock estimate that a resample can step.
type steppedServerClock struct{ offset atomic.Int64 }

func (c *steppedServerClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// TestRefreshDurationIgnoresServerClockSteps steps the server clock
// estimate back a minute while a refresh runs, as a resample that finds
// the estimate was ahead does. The refresh's duration is measured on the
// local clock: measured on the server clock, it came out a minute
// negative.
func TestRefreshDurationIgnoresServerClockSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "ann")
	server := &steppedServerClock{}
	rec := newRecorder(func(context.Context, string, int) error {
		server.offset.Add(int64(-time.Minute))
		return nil
	})
	c, m := b.newConsumer(t, rec, consumerOpts{serverTime: server})
	stop := start(t, c)
	b.waitDrained(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var out dto.Metric
	if err := m.RefreshDuration.Write(&out); err != nil {
		t.Fatal(err)
	}
	if h := out.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() < 0 {
		t.Errorf("refresh duration: %d samples summing to %.1fs, want one that is not negative", h.GetSampleCount(), h.GetSampleSum())
	}
}
