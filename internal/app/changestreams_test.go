package app

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
)

// TestChangeStreamsSetting runs the service with CHANGE_STREAMS=auto and
// =off until it has drained an entry: auto opens (or, on a server without
// them, tries) a change stream on the queue; off never sends one, and the
// consumer still drains by polling.
func TestChangeStreamsSetting(t *testing.T) {
	t.Parallel()
	for _, setting := range []string{config.ChangeStreamsAuto, config.ChangeStreamsOff} {
		t.Run(setting, func(t *testing.T) {
			t.Parallel()
			var rec queryplan.Recorder
			streams := 0
			ranRounds := runUntilDrained(t, setting, &rec, func(cmds []queryplan.Command) bool {
				streams = 0
				for _, c := range cmds {
					if c.Name == "aggregate" && strings.Contains(c.Body.String(), "$changeStream") {
						streams++
					}
				}
				// auto: also wait for the stream's first attempt, which
				// runs beside the claim loop.
				return setting == config.ChangeStreamsOff || streams > 0
			})
			if !ranRounds {
				t.Fatal("the entry was never drained")
			}
			switch {
			case setting == config.ChangeStreamsOff && streams != 0:
				t.Errorf("CHANGE_STREAMS=off sent %d change-stream aggregates", streams)
			case setting == config.ChangeStreamsAuto && streams == 0:
				t.Error("CHANGE_STREAMS=auto never tried a change stream")
			}
		})
	}
}

// runUntilDrained runs the service on a fresh database holding one entry
// until the entry is gone and seen(commands so far) says enough; it
// reports whether that happened within a minute.
func runUntilDrained(t *testing.T, changeStreams string, rec *queryplan.Recorder, seen func([]queryplan.Command) bool) bool {
	t.Helper()
	db := mongotest.Database(t, mongotest.Options{})
	cfg, err := config.Parse([]string{
		"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(),
		"METRICS_ADDR=127.0.0.1:0", "POLL_INTERVAL=50ms", "CHANGE_STREAMS=" + changeStreams,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("score_events").InsertOne(t.Context(), bson.D{{Key: "username", Value: "ann"}, {Key: "createdAt", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	svc := newService(t, cfg, Options{Monitor: rec.Monitor()})
	stop := run(t, svc)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var cmds []queryplan.Command
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		cmds = append(cmds, rec.Take()...)
		n, err := db.Collection("score_events").CountDocuments(t.Context(), bson.D{})
		if err == nil && n == 0 && seen(cmds) {
			return true
		}
	}
	return false
}
