package scoring

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// seedScores writes version 1 of each user's score through the Store.
func (b *storeBundle) seedScores(t *testing.T, at time.Time, users ...string) {
	t.Helper()
	for _, u := range users {
		if _, err := b.store.Write(context.Background(), u, result(1), at); err != nil {
			t.Fatal(err)
		}
	}
}

// raceOnce makes race run once, just before the Store's next write command
// (an update, or the insert of new users' documents where upserts are slow).
func (b *storeBundle) raceOnce(race func()) {
	var once sync.Once
	f := func() {
		once.Do(func() {
			b.beforeUpdate.Store(nil)
			b.beforeInsert.Store(nil)
			race()
		})
	}
	b.beforeUpdate.Store(&f)
	b.beforeInsert.Store(&f)
}

func TestWriteBatch(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{})
	b.seedScores(t, refreshStart, "b", "$gt")
	later := refreshStart.Add(time.Second)
	results := map[string]Result{"a": result(1), "b": result(2), "$gt": result(3), `{"$ne": null}`: {}}
	before := b.commands.Load()

	outcomes, retry, err := b.store.WriteBatch(context.Background(), results, later)
	if err != nil || len(retry) != 0 {
		t.Fatalf("WriteBatch = retry %q, %v", retry, err)
	}
	want := int64(2)
	if !b.store.cfg.Traits.CheapUpserts() {
		want = 3 // new and known users: an insert beside the updates
	}
	if sent := b.commands.Load() - before; sent != want {
		t.Errorf("WriteBatch sent %d commands, want %d (one find, one bulk write, and an insert of new users where upserts are slow)", sent, want)
	}
	wantOutcomes := map[string]WriteOutcome{"a": WriteInserted, "b": WriteUpdated, "$gt": WriteUpdated, `{"$ne": null}`: WriteInserted}
	if !maps.Equal(outcomes, wantOutcomes) {
		t.Errorf("outcomes = %v, want %v", outcomes, wantOutcomes)
	}
	for u, res := range results {
		doc := b.mustGet(t, u)
		wantVersion := int64(1)
		if wantOutcomes[u] == WriteUpdated {
			wantVersion = 2
		}
		if doc.Version != wantVersion || doc.Score != res.Score || !doc.RefreshedAt.Equal(later) || !maps.Equal(doc.Components, cmpOrMap(res.Components)) {
			t.Errorf("score document of %q = %+v, want %+v at version %d", u, doc, res, wantVersion)
		}
	}
}

