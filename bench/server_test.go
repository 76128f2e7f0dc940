package bench

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
)

func TestSplitMongoURI(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ uri, addr, via string }{
		{"mongodb://db.example:27018", "db.example:27018", "mongodb://127.0.0.1:9/?directConnection=true"},
		{"mongodb://db.example", "db.example:27017", "mongodb://127.0.0.1:9/?directConnection=true"},
		{"mongodb://bench:s3cret@10.0.0.5:27017/admin?replicaSet=rs0&authSource=admin&directConnection=false",
			"10.0.0.5:27017", "mongodb://bench:s3cret@127.0.0.1:9/admin?authSource=admin&directConnection=true"},
		{"mongodb://u:p%40ss@h:1/?tls=true", "h:1", "mongodb://u:p%40ss@127.0.0.1:9/?tls=true&directConnection=true"},
		{"mongodb://[::1]/bench", "[::1]:27017", "mongodb://127.0.0.1:9/bench?directConnection=true"},
		{"mongodb://[::1]:27018/?loadBalanced=true&ReplicaSet=rs0&w=majority", "[::1]:27018", "mongodb://127.0.0.1:9/?w=majority&directConnection=true"},
	} {
		addr, via, err := splitMongoURI(c.uri)
		if err != nil {
			t.Errorf("%s: %v", c.uri, err)
			continue
		}
		if got := via("127.0.0.1:9"); addr != c.addr || got != c.via {
			t.Errorf("%s: %s, %s; want %s, %s", c.uri, addr, got, c.addr, c.via)
		}
	}
	for _, uri := range []string{"mongodb+srv://cluster0.example.net", "mongodb://a:1,b:2/?replicaSet=rs0", "postgres://x"} {
		if _, _, err := splitMongoURI(uri); err == nil {
			t.Errorf("%s accepted: the proxy forwards to one address", uri)
		}
	}
	// url.Parse refuses an unescaped ^ in a password, and its error quotes the URI.
	if _, _, err := splitMongoURI("mongodb://app:s3cr^t@db:27017/"); err == nil || strings.Contains(err.Error(), "s3cr") {
		t.Errorf("an unparsable URI: %v; want an error that does not quote the password", err)
	}
}

func TestMongoDBURIPicksTheBackend(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-short", "-mongodb-uri", "mongodb://h:1"}, {"-mongodb-uri", "mongodb://h:1"}} {
		cfg, err := ParseArgs(args, io.Discard)
		if err != nil || cfg.Backend != backendMongoDB {
			t.Errorf("%q: backend %q, %v; want mongodb (a URI given is the server to use)", args, cfg.Backend, err)
		}
	}
	if _, err := ParseArgs([]string{"-backend", "mongodb", "-mongodb-uri", ""}, io.Discard); err == nil || !strings.Contains(err.Error(), "-mongodb-uri") {
		t.Errorf("-backend mongodb without a URI: %v", err)
	}
	if _, err := ParseArgs([]string{"-backend", "mysql"}, io.Discard); err == nil {
		t.Error("-backend mysql accepted")
	}
}

// TestFleetAndStormOnAServerOfOnesOwn runs the fleet and storm scenarios
// against a server the bench did not start, as it runs against a real
// MongoDB: here an embedded server of the test's own, reached through
// -mongodb-uri. It checks the bench leaves nothing behind on it.
func TestFleetAndStormOnAServerOfOnesOwn(t *testing.T) {
	if os.Getenv("TEST_MONGODB_URI") != "" {
		t.Skip("TestSmoke already runs every scenario on $TEST_MONGODB_URI")
	}
	t.Parallel()
	ctx := context.Background()
	srv, err := embedmongo.Start(ctx, embedmongo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	_, rep := runBench(t, "-short", "-scenarios", "fleet,storm", "-mongodb-uri", srv.URI())
	if !strings.Contains(rep.Server, "(-mongodb-uri)") {
		t.Errorf("report names the server %q, not the one given", rep.Server)
	}
	for _, r := range rep.Results {
		if r.Backlog.Entries > 0 && (!r.Drained || r.DeadLettered != 0) {
			t.Errorf("%s: drained %v, %v dead-lettered; want a drain, nobody dead-lettered", r.Name, r.Drained, r.DeadLettered)
		}
	}

	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	names, err := client.ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n != "admin" && n != "local" && n != "config" {
			t.Errorf("database %q left behind on the server", n)
		}
	}
}
