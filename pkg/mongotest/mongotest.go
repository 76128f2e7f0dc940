// Package mongotest hands integration tests a database of their own, so they
// run in parallel: on the server named by TEST_MONGODB_URI, otherwise on one
// embedded FerretDB server shared by the test binary (started on first use).
package mongotest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// EnvURI names the variable that points the suite at a real MongoDB.
const EnvURI = "TEST_MONGODB_URI"

var dbSeq atomic.Int64

var startServer = sync.OnceValues(func() (string, error) {
	s, err := embedmongo.Start(context.Background(), embedmongo.Config{})
	if err != nil {
		return "", err
	}
	return s.URI(), nil
})

// URI returns the test server's connection string, starting the shared embedded one if needed.
func URI(t testing.TB) string {
	t.Helper()
	if uri := os.Getenv(EnvURI); uri != "" {
		return uri
	}
	uri, err := startServer()
	if err != nil {
		t.Fatalf("starting embedded MongoDB: %v", err)
	}
	return uri
}

type Options struct {
	// Monitor receives the driver's command events (to count round trips).
	Monitor *event.CommandMonitor
}

// Client connects to the test server until the test ends.
func Client(t testing.TB, opts Options) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(URI(t)).SetTimeout(30 * time.Second).SetMonitor(opts.Monitor))
	if err != nil {
		t.Fatalf("connecting to test MongoDB: %v", err)
	}
	cleanup(t, c.Disconnect)
	return c
}

// DatabaseName returns a name unique to this test binary and call, within MongoDB's 64 bytes.
func DatabaseName(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_", ".", "_").Replace(t.Name())
	return fmt.Sprintf("t%d_%d_%s", os.Getpid()%100000, dbSeq.Add(1), name[:min(len(name), 40)])
}

// Database returns a fresh database on a new client, dropped when the test ends.
func Database(t testing.TB, opts Options) *mongo.Database {
	t.Helper()
	db := Client(t, opts).Database(DatabaseName(t))
	cleanup(t, db.Drop)
	return db
}

// cleanup runs f when the test ends, with 10 s to do it.
func cleanup(t testing.TB, f func(context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f(ctx)
	})
}

// RequireMongoDB skips t unless db is on a real MongoDB: tests of its query
// planner mean nothing on FerretDB, whose explain is its backend's plan.
func RequireMongoDB(t testing.TB, db *mongo.Database) {
	t.Helper()
	RequireMongoDBURI(t)
	info, err := servertraits.Ask(t.Context(), db)
	if err != nil {
		t.Fatalf("asking the test server what it is: %v", err)
	}
	if info.FerretDB != "" {
		t.Skipf("needs MongoDB's query planner: %s points at FerretDB", EnvURI)
	}
}

// RequireMongoDBURI skips t unless TEST_MONGODB_URI is set: the cheap half of RequireMongoDB, to
// call before seeding data only a planner test needs (seeding just to skip can time out a busy machine).
func RequireMongoDBURI(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvURI) == "" {
		t.Skipf("needs MongoDB's query planner: set %s to a MongoDB 6.0+ (the embedded FerretDB's explain is its SQLite plan)", EnvURI)
	}
}

// RecordedReply reads the server reply recorded at path (Extended JSON whose first field, _source,
// says where it was taken) without _source; a fixture without one fails: memory gets shapes wrong.
func RecordedReply(t testing.TB, path string) bson.Raw {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc bson.D
	if err := bson.UnmarshalExtJSON(data, false, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(doc) == 0 || doc[0].Key != "_source" || doc[0].Value == "" {
		t.Fatalf("%s names no _source", path)
	}
	raw, err := bson.Marshal(doc[1:])
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
