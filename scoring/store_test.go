package scoring

import (
	"context"
	"errors"
	"maps"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// storeBundle is a Store on a fresh database whose client reports the
// writes it sends, plus a second client ("another process") that tests use
// to race the Store at an exact point.
type storeBundle struct {
	store     *Store
	coll      *mongo.Collection // the Store's collection, through its client
	rival     *mongo.Collection // the same collection through another client
	conflicts atomic.Int64      // OnConflict calls
	inserts   atomic.Int64      // insert commands the Store sent
	updates   atomic.Int64      // update commands the Store sent
	commands  atomic.Int64      // all commands the Store's client sent to the database
	// beforeInsert and beforeUpdate, when set, run just before the Store's
	// client sends that command: the rival writes there to force a conflict.
	beforeInsert, beforeUpdate atomic.Pointer[func()]
}

func setupStore(t *testing.T, cfg StoreConfig) *storeBundle {
	t.Helper()
	b := &storeBundle{}
	var dbName atomic.Value
	dbName.Store("")
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.DatabaseName != dbName.Load() {
			return
		}
		b.commands.Add(1)
		switch e.CommandName {
		case "insert":
			b.inserts.Add(1)
			if f := b.beforeInsert.Load(); f != nil {
				(*f)()
			}
		case "update":
			b.updates.Add(1)
			if f := b.beforeUpdate.Load(); f != nil {
				(*f)()
			}
		}
	}}
	db := mongotest.Database(t, mongotest.Options{Monitor: monitor})
	dbName.Store(db.Name())
	b.coll = db.Collection("user_scores")
	b.rival = mongotest.Client(t, mongotest.Options{}).Database(db.Name()).Collection("user_scores")
	userHook := cfg.OnConflict
	cfg.OnConflict = func() {
		b.conflicts.Add(1)
		if userHook != nil {
			userHook()
		}
	}
	b.store = NewStore(b.coll, cfg)
	// Ask what the server is now: the answer is learnt once per process,
	// and the tests count the commands of a write, not of that probe.
	if err := b.store.cfg.Traits.Probe(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return b
}

// bumpVersion is a rival write: another process updating the document.
func (b *storeBundle) bumpVersion(t *testing.T, username string) {
	_, err := b.rival.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: username}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}}})
	if err != nil {
		t.Errorf("rival update: %v", err)
	}
}

func (b *storeBundle) mustGet(t *testing.T, username string) ScoreDoc {
	t.Helper()
	doc, found, err := b.store.Get(context.Background(), username)
	if err != nil || !found {
		t.Fatalf("Get(%q) = found %v, %v", username, found, err)
	}
	return doc
}

func result(score float64) Result {
	return Result{Score: score, Components: map[string]float64{"activity": score}}
}

func TestStoreInsertThenUpdate(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{})
	ctx := context.Background()

	if _, found, err := b.store.Get(ctx, "alice"); found || err != nil {
		t.Fatalf("Get before any write = found %v, %v; want not found", found, err)
	}
	// Sub-millisecond precision is dropped: BSON dates hold milliseconds.
	first := refreshStart.Add(1500 * time.Microsecond)
	writes := []struct {
		at      time.Time
		res     Result
		outcome WriteOutcome
	}{
		{first, Result{Score: 7, Components: map[string]float64{"a": 2, "b": 1}}, WriteInserted},
		{first.Add(time.Second), Result{Score: 3, Components: map[string]float64{"a": 3}}, WriteUpdated},
		{first.Add(time.Second), Result{Score: 4, Components: map[string]float64{"a": 4}}, WriteUpdated}, // equal time still writes
		{first.Add(2 * time.Second), Result{}, WriteUpdated},
	}
	for i, w := range writes {
		outcome, err := b.store.Write(ctx, "alice", w.res, w.at)
		if err != nil || outcome != w.outcome {
			t.Fatalf("write %d = %v, %v; want %v", i+1, outcome, err, w.outcome)
		}
		want := ScoreDoc{
			Username:    "alice",
			Score:       w.res.Score,
			Components:  cmpOrMap(w.res.Components),
			Version:     int64(i + 1),
			RefreshedAt: w.at.Truncate(time.Millisecond),
		}
		got := b.mustGet(t, "alice")
		got.RefreshedAt = got.RefreshedAt.UTC()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after write %d: %+v, want %+v", i+1, got, want)
		}
	}
	if b.conflicts.Load() != 0 {
		t.Errorf("OnConflict called %d times without any rival", b.conflicts.Load())
	}
}

