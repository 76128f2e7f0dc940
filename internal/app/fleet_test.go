package app

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestFleetDrainsAndClosesEveryCursor runs several replicas, each with a
// client of its own, on one server, the way a Deployment runs: six on a
// diverse backlog, and three while a producer writes source documents and
// enqueues. On the embedded server a fleet used to jam it for good once the
// replicas held their users (each single-document update statement holds
// one of its 100 SQLite connections until its command ends; see
// servertraits.SingleUpdatesHoldConnections): every command then waited
// for a connection. The queue must empty, every score come out exact, and
// every cursor any replica opened end read to its end or killed (on the
// embedded server an abandoned cursor holds a connection until the client
// disconnects; on MongoDB it lives ten minutes).
func TestFleetDrainsAndClosesEveryCursor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                              string
		replicas, seeded, produced, users int
		env                               []string
	}{
		// Batches forced on: each refresh slot's batch marks its users
		// running and writes their scores in one command of a statement
		// per user, the commands that jammed the server.
		{"six replicas on a backlog", 6, 500, 0, 300, []string{"REFRESH_BATCH_SIZE=16"}},
		{"three replicas with a producer", 3, 150, 150, 150, nil},
	} {
		if os.Getenv(fullFleetEnv) != "" {
			// The sizes the jam was first measured at.
			tc.seeded, tc.users = fullSize[tc.replicas][0], fullSize[tc.replicas][1]
			tc.produced = fullSize[tc.replicas][2]
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := mongotest.Database(t, mongotest.Options{})
			cfg, err := config.Parse(append([]string{
				"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(), "METRICS_ADDR=127.0.0.1:0",
				"POLL_INTERVAL=200ms", "SLI_INTERVAL=1s",
			}, tc.env...))
			if err != nil {
				t.Fatal(err)
			}
			// The backlog first, so the replicas hold MAX_USERS_IN_FLIGHT
			// users each at once, as in a drain of a real backlog.
			want := seed(t, db, tc.seeded, tc.users)
			trackers := make([]*cursors, tc.replicas)
			var stops []func() error
			var logs syncBuffer
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the replicas' warnings:\n%s", logs.String())
				}
			})
			for i := range tc.replicas {
				trackers[i] = newCursors()
				log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", i)
				svc := newService(t, cfg, Options{Monitor: trackers[i].Monitor(nil), Logger: log})
				stops = append(stops, run(t, svc))
			}
			for u, v := range produce(t, db, tc.produced, tc.users, 1) {
				want[u] += v
			}
			waitEmpty(t, db.Collection("score_events"), 10*time.Minute)
			for i, stop := range stops {
				if err := stop(); err != nil {
					t.Errorf("replica %d: %v", i, err)
				}
			}
			for i, tr := range trackers {
				if open := tr.Open(); len(open) > 0 {
					t.Errorf("replica %d left %d cursors open: %v", i, len(open), open)
				}
			}
			checkScores(t, db, want)
		})
	}
}

// fullFleetEnv, set, runs TestFleetDrainsAndClosesEveryCursor at the sizes
// the jam was first measured at (six replicas on 2,000 entries of 1,000
// users; three with a producer writing 300 entries of 255 users), as in
//
//	SCOREREFRESH_FLEET_FULL=1 go test -count=10 -timeout 90m -run TestFleetDrainsAndClosesEveryCursor ./internal/app/
const fullFleetEnv = "SCOREREFRESH_FLEET_FULL"

// fullSize is replicas → {seeded, users, produced} at full size.
var fullSize = map[int][3]int{6: {2000, 1000, 0}, 3: {0, 255, 300}}

