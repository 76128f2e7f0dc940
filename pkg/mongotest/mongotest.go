// Package mongotest hands integration tests a real MongoDB database: the server
// named by TEST_MONGODB_URI when it is set, otherwise one embedded FerretDB
// server shared by every test of the package (started on first use, over TCP).
// Each call returns a database of its own, so tests can run in parallel and
// never see each other's documents.
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

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
)

// EnvURI names the variable that points the suite at a real MongoDB.
const EnvURI = "TEST_MONGODB_URI"

var (
	serverOnce sync.Once
	serverURI  string
	serverErr  error
	dbSeq      atomic.Int64
)

// URI returns the connection string of the test server, starting the shared
// embedded server if TEST_MONGODB_URI is not set. The embedded server lives
// until the test binary exits.
func URI(t testing.TB) string {
	t.Helper()
	if uri := os.Getenv(EnvURI); uri != "" {
		return uri
	}
	serverOnce.Do(func() {
		s, err := embedmongo.Start(context.Background(), embedmongo.Config{})
		if err != nil {
			serverErr = err
			return
		}
		serverURI = s.URI()
	})
	if serverErr != nil {
		t.Fatalf("starting embedded MongoDB: %v", serverErr)
	}
	return serverURI
}

// Options configures a client for a test.
type Options struct {
	// Monitor receives the driver's command events (to count round trips).
	Monitor *event.CommandMonitor
}

// Client connects to the test server; the client is disconnected when the
// test ends.
func Client(t testing.TB, opts Options) *mongo.Client {
	t.Helper()
	co := options.Client().ApplyURI(URI(t)).SetTimeout(30 * time.Second)
	if opts.Monitor != nil {
		co.SetMonitor(opts.Monitor)
	}
	c, err := mongo.Connect(co)
	if err != nil {
		t.Fatalf("connecting to test MongoDB: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

// DatabaseName returns a database name unique to this test binary and call,
// short enough for MongoDB's 64-byte limit.
func DatabaseName(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_", ".", "_").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t%d_%d_%s", os.Getpid()%100000, dbSeq.Add(1), name)
}

// Database returns a fresh database on a new client; it is dropped when the
// test ends.
func Database(t testing.TB, opts Options) *mongo.Database {
	t.Helper()
	db := Client(t, opts).Database(DatabaseName(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
	})
	return db
}