// TestWriteBatchConflicts races the bulk write: another process writes some
// of the batch's users between the batch's read and its write. Those users
// come back to retry, each counted as a conflict, and nothing is written
// twice or lost.
func TestWriteBatchConflicts(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		present   []string // users with a document (version 1) before the batch
		bump      []string // the rival updates these ...
		insert    []string // ... and inserts these, racing the bulk write
		wantRetry []string
		// mayRetry may come back to retry too: a server that stops an
		// unordered bulk write at its first lost write (FerretDB 1.24)
		// leaves them unattempted.
		mayRetry     []string
		wantOutcomes map[string]WriteOutcome
	}{
		// Sorted last, the lost writes come after the ones that succeed in
		// the bulk write (FerretDB stops at the first lost write).
		"lost writes last": {
			present:      []string{"b", "c", "z"},
			bump:         []string{"z"},
			insert:       []string{"y"},
			wantRetry:    []string{"y", "z"},
			wantOutcomes: map[string]WriteOutcome{"a": WriteInserted, "b": WriteUpdated, "c": WriteUpdated},
		},
		"lost write first": {
			present:      []string{"b", "c"},
			bump:         []string{"b"},
			insert:       []string{"a"},
			wantRetry:    []string{"a", "b"},
			mayRetry:     []string{"c"},
			wantOutcomes: map[string]WriteOutcome{"c": WriteUpdated},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupStore(t, StoreConfig{})
			b.seedScores(t, refreshStart, tc.present...)
			results := map[string]Result{}
			for _, u := range append(append([]string{"a", "b", "c"}, tc.bump...), tc.insert...) {
				results[u] = result(7)
			}
			b.raceOnce(func() {
				for _, u := range tc.bump {
					b.bumpVersion(t, u)
				}
				for _, u := range tc.insert {
					if _, err := b.rival.InsertOne(context.Background(), ScoreDoc{Username: u, Components: map[string]float64{}, Version: 1, RefreshedAt: refreshStart}); err != nil {
						t.Errorf("rival insert: %v", err)
					}
				}
			})

			outcomes, retry, err := b.store.WriteBatch(context.Background(), results, refreshStart.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range tc.wantRetry {
				if !slices.Contains(retry, u) {
					t.Errorf("retry = %q, want it to hold %q", retry, u)
				}
			}
			for _, u := range retry {
				if !slices.Contains(tc.wantRetry, u) && !slices.Contains(tc.mayRetry, u) {
					t.Errorf("retry = %q, want only %q (and maybe %q)", retry, tc.wantRetry, tc.mayRetry)
				}
			}
			if got, want := b.conflicts.Load(), int64(len(tc.bump)+len(tc.insert)); got != want {
				t.Errorf("OnConflict called %d times, want %d", got, want)
			}
			// Users not to retry are settled exactly; users to retry may not be
			// in outcomes.
			for u, o := range outcomes {
				if slices.Contains(retry, u) {
					t.Errorf("%q both settled (%v) and to retry", u, o)
				}
			}
			for u, o := range tc.wantOutcomes {
				if outcomes[u] != o && !slices.Contains(retry, u) {
					t.Errorf("outcome of %q = %v, want %v", u, outcomes[u], o)
				}
			}
			for _, u := range retry { // the lost writes left the rival's document alone
				if doc := b.mustGet(t, u); doc.Score == 7 {
					t.Errorf("%q lost its write but holds its score: %+v", u, doc)
				}
			}
		})
	}
}

// TestRefreshBatchRetriesConflicts checks the end result of a raced batch:
// each user's version moved by exactly one per write (ours and the rival's),
// and every user holds the batch's score.
func TestRefreshBatchRetriesConflicts(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{BackoffBase: time.Microsecond})
	db := b.coll.Database()
	insertDocs(t, db.Collection("user_activity"), bson.D{{Key: "username", Value: "p2"}, {Key: "points", Value: int32(5)}, {Key: "at", Value: refreshStart}})
	b.seedScores(t, refreshStart.Add(-time.Hour), "p1", "p2", "p3")
	b.raceOnce(func() {
		b.bumpVersion(t, "p2")
		if _, err := b.rival.InsertOne(context.Background(), ScoreDoc{Username: "a1", Components: map[string]float64{}, Version: 1, RefreshedAt: refreshStart.Add(-time.Hour)}); err != nil {
			t.Errorf("rival insert: %v", err)
		}
	})
	r := NewRefresher(NewRecomputer(db, DefaultRules()), b.store)
	for u, err := range r.RefreshBatch(context.Background(), []string{"p1", "p2", "p3", "a1", "a2"}, refreshStart) {
		if err != nil {
			t.Errorf("%q: %v", u, err)
		}
	}
	wantVersion := map[string]int64{
		"p1": 2, // seed, batch
		"p2": 3, // seed, rival, retry
		"p3": 2, // seed, batch
		"a1": 2, // rival, retry
		"a2": 1, // batch
	}
	for u, v := range wantVersion {
		doc := b.mustGet(t, u)
		wantScore := 0.0
		if u == "p2" {
			wantScore = 5
		}
		if doc.Version != v || doc.Score != wantScore || !doc.RefreshedAt.Equal(refreshStart) {
			t.Errorf("score document of %q = %+v, want version %d, score %v, refreshed at %v", u, doc, v, wantScore, refreshStart)
		}
	}
	if got := b.conflicts.Load(); got != 2 {
		t.Errorf("OnConflict called %d times, want 2", got)
	}
}

