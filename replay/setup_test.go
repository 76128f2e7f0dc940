package replay

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// testBundle is one test's database and the insert commands sent to it.
type testBundle struct {
	db      *mongo.Database
	inserts *insertLog
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	log := &insertLog{}
	return &testBundle{db: mongotest.Database(t, mongotest.Options{Monitor: log.monitor()}), inserts: log}
}

// insertLog records every insert command: its collection, its size and the
// time on the clock the test injected (if any) when it was sent.
type insertLog struct {
	mu    sync.Mutex
	clock clock.Nower
	cmds  []insertCmd
}

type insertCmd struct {
	coll string
	docs int
	at   time.Time
}

func (l *insertLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "insert" {
			return
		}
		coll, _ := e.Command.Lookup("insert").StringValueOK()
		docs, _ := e.Command.Lookup("documents").ArrayOK()
		vals, _ := docs.Values()
		l.mu.Lock()
		defer l.mu.Unlock()
		c := insertCmd{coll: coll, docs: len(vals)}
		if l.clock != nil {
			c.at = l.clock.Now()
		}
		l.cmds = append(l.cmds, c)
	}}
}

// into returns the inserts into coll.
func (l *insertLog) into(coll string) []insertCmd {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []insertCmd
	for _, c := range l.cmds {
		if c.coll == coll {
			out = append(out, c)
		}
	}
	return out
}

// allDocs returns a collection's documents in _id order, as canonical
// Extended JSON (which shows each value's type).
func allDocs(t *testing.T, coll *mongo.Collection) []string {
	t.Helper()
	cur, err := coll.Find(t.Context(), bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for cur.Next(t.Context()) {
		b, err := bson.MarshalExtJSON(cur.Current, true, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func insertDocs(t *testing.T, coll *mongo.Collection, docs ...any) {
	t.Helper()
	if _, err := coll.InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes a test input file and returns its path.
func writeTestFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// load runs a whole load (scan, sources, queue) with cfg.
func load(t *testing.T, cfg LoadConfig) (*Loader, *Plan, error) {
	t.Helper()
	l := NewLoader(cfg)
	plan, err := l.Scan(t.Context())
	if err != nil {
		return l, nil, err
	}
	if err := l.LoadSources(t.Context()); err != nil {
		return l, plan, err
	}
	return l, plan, l.LoadQueue(t.Context())
}