func cmpOrMap(m map[string]float64) map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	return m
}

func TestStoreWritesTheContractsTypes(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{})
	ctx := context.Background()
	// Whole-number values must still be stored as doubles.
	res := Result{Score: 10, Components: map[string]float64{"posts": 2}}
	for range 2 {
		if _, err := b.store.Write(ctx, "bob", res, refreshStart); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := b.coll.FindOne(ctx, bson.D{{Key: "_id", Value: "bob"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bson.Type{
		"_id":              bson.TypeString,
		"score":            bson.TypeDouble,
		"components":       bson.TypeEmbeddedDocument,
		"components.posts": bson.TypeDouble,
		"version":          bson.TypeInt64,
		"refreshedAt":      bson.TypeDateTime,
	}
	for path, typ := range want {
		v, err := raw.LookupErr(strings.Split(path, ".")...)
		if err != nil || v.Type != typ {
			t.Errorf("%s: %v (err %v), want BSON %v", path, v.Type, err, typ)
		}
	}
}

func TestStoreOlderRecomputeDoesNotOverwrite(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{})
	ctx := context.Background()
	if _, err := b.store.Write(ctx, "carol", result(5), refreshStart); err != nil {
		t.Fatal(err)
	}
	before := b.mustGet(t, "carol")
	outcome, err := b.store.Write(ctx, "carol", result(99), refreshStart.Add(-time.Millisecond))
	if err != nil || outcome != WriteSkippedNewer {
		t.Fatalf("older Write = %v, %v; want WriteSkippedNewer, nil", outcome, err)
	}
	if after := b.mustGet(t, "carol"); !reflect.DeepEqual(after, before) {
		t.Errorf("older Write changed the document: %+v, was %+v", after, before)
	}
}

func TestStoreRetriesConflicts(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		existing    bool // the user has a document before the Write
		race        func(b *storeBundle, t *testing.T)
		wantVersion int64
	}{
		"racing insert": {
			race: func(b *storeBundle, t *testing.T) {
				// Another process inserts between our read and our insert.
				_, err := b.rival.InsertOne(context.Background(), ScoreDoc{Username: "dave", Components: map[string]float64{}, Version: 1, RefreshedAt: refreshStart})
				if err != nil {
					t.Errorf("rival insert: %v", err)
				}
			},
			wantVersion: 2, // rival's insert, then our update
		},
		"racing update": {
			existing: true,
			race: func(b *storeBundle, t *testing.T) {
				b.bumpVersion(t, "dave")
			},
			wantVersion: 3, // our first write, the rival's, then our update
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupStore(t, StoreConfig{BackoffBase: time.Microsecond})
			ctx := context.Background()
			if tc.existing {
				if _, err := b.store.Write(ctx, "dave", result(1), refreshStart); err != nil {
					t.Fatal(err)
				}
			}
			race := func() { // once, before whichever write comes first
				b.beforeInsert.Store(nil)
				b.beforeUpdate.Store(nil)
				tc.race(b, t)
			}
			b.beforeInsert.Store(&race)
			b.beforeUpdate.Store(&race)

			outcome, err := b.store.Write(ctx, "dave", result(42), refreshStart.Add(time.Second))
			if err != nil || outcome != WriteUpdated {
				t.Fatalf("Write = %v, %v; want WriteUpdated after a retry", outcome, err)
			}
			if got := b.conflicts.Load(); got != 1 {
				t.Errorf("OnConflict called %d times, want 1", got)
			}
			doc := b.mustGet(t, "dave")
			if doc.Version != tc.wantVersion || doc.Score != 42 {
				t.Errorf("document = %+v, want version %d and score 42", doc, tc.wantVersion)
			}
		})
	}
}

