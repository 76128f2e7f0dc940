package faultproxy

import (
	"context"
	"net/url"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestMongoDriverThroughProxy runs the real driver against the test server
// through the proxy, and checks that each fault looks to it as documented.
func TestMongoDriverThroughProxy(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(mongotest.URI(t))
	if err != nil {
		t.Fatalf("parsing test server URI: %v", err)
	}
	// Not t.Context(): the proxy must outlive the test function for the
	// client's cleanup to reach the server through it.
	p, err := Start(context.Background(), Config{Target: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	// The test server's URI with the proxy as its host keeps any
	// credentials and options it carries.
	u.Host = p.Addr()
	client, err := mongo.Connect(options.Client().ApplyURI(u.String()).SetDirect(true))
	if err != nil {
		t.Fatalf("connecting through proxy: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	// The database is dropped over a direct connection when the test ends.
	db := mongotest.Database(t, mongotest.Options{})
	coll := client.Database(db.Name()).Collection("docs")

	// opCtx bounds an operation expected to succeed, so a broken proxy fails
	// the test instead of hanging it.
	opCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), failAfter)
		t.Cleanup(cancel)
		return ctx
	}
	find := func(ctx context.Context) (int32, error) {
		var doc struct {
			N int32 `bson:"n"`
		}
		err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&doc)
		return doc.N, err
	}
	mustFind := func(when string) {
		t.Helper()
		n, err := find(opCtx())
		if err != nil {
			t.Fatalf("find %s: %v", when, err)
		}
		if n != 1 {
			t.Fatalf("find %s: n = %d, want 1", when, n)
		}
	}

	if err := client.Ping(opCtx(), nil); err != nil {
		t.Fatalf("ping through proxy: %v", err)
	}
	if _, err := coll.InsertOne(opCtx(), bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}); err != nil {
		t.Fatalf("insert through proxy: %v", err)
	}
	mustFind("through proxy")
	if s := p.Stats(); s.BytesUp == 0 || s.BytesDown == 0 {
		t.Fatalf("Stats = %+v, want bytes both ways", s)
	}

	// Cut: the pooled connection is dead. The driver may retry the read on a
	// new connection (the proxy still accepts) or report a network error.
	accepted := p.Stats().Accepted
	if n := p.Cut(); n == 0 {
		t.Fatal("Cut found no open connection")
	}
	if _, err := find(opCtx()); err != nil && !mongo.IsNetworkError(err) {
		t.Fatalf("find after Cut: %v, want success on retry or a network error", err)
	}
	mustFind("after Cut")
	if s := p.Stats(); s.Accepted <= accepted {
		t.Fatalf("Stats = %+v, want the driver to have reconnected", s)
	}

	// Cut and Refuse: the server is down until Restore.
	p.Refuse(true)
	p.Cut()
	down, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := find(down); err == nil {
		t.Fatal("find succeeded while the proxy refused every connection")
	}
	if s := p.Stats(); s.Refused == 0 {
		t.Fatalf("Stats = %+v, want the driver to have been refused", s)
	}
	p.Restore()
	mustFind("after Restore from refusing")

	// Blackhole: no error, only silence, until the operation's own timeout.
	p.Blackhole(true)
	held, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := find(held); !mongo.IsTimeout(err) {
		t.Fatalf("find through a partition: %v, want a timeout", err)
	}
	p.Restore()
	mustFind("after Restore from a partition")
}
