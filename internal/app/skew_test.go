package app

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// fastClock is the wall clock of a host whose time is off by ahead.
type fastClock struct {
	clock.Real
	ahead time.Duration
}

func (c fastClock) Now() time.Time { return time.Now().Add(c.ahead) }

// TestOldestAgeFollowsTheServersClock runs the service on a host whose
// clock is 10 minutes fast, against a queue holding one entry the
// producer dated by the right time: the oldest-age SLI must not report
// it 10 minutes old (it would page someone about a queue that is fine).
func TestOldestAgeFollowsTheServersClock(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	cfg, err := config.Parse([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(),
		"METRICS_ADDR=127.0.0.1:0", "SLI_INTERVAL=50ms", "POLL_INTERVAL=50ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	// The entry stays queued while it is sampled: its user is held by
	// another consumer's live lease.
	now := time.Now()
	if _, err := db.Collection("score_claims").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "ann"}, {Key: "token", Value: "elsewhere"}, {Key: "leaseUntil", Value: now.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("score_events").InsertOne(t.Context(), bson.D{{Key: "username", Value: "ann"}, {Key: "createdAt", Value: now}}); err != nil {
		t.Fatal(err)
	}
	svc := newService(t, cfg, Options{Clock: fastClock{ahead: 10 * time.Minute}})
	run(t, svc)
	base := "http://" + svc.MetricsAddr()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body := get(t, base+"/metrics")
		if age, ok := gaugeValue(body, "scorerefresh_queue_oldest_age_seconds"); ok && age > 0 && strings.Contains(body, "scorerefresh_queue_depth 1") {
			if age > 120 {
				t.Fatalf("oldest age %.0f s for an entry queued moments ago: the host's clock, 10 minutes fast, was used", age)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue was never sampled:\n%s", body)
		}
	}
}

// gaugeValue reads an unlabelled series from a Prometheus text exposition.
func gaugeValue(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
