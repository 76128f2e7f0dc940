package mongotest

import (
	"os"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// RequireMongoDB skips t unless db is on a real MongoDB: tests of MongoDB's
// own behaviour (its query planner, explain) mean nothing on FerretDB, whose
// explain describes its SQLite or PostgreSQL plan.
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

// RequireMongoDBURI skips t unless TEST_MONGODB_URI is set: the cheap half
// of RequireMongoDB, for a test to call before seeding data that only a
// real MongoDB's planner needs (seeding thousands of documents into the
// embedded server only to skip can time out a loaded machine).
func RequireMongoDBURI(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvURI) == "" {
		t.Skipf("needs MongoDB's query planner: set %s to a MongoDB 6.0+ (the embedded FerretDB's explain is its SQLite plan)", EnvURI)
	}
}