func TestStoreGivesUpAfterMaxConflicts(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{MaxConflictRetries: 3, BackoffBase: time.Microsecond})
	ctx := context.Background()
	if _, err := b.store.Write(ctx, "erin", result(1), refreshStart); err != nil {
		t.Fatal(err)
	}
	race := func() { b.bumpVersion(t, "erin") } // before every update
	b.beforeUpdate.Store(&race)

	_, err := b.store.Write(ctx, "erin", result(2), refreshStart.Add(time.Second))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Write = %v, want ErrConflict", err)
	}
	if got := b.conflicts.Load(); got != 3 {
		t.Errorf("OnConflict called %d times, want 3", got)
	}
	if got := b.updates.Load(); got != 3 {
		t.Errorf("sent %d updates, want 3", got)
	}
	if doc := b.mustGet(t, "erin"); doc.Version != 1+3 || doc.Score != 1 {
		t.Errorf("document = %+v, want only the rival's 3 bumps on top of version 1", doc)
	}
}

func TestStoreBackoffHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var atCancel atomic.Int64
	var b *storeBundle
	// A backoff of up to an hour: if the wait ignored ctx, the test would hang.
	b = setupStore(t, StoreConfig{BackoffBase: time.Hour, BackoffMax: time.Hour, OnConflict: func() {
		atCancel.Store(b.commands.Load())
		cancel()
	}})
	if _, err := b.store.Write(ctx, "frank", result(1), refreshStart); err != nil {
		t.Fatal(err)
	}
	race := func() { b.bumpVersion(t, "frank") }
	b.beforeUpdate.Store(&race)

	_, err := b.store.Write(ctx, "frank", result(2), refreshStart.Add(time.Second))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrConflict) {
		t.Fatalf("Write = %v, want context.Canceled", err)
	}
	if sent := b.commands.Load() - atCancel.Load(); sent != 0 {
		t.Errorf("sent %d commands after the context was cancelled, want 0", sent)
	}
}

// TestStoreConflictBackoffWaitsOnTheClock: after a version conflict the
// retry waits its jittered backoff on the Store's clock, and goes only once
// that clock has passed it.
func TestStoreConflictBackoffWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewFake(refreshStart)
	const base = time.Second
	b := setupStore(t, StoreConfig{BackoffBase: base, BackoffMax: time.Minute, Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds a test that fails
	defer cancel()
	if _, err := b.store.Write(ctx, "gina", result(1), refreshStart); err != nil {
		t.Fatal(err)
	}
	race := func() { b.beforeUpdate.Store(nil); b.bumpVersion(t, "gina") } // the next update only
	b.beforeUpdate.Store(&race)
	type written struct {
		outcome WriteOutcome
		err     error
	}
	done := make(chan written, 1)
	go func() {
		o, err := b.store.Write(ctx, "gina", result(2), refreshStart.Add(time.Second))
		done <- written{o, err}
	}()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the write never waited on the clock after its conflict: %v", err)
	}
	wait := clk.Pending()[0]
	if wait <= 0 || wait > base {
		t.Fatalf("backoff after the first conflict = %v, want within (0, %v]", wait, base)
	}
	clk.Advance(wait - time.Nanosecond)
	if got := b.updates.Load(); got != 1 || len(clk.Pending()) != 1 {
		t.Fatalf("%d updates and %d waits a nanosecond before the backoff ends; want 1 (the one that conflicted) and 1", got, len(clk.Pending()))
	}
	clk.Advance(time.Nanosecond)
	w := <-done
	if w.err != nil || w.outcome != WriteUpdated {
		t.Fatalf("Write = %v, %v; want WriteUpdated once the backoff passed", w.outcome, w.err)
	}
	if got := b.updates.Load(); got != 2 {
		t.Errorf("sent %d updates, want 2", got)
	}
}

// writeTally counts Write outcomes from concurrent writers.
type writeTally struct {
	mu       sync.Mutex
	outcomes map[WriteOutcome]int
}

