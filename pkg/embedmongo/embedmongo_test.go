package embedmongo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Reads that run out of time must not poison the server's SQLite connections.
// With modernc.org/sqlite v1.32.0 (the version FerretDB 1.24 asks for), a
// query interrupted by its deadline could leave its pooled connection inside
// a transaction: later reads on it answered from that old snapshot (documents
// acknowledged since were missing) and later writes on it were acknowledged
// and never committed. Under a fleet of replicas whose deadlines expire, that
// was wrong scores and a server jammed on "database is locked". go.mod
// requires a release with the fix; this test fails on the old one.
func TestReadsPastTheirDeadlineLoseNoAcknowledgedWrite(t *testing.T) {
	ctx := t.Context()
	srv, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()).SetMaxPoolSize(40))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Disconnect(context.WithoutCancel(ctx)) })
	coll := client.Database("embedmongo_test").Collection("docs")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "seed"}}); err != nil {
		t.Fatal(err)
	}

	const writes = 200
	var (
		mu      sync.Mutex
		acked   []string
		missing []string
		wg      sync.WaitGroup
		done    = make(chan struct{})
	)
	pick := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) == 0 {
			return "", false
		}
		return acked[rand.IntN(len(acked))], true
	}
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < writes; i += 8 {
				id := fmt.Sprintf("doc %d", i)
				if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
					t.Errorf("inserting %s: %v", id, err)
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		})
	}
	// Readers that give up after a millisecond or two: the server gets their
	// deadline as maxTimeMS and interrupts the SQLite query.
	var impatient sync.WaitGroup
	for range 16 {
		impatient.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				id, ok := pick()
				if !ok {
					id = "seed"
				}
				rctx, cancel := context.WithTimeout(ctx, time.Duration(500+rand.IntN(2500))*time.Microsecond)
				err := coll.FindOne(rctx, bson.D{{Key: "_id", Value: id}}).Err()
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) && !mongo.IsTimeout(err) {
					t.Errorf("an impatient read of %s: %v", id, err)
					return
				}
			}
		})
	}
	// Readers with time enough: every document acknowledged before the read
	// began must be found.
	for range 8 {
		wg.Go(func() {
			for range writes / 4 {
				id, ok := pick()
				if !ok {
					id = "seed"
				}
				err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Err()
				if errors.Is(err, mongo.ErrNoDocuments) {
					mu.Lock()
					missing = append(missing, id)
					mu.Unlock()
				} else if err != nil {
					t.Errorf("reading %s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	impatient.Wait()

	if len(missing) > 0 {
		t.Errorf("%d reads did not find a document acknowledged before they began, e.g. %q", len(missing), missing[0])
	}
	n, err := coll.CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(acked) + 1); n != want {
		t.Errorf("the server holds %d documents; %d inserts were acknowledged", n, want)
	}
}
