package scoring

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
)

// explainRules has one component of each op, windowed and not, over two
// collections with different user fields.
const explainRules = `
components:
  - {name: activity, collection: user_activity, userField: username, op: sum, field: points, weight: 1, window: 720h}
  - {name: best, collection: user_activity, userField: username, op: max, field: points, weight: 1}
  - {name: days, collection: user_activity, userField: username, op: distinct, field: day, weight: 1}
  - {name: recent, collection: user_activity, userField: username, op: count, weight: 1, window: 24h}
  - {name: posts, collection: posts, userField: author, op: count, weight: 5}
`

// Per user: activityPerUser documents in user_activity, postsPerUser in
// posts, for explainUsers users.
const (
	explainUsers    = 200
	activityPerUser = 10
	postsPerUser    = 5
)

// recomputeRecorded seeds the source collections, builds the index
// docs/query-plans.md recommends for each ({userField: 1, timeField: 1}), and
// returns the commands of one user's recompute.
func recomputeRecorded(t *testing.T) (*mongo.Database, []queryplan.Command) {
	t.Helper()
	rec := &queryplan.Recorder{}
	db := mongotest.Database(t, mongotest.Options{Monitor: rec.Monitor()})
	rules, err := ParseRules("explain", []byte(explainRules))
	if err != nil {
		t.Fatal(err)
	}
	var activity, posts []bson.D
	for i := range explainUsers {
		user := fmt.Sprintf("user%03d", i)
		for j := range activityPerUser {
			activity = append(activity, bson.D{{Key: "username", Value: user}, {Key: "points", Value: int32(j)},
				{Key: "day", Value: int32(j % 3)}, {Key: "at", Value: refreshStart.Add(-time.Duration(j) * 12 * time.Hour)}})
		}
		for range postsPerUser {
			posts = append(posts, bson.D{{Key: "author", Value: user}, {Key: "at", Value: refreshStart}})
		}
	}
	insertDocs(t, db.Collection("user_activity"), activity...)
	insertDocs(t, db.Collection("posts"), posts...)
	for coll, field := range map[string]string{"user_activity": "username", "posts": "author"} {
		if _, err := db.Collection(coll).Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}, {Key: "at", Value: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	r := NewRecomputer(db, rules)
	rec.Take()
	if _, err := r.Recompute(t.Context(), "user007", refreshStart); err != nil {
		t.Fatal(err)
	}
	// Leave out the listCollections that learn each source's collation:
	// once per process, and not a query of the data.
	var cmds []queryplan.Command
	for _, c := range rec.Take() {
		if c.Name != "listCollections" {
			cmds = append(cmds, c)
		}
	}
	return db, cmds
}

// TestComponentQueryShapes: a recompute sends one command per component
// (plus, once per process, the $max attempt on a server without it), each
// selecting the user by equality on the component's user field first, so
// any index that starts with that field bounds it.
func TestComponentQueryShapes(t *testing.T) {
	t.Parallel()
	_, cmds := recomputeRecorded(t)
	if len(cmds) < 5 || len(cmds) > 6 {
		t.Fatalf("%d commands for 5 components", len(cmds))
	}
	for _, c := range cmds {
		var match bson.Raw
		switch c.Name {
		case "aggregate":
			stages, _ := c.Body.Lookup("pipeline").Array().Values()
			match, _ = stages[0].Document().Lookup("$match").DocumentOK()
		case "find":
			match, _ = c.Body.Lookup("filter").DocumentOK()
		}
		user, ok := match.Lookup("username", "$eq").StringValueOK()
		if !ok {
			user, ok = match.Lookup("author", "$eq").StringValueOK()
		}
		if !ok || user != "user007" {
			t.Errorf("%s does not select the user by equality first: %s", c.Name, c.Body)
		}
	}
}

// TestComponentQueryPlans explains each component's query on a real
// MongoDB with the recommended indexes: each reads its user's index keys
// and documents, never another user's.
func TestComponentQueryPlans(t *testing.T) {
	t.Parallel()
	mongotest.RequireMongoDBURI(t)
	db, cmds := recomputeRecorded(t)
	mongotest.RequireMongoDB(t, db)
	for _, c := range cmds {
		explained, err := queryplan.Explainable(c)
		if err != nil {
			t.Fatal(err)
		}
		p, err := queryplan.Explain(t.Context(), db, explained[0])
		if err != nil {
			t.Fatal(err)
		}
		index, n := "username_1_at_1", int64(activityPerUser)
		if c.Collection == "posts" {
			index, n = "author_1_at_1", postsPerUser
		}
		if !p.Uses(index) || p.CollScan() || p.KeysExamined > 2*n+2 || p.DocsExamined > n {
			t.Errorf("%s:\n  %v\n  want %s, at most %d keys and %d documents", c.Body, p, index, 2*n+2, n)
		}
	}
}
