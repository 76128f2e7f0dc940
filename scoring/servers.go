package scoring

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// serverTrait is a yes/no fact about the server, learnt once on first use.
// Until the server has answered, it is false (the MongoDB behaviour) and
// asked again next time.
type serverTrait struct {
	mu    sync.Mutex
	known bool
	value bool
}

func (t *serverTrait) get(ctx context.Context, client *mongo.Client, probe func(context.Context, *mongo.Client) (bool, error)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known {
		if v, err := probe(ctx, client); err == nil {
			t.known, t.value = true, v
		}
	}
	return t.value
}

// isFerretDB reports whether the server is FerretDB, from buildInfo (run on
// the admin database: it says nothing about the data).
func isFerretDB(ctx context.Context, client *mongo.Client) (bool, error) {
	var info bson.Raw
	if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return false, err
	}
	_, ok := info.Lookup("ferretdbVersion").StringValueOK()
	return ok, nil
}