func (w *writeTally) add(t *testing.T, outcome WriteOutcome, err error) {
	if err != nil {
		t.Errorf("Write: %v", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.outcomes == nil {
		w.outcomes = map[WriteOutcome]int{}
	}
	w.outcomes[outcome]++
}

func TestStoreConcurrentWriters(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 8, 5
	b := setupStore(t, StoreConfig{BackoffBase: time.Microsecond, MaxConflictRetries: 1000})
	var tally writeTally
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range perWriter {
				outcome, err := b.store.Write(context.Background(), "grace", result(1), refreshStart)
				tally.add(t, outcome, err)
			}
		})
	}
	wg.Wait()

	want := map[WriteOutcome]int{WriteInserted: 1, WriteUpdated: writers*perWriter - 1}
	if !maps.Equal(tally.outcomes, want) {
		t.Errorf("outcomes = %v, want %v", tally.outcomes, want)
	}
	if doc := b.mustGet(t, "grace"); doc.Version != writers*perWriter {
		t.Errorf("version = %d after %d successful writes", doc.Version, writers*perWriter)
	}
	// Every insert or update sent either succeeded or was a conflict.
	if sent, ok := b.inserts.Load()+b.updates.Load(), int64(writers*perWriter)+b.conflicts.Load(); sent != ok {
		t.Errorf("sent %d writes, want %d successes + %d conflicts", sent, writers*perWriter, b.conflicts.Load())
	}
}

func TestStoreNewestRecomputeWins(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 8, 5
	b := setupStore(t, StoreConfig{BackoffBase: time.Microsecond, MaxConflictRetries: 1000})
	var tally writeTally
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				// Interleave ages across writers: writer w's i-th write is k ms old.
				k := i*writers + (w*3)%writers
				outcome, err := b.store.Write(context.Background(), "heidi", result(float64(k)), refreshStart.Add(time.Duration(k)*time.Millisecond))
				tally.add(t, outcome, err)
			}
		})
	}
	wg.Wait()

	const newest = writers*perWriter - 1
	doc := b.mustGet(t, "heidi")
	if doc.Score != newest || !doc.RefreshedAt.Equal(refreshStart.Add(newest*time.Millisecond)) {
		t.Errorf("document = %+v, want the newest recompute (score %d)", doc, newest)
	}
	written := tally.outcomes[WriteInserted] + tally.outcomes[WriteUpdated]
	if tally.outcomes[WriteInserted] != 1 || written+tally.outcomes[WriteSkippedNewer] != writers*perWriter {
		t.Errorf("outcomes = %v, want 1 insert and %d in all", tally.outcomes, writers*perWriter)
	}
	if doc.Version != int64(written) {
		t.Errorf("version = %d after %d writes", doc.Version, written)
	}
}

// TestStoreConcurrentProcesses races Stores of separate clients, as replicas
// of the service would, so only optimistic concurrency keeps writes apart.
func TestStoreConcurrentProcesses(t *testing.T) {
	t.Parallel()
	if os.Getenv(mongotest.EnvURI) == "" {
		// FerretDB 1.24's updateOne finds the matching document and then
		// replaces it by _id, non-atomically, so two processes can both
		// "win" the same version (measured: 128 successful guarded updates
		// moved the version by 22). Within one process userLocks covers it.
		t.Skip("needs a real MongoDB (" + mongotest.EnvURI + "): FerretDB's updateOne is not an atomic compare-and-set")
	}
	const processes, perProcess = 4, 10
	var conflicts atomic.Int64
	var tally writeTally
	var wg sync.WaitGroup
	db := mongotest.Database(t, mongotest.Options{})
	for range processes {
		coll := mongotest.Client(t, mongotest.Options{}).Database(db.Name()).Collection("user_scores")
		store := NewStore(coll, StoreConfig{BackoffBase: time.Microsecond, MaxConflictRetries: 1000, OnConflict: func() { conflicts.Add(1) }})
		wg.Go(func() {
			for range perProcess {
				outcome, err := store.Write(context.Background(), "ivan", result(1), refreshStart)
				tally.add(t, outcome, err)
			}
		})
	}
	wg.Wait()
	doc, _, err := NewStore(db.Collection("user_scores"), StoreConfig{}).Get(context.Background(), "ivan")
	if err != nil || doc.Version != processes*perProcess {
		t.Errorf("version = %d (%v) after %d writes (%d conflicts)", doc.Version, err, processes*perProcess, conflicts.Load())
	}
	if tally.outcomes[WriteInserted] != 1 {
		t.Errorf("outcomes = %v, want exactly one insert", tally.outcomes)
	}
}
