package consumer

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// BenchmarkAckStatementShape is what naming the user in ack statements
// costs on the test server (FerretDB on SQLite): one op acknowledges 50
// entries of a queue of 5,000 or 20,000, with plain {_id} statements and
// with {_id, username}. FerretDB pushes only a lone _id down to SQLite, and
// decodes the whole collection for any other filter; but SQLite does not
// use its _id index for the pushed-down lookup either, so both scan the
// table and cost about the same, in proportion to the queue.
//
//	go test ./consumer -run '^$' -bench AckStatementShape -benchtime 3x
func BenchmarkAckStatementShape(b *testing.B) {
	const batch = 50
	for _, bc := range []struct {
		depth  int
		byUser bool
	}{{5000, false}, {5000, true}, {20000, false}, {20000, true}} {
		name := fmt.Sprintf("depth%d/%s", bc.depth, map[bool]string{false: "plainID", true: "idAndUsername"}[bc.byUser])
		depth, byUser := bc.depth, bc.byUser
		b.Run(name, func(b *testing.B) {
			queue := mongotest.Database(b, mongotest.Options{}).Collection("score_events")
			base := time.Now()
			docs := make([]any, depth)
			for i := range docs {
				docs[i] = bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "username", Value: fmt.Sprintf("u%03d", i%500)}, {Key: "createdAt", Value: base}}
			}
			if _, err := queue.InsertMany(b.Context(), docs); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				picked := docs[i*batch%depth : i*batch%depth+batch]
				ids, users := make(bson.A, batch), make([]string, batch)
				for j, d := range picked {
					ids[j], users[j] = d.(bson.D)[0].Value, d.(bson.D)[1].Value.(string)
				}
				if !byUser {
					users = nil
				}
				b.StartTimer()
				res, err := queue.BulkWrite(b.Context(), deleteStatements(ids, users...), options.BulkWrite().SetOrdered(false))
				if err != nil || res.DeletedCount != batch {
					b.Fatalf("deleted %d of %d: %v", res.DeletedCount, batch, err)
				}
				b.StopTimer()
				if _, err := queue.InsertMany(b.Context(), picked); err != nil { // back to depth
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