// seed writes n events over users in two bulk inserts and returns each
// user's expected score.
func seed(t *testing.T, db *mongo.Database, n, users int) map[string]float64 {
	t.Helper()
	want := map[string]float64{}
	if n == 0 {
		return want
	}
	var activity, entries []any
	now := time.Now()
	for i := range n {
		user := fmt.Sprintf("user %03d", i%users)
		points := 1 + i%7
		activity = append(activity, bson.D{{Key: "username", Value: user}, {Key: "points", Value: points}, {Key: "at", Value: now}})
		entries = append(entries, bson.D{{Key: "username", Value: user}, {Key: "createdAt", Value: now}})
		want[user] += float64(points)
	}
	if _, err := db.Collection("user_activity").InsertMany(t.Context(), activity); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("score_events").InsertMany(t.Context(), entries); err != nil {
		t.Fatal(err)
	}
	return want
}

// produce writes n events over users as an application does, the source
// document before the queue entry, and returns each user's expected score.
func produce(t *testing.T, db *mongo.Database, n, users int, seed uint64) map[string]float64 {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 2))
	want := map[string]float64{}
	for range n {
		user := fmt.Sprintf("user %03d", rnd.IntN(users))
		points := 1 + rnd.IntN(9)
		now := time.Now()
		// Own ids, so a retried insert that had landed is a duplicate
		// rather than a second event.
		insert(t, db.Collection("user_activity"), bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "username", Value: user}, {Key: "points", Value: points}, {Key: "at", Value: now}})
		insert(t, db.Collection("score_events"), bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "username", Value: user}, {Key: "createdAt", Value: now}})
		want[user] += float64(points)
	}
	return want
}

// insert inserts doc as a producer does, retrying a failed enqueue for up
// to two minutes: with a fleet writing, the embedded server's one SQLite
// writer can keep an insert waiting past the client's timeout ("database is
// locked", "interrupted"), and a producer that gave up sooner would fail the
// test for the server's overload rather than the service's.
func insert(t *testing.T, coll *mongo.Collection, doc bson.D) {
	t.Helper()
	var err error
	for i, deadline := 0, time.Now().Add(2*time.Minute); time.Now().Before(deadline); i++ {
		_, err = coll.InsertOne(t.Context(), doc)
		if mongo.IsDuplicateKeyError(err) {
			err = nil
		}
		if err == nil || t.Context().Err() != nil {
			break
		}
		time.Sleep(min(time.Duration(i+1)*50*time.Millisecond, time.Second)) // a producer's retry backoff
	}
	if err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// waitEmpty waits for the queue to hold nothing, failing after limit; each
// count has a deadline of its own so a jammed server fails the test rather
// than hang it.
func waitEmpty(t *testing.T, queue *mongo.Collection, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		n, err := queue.CountDocuments(ctx, bson.D{})
		cancel()
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not empty after %s: %d left (last count: %v)", limit, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkScores compares every user's score document with want.
func checkScores(t *testing.T, db *mongo.Database, want map[string]float64) {
	t.Helper()
	cur, err := db.Collection("user_scores").Find(t.Context(), bson.D{}, options.Find().SetBatchSize(int32(len(want)+1)))
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		ID    string  `bson:"_id"`
		Score float64 `bson:"score"`
	}
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, d := range docs {
		got[d.ID] = d.Score
	}
	held := heldPoints(t, db)
	for u, w := range want {
		if got[u] != w {
			// What the server holds tells the service's fault (a score
			// other than its sources) from the server's (sources other
			// than what the producer was told it wrote).
			t.Errorf("%s: score %v, want %v; the server holds %d activity documents of %v points for it", u, got[u], w, int(held[u].docs), held[u].points)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d score documents, want %d", len(got), len(want))
	}
}

// heldPoints is each user's activity as the server holds it at the end.
func heldPoints(t *testing.T, db *mongo.Database) map[string]struct{ docs, points float64 } {
	t.Helper()
	cur, err := db.Collection("user_activity").Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		Username string  `bson:"username"`
		Points   float64 `bson:"points"`
	}
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	held := map[string]struct{ docs, points float64 }{}
	for _, d := range docs {
		h := held[d.Username]
		h.docs++
		h.points += d.Points
		held[d.Username] = h
	}
	return held
}