// TestRefreshBatchRecomputesOverARivalAsFresh races a batch with another
// process whose recompute began at the same instant (refreshedAt equal to
// the batch's, at the clock's millisecond resolution) and whose write lands
// between the batch's read and its bulk write. Equal stamps say nothing of
// which recompute read the sources later (each replica's clock is an
// estimate), so the batch neither skips nor overwrites with what it
// computed: it recomputes that user over the rival's document and stamps
// its write past the rival's.
func TestRefreshBatchRecomputesOverARivalAsFresh(t *testing.T) {
	t.Parallel()
	var skips atomic.Int64
	b := setupStore(t, StoreConfig{BackoffBase: time.Microsecond, OnSkip: func(string) { skips.Add(1) }})
	db := b.coll.Database()
	b.seedScores(t, refreshStart.Add(-time.Hour), "q1", "q2")
	b.raceOnce(func() {
		_, err := b.rival.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: "q2"}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: int64(2)}, {Key: "score", Value: 3.0}, {Key: "refreshedAt", Value: refreshStart}}}})
		if err != nil {
			t.Errorf("rival update: %v", err)
		}
	})
	r := NewRefresher(NewRecomputer(db, DefaultRules()), b.store)
	for u, err := range r.RefreshBatch(context.Background(), []string{"q1", "q2"}, refreshStart) {
		if err != nil {
			t.Errorf("%q: %v", u, err)
		}
	}
	if doc := b.mustGet(t, "q1"); doc.Version != 2 {
		t.Errorf("q1 = %+v, want version 2 (seed, batch)", doc)
	}
	if doc := b.mustGet(t, "q2"); doc.Version != 3 || doc.Score != 0 || !doc.RefreshedAt.Equal(refreshStart.Add(time.Millisecond)) {
		t.Errorf("q2 = %+v, want version 3 (seed, rival, recompute), score 0 (its sources), refreshed 1 ms past the rival", doc)
	}
	if got, conflicts := skips.Load(), b.conflicts.Load(); got != 0 || conflicts != 1 {
		t.Errorf("OnSkip called %d times, OnConflict %d; want 0 and 1 (q2)", got, conflicts)
	}
}

func TestWriteSkipsNewerCountedAndLogged(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var skips []string
	b := setupStore(t, StoreConfig{
		OnSkip: func(reason string) { skips = append(skips, reason) },
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	newer := refreshStart.Add(time.Minute)
	b.seedScores(t, newer, "s1", "s2")
	stored := b.mustGet(t, "s1")

	outcomes, retry, err := b.store.WriteBatch(context.Background(), map[string]Result{"s1": result(9), "fresh": result(9)}, refreshStart)
	if err != nil || len(retry) != 0 {
		t.Fatalf("WriteBatch = retry %q, %v", retry, err)
	}
	if want := map[string]WriteOutcome{"s1": WriteSkippedNewer, "fresh": WriteInserted}; !maps.Equal(outcomes, want) {
		t.Errorf("WriteBatch outcomes = %v, want %v", outcomes, want)
	}
	if outcome, err := b.store.Write(context.Background(), "s2", result(9), refreshStart); err != nil || outcome != WriteSkippedNewer {
		t.Errorf("Write = %v, %v; want WriteSkippedNewer", outcome, err)
	}
	if !slices.Equal(skips, []string{SkipNewer, SkipNewer}) {
		t.Errorf("OnSkip calls = %q, want one %q per skipped write", skips, SkipNewer)
	}
	if got := b.mustGet(t, "s1"); got.Version != stored.Version || got.Score != stored.Score {
		t.Errorf("skipped user's document changed: %+v, was %+v", got, stored)
	}
	for _, u := range []string{"s1", "s2"} {
		if !strings.Contains(logs.String(), `"user":"`+u+`","reason":"newer"`) {
			t.Errorf("no log line for the skipped write of %q:\n%s", u, logs.String())
		}
	}
}

// TestWriteBatchWithConcurrentWrites mixes batches and single writes of the
// same users in one process. The user locks serialise them, so every write
// lands: each version equals the number of writes of its user. (Without the
// locks FerretDB's non-atomic guarded update loses writes here.)
func TestWriteBatchWithConcurrentWrites(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{BackoffBase: time.Microsecond, MaxConflictRetries: 1000})
	users := []string{"w1", "w2", "w3", "w4"}
	const rounds = 4
	var writes sync.Map // user -> *atomic.Int64
	count := func(u string) {
		n, _ := writes.LoadOrStore(u, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { // a batch of three of the users, a different three each time
			for i := range rounds {
				batch := map[string]Result{}
				for j := range 3 {
					batch[users[(w+i+j)%len(users)]] = result(1)
				}
				outcomes, retry, err := b.store.WriteBatch(context.Background(), batch, refreshStart)
				if err != nil {
					t.Error(err)
					return
				}
				for u := range outcomes {
					count(u)
				}
				for _, u := range retry {
					if _, err := b.store.Write(context.Background(), u, result(1), refreshStart); err != nil {
						t.Error(err)
					}
					count(u)
				}
			}
		})
		wg.Go(func() { // single writes
			for range rounds {
				u := users[w]
				if _, err := b.store.Write(context.Background(), u, result(1), refreshStart); err != nil {
					t.Error(err)
				}
				count(u)
			}
		})
	}
	wg.Wait()
	for _, u := range users {
		n, _ := writes.Load(u)
		if doc := b.mustGet(t, u); doc.Version != n.(*atomic.Int64).Load() {
			t.Errorf("version of %q = %d after %d writes", u, doc.Version, n.(*atomic.Int64).Load())
		}
	}
	if got := b.conflicts.Load(); got != 0 {
		t.Errorf("%d conflicts between writers of one process, want 0 (the locks serialise them)", got)
	}
}

func TestUserLocksLockAll(t *testing.T) {
	t.Parallel()
	var l userLocks
	// c, the last in order, is held: lock takes a and b (their locks
	// are free and its context live, so no select can go the other way),
	// then waits on c until its context ends, and must let a and b go.
	unlockC, err := l.lock(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, "a", "b", "c"); err == nil {
		t.Fatal("lock of several users with one held until its context ended succeeded")
	}
	unlockC()
	if n := len(l.held); n != 0 {
		t.Fatalf("%d lock entries remain after a failed lock of several users, want 0 (it must release what it took)", n)
	}
	unlock, err := l.lock(context.Background(), "a", "b", "c")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if n := len(l.held); n != 0 {
		t.Errorf("%d lock entries remain after unlock, want 0", n)
	}
}

// TestWriteBatchChunks writes more users than one batch holds.
func TestWriteBatchChunks(t *testing.T) {
	t.Parallel()
	b := setupStore(t, StoreConfig{})
	results := map[string]Result{}
	for _, u := range batchUsers(MaxBatchUsers + 1) {
		results[u] = result(3)
	}
	before := b.commands.Load()
	outcomes, retry, err := b.store.WriteBatch(context.Background(), results, refreshStart)
	if err != nil || len(retry) != 0 || len(outcomes) != len(results) {
		t.Fatalf("WriteBatch = %d outcomes, retry %q, %v; want %d outcomes", len(outcomes), retry, err, len(results))
	}
	if sent := b.commands.Load() - before; sent != 4 {
		t.Errorf("WriteBatch of %d users sent %d commands, want 4 (two chunks of a find and a bulk write)", len(results), sent)
	}
	if n, err := b.coll.CountDocuments(context.Background(), bson.D{}); err != nil || n != int64(len(results)) {
		t.Errorf("%d score documents (%v), want %d", n, err, len(results))
	}
}
