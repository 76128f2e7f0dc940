package scoring

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// ErrConflict is wrapped by Write's error when it gives up after MaxConflictRetries conflicts.
var ErrConflict = errors.New("score document version conflict")

// ErrSuperseded is wrapped by WriteAfter's error when another refresh wrote the document since ReadPrior.
var ErrSuperseded = errors.New("score document written by another refresh since this one read it")

// ScoreDoc is a document of user_scores (docs/contract.md).
type ScoreDoc struct {
	Username    string             `bson:"_id"`
	Score       float64            `bson:"score"`
	Components  map[string]float64 `bson:"components"`
	Version     int64              `bson:"version"`     // incremented by exactly 1 on every write
	RefreshedAt time.Time          `bson:"refreshedAt"` // when the recompute that wrote it began
}

// StoreConfig tunes a Store. The zero value uses the defaults.
type StoreConfig struct {
	MaxConflictRetries int                  // give up after this many conflicts in one Write; default 10
	BackoffBase        time.Duration        // the first retry waits up to this (full jitter); default 5ms
	BackoffMax         time.Duration        // cap on the wait, doubling from BackoffBase; default 500ms
	OnConflict         func()               // called once per version conflict (metrics hook); may be nil
	OnSkip             func(reason string)  // called (and logged) once per write skipped, with SkipNewer; may be nil
	Logger             *slog.Logger         // receives one line per skipped write; nil discards
	Clock              clock.Clock          // what conflict backoffs wait on; nil is the wall clock
	Traits             *servertraits.Traits // shared with the consumer; nil: its own, learnt on the first batched write
}

// SkipNewer is the reason of a write skipped for a document from a later recompute.
const SkipNewer = "newer"

// WriteOutcome says what Write did; 0: no write (Write returned an error).
type WriteOutcome int

// The outcomes of a successful Write.
const (
	WriteInserted     WriteOutcome = iota + 1 // first document of the user, version 1
	WriteUpdated                              // replaced the document, version + 1
	WriteSkippedNewer                         // the stored document came from a newer recompute
)

// Store reads and writes score documents; it is safe for concurrent use. Share one per
// process: it serialises each user's writes (userLocks), which saves conflicts and is needed on FerretDB.
type Store struct {
	coll  *mongo.Collection
	cfg   StoreConfig
	locks userLocks
}

// NewStore returns a Store writing to coll (user_scores).
func NewStore(coll *mongo.Collection, cfg StoreConfig) *Store {
	cfg.MaxConflictRetries = cmp.Or(max(cfg.MaxConflictRetries, 0), 10)
	cfg.BackoffBase = cmp.Or(max(cfg.BackoffBase, 0), 5*time.Millisecond)
	cfg.BackoffMax = max(cmp.Or(max(cfg.BackoffMax, 0), 500*time.Millisecond), cfg.BackoffBase)
	if cfg.OnConflict == nil {
		cfg.OnConflict = func() {}
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Clock = clock.Or(cfg.Clock)
	cfg.Traits = cmp.Or(cfg.Traits, servertraits.New())
	return &Store{coll: coll, cfg: cfg}
}

// Get returns username's score document; found is false when there is none.
func (s *Store) Get(ctx context.Context, username string) (doc ScoreDoc, found bool, err error) {
	noteRoundTrip(ctx)
	switch err = s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: username}}).Decode(&doc); {
	case errors.Is(err, mongo.ErrNoDocuments):
		return ScoreDoc{}, false, nil
	case err != nil:
		return ScoreDoc{}, false, fmt.Errorf("reading score document of %q: %w", username, err)
	}
	return doc, true, nil
}

// Write stores res as username's score from a recompute begun at refreshedAt, under OCC
// (docs/contract.md): read, then insert version 1 or update the version read to version + 1.
// A racing write is a conflict: OnConflict, a jittered exponential backoff, and again from
// the read, up to MaxConflictRetries (then ErrConflict). A document from a recompute begun
// later is left alone (WriteSkippedNewer); an equal refreshedAt is written.
func (s *Store) Write(ctx context.Context, username string, res Result, refreshedAt time.Time) (WriteOutcome, error) {
	unlock, err := s.locks.lock(ctx, username)
	if err != nil {
		return 0, fmt.Errorf("waiting for another write of the score of %q: %w", username, err)
	}
	defer unlock()
	doc := newScoreDoc(username, res, refreshedAt)
	for conflicts := 1; ; conflicts++ {
		cur, found, err := s.Get(ctx, username)
		if err != nil {
			return 0, err
		}
		if found && cur.RefreshedAt.After(doc.RefreshedAt) {
			s.skipped(username, cur.RefreshedAt, doc.RefreshedAt)
			return WriteSkippedNewer, nil
		}
		outcome, err := s.writeOver(ctx, doc, cur, found)
		if !errors.Is(err, errVersionMoved) {
			return outcome, err
		}
		s.cfg.OnConflict()
		if conflicts >= s.cfg.MaxConflictRetries {
			return 0, fmt.Errorf("writing score of %q: gave up after %d version conflicts: %w", username, conflicts, ErrConflict)
		}
		if err := clock.Sleep(ctx, s.cfg.Clock, s.backoff(conflicts)); err != nil {
			return 0, fmt.Errorf("backing off after a version conflict on the score of %q: %w", username, err)
		}
	}
}

// WriteAfter is Write over prior (ReadPrior, read before the recompute), in one round trip: a
// document still at prior's version is replaced whatever its refreshedAt and stamped past it
// (causalAfter); one written since is left alone, with OnConflict and an error wrapping ErrSuperseded.
func (s *Store) WriteAfter(ctx context.Context, prior Prior, username string, res Result, refreshedAt time.Time) (WriteOutcome, error) {
	unlock, err := s.locks.lock(ctx, username)
	if err != nil {
		return 0, fmt.Errorf("waiting for another write of the score of %q: %w", username, err)
	}
	defer unlock()
	cur, found := prior[username]
	outcome, err := s.writeOver(ctx, causalAfter(newScoreDoc(username, res, refreshedAt), cur, found), cur, found)
	if errors.Is(err, errVersionMoved) {
		s.cfg.OnConflict()
		return 0, fmt.Errorf("writing score of %q over version %d: %w", username, cur.Version, ErrSuperseded)
	}
	return outcome, err
}

// newScoreDoc is the document storing res as username's score, unversioned.
func newScoreDoc(username string, res Result, refreshedAt time.Time) ScoreDoc {
	return ScoreDoc{
		Username:   username,
		Score:      res.Score,
		Components: maps.Collect(maps.All(res.Components)), // a copy, never nil: a document, not null
		// BSON dates hold milliseconds: compare what will be stored.
		RefreshedAt: refreshedAt.Truncate(time.Millisecond).UTC(),
	}
}

// Prior holds a refresh's users' score documents (version, refreshedAt) as read
// before its recompute (absent: none). Stamps cannot order two refreshes (each
// replica estimates the server's clock; a later one skipped as older loses an
// event): a document written while the recompute ran makes the refresh recompute.
type Prior map[string]ScoreDoc

// ReadPrior reads users' versions and refreshedAt before their recompute: one
// find per chunk WriteBatch writes (by _id for one user: the _id index on every server).
func (s *Store) ReadPrior(ctx context.Context, users []string) (Prior, error) {
	if len(users) == 1 {
		doc, found, err := s.Get(ctx, users[0])
		if err != nil || !found {
			return Prior{}, err
		}
		return Prior{users[0]: doc}, nil
	}
	prior := Prior{}
	for _, chunk := range sortedChunks(users) {
		docs, err := s.readMany(ctx, chunk, bson.D{{Key: "version", Value: 1}, {Key: "refreshedAt", Value: 1}})
		if err != nil {
			return nil, err
		}
		maps.Copy(prior, docs)
	}
	return prior, nil
}

// causalAfter returns doc stamped 1ms past cur (from a Prior) unless already
// later: every write's refreshedAt stays newer than the one it replaces.
func causalAfter(doc, cur ScoreDoc, found bool) ScoreDoc {
	if found && !cur.RefreshedAt.Before(doc.RefreshedAt) {
		doc.RefreshedAt = cur.RefreshedAt.Add(time.Millisecond)
	}
	return doc
}

// skipped counts and logs a write lost to a newer recompute: correct, but never silent.
func (s *Store) skipped(username string, stored, ours time.Time) {
	if s.cfg.OnSkip != nil {
		s.cfg.OnSkip(SkipNewer)
	}
	s.cfg.Logger.Info("score write skipped: a newer recompute already wrote",
		"user", username, "reason", SkipNewer, "storedRefreshedAt", stored, "refreshedAt", ours)
}

// errVersionMoved reports another writer between our read and our write.
var errVersionMoved = errors.New("version moved")

// writeOver writes doc over cur (absent unless found), guarded by its version.
func (s *Store) writeOver(ctx context.Context, doc ScoreDoc, cur ScoreDoc, found bool) (WriteOutcome, error) {
	noteRoundTrip(ctx)
	if !found {
		doc.Version = 1
		switch _, err := s.coll.InsertOne(ctx, doc); {
		case mongo.IsDuplicateKeyError(err):
			return 0, errVersionMoved
		case err != nil:
			return 0, fmt.Errorf("inserting score document of %q: %w", doc.Username, err)
		}
		return WriteInserted, nil
	}
	doc.Version = cur.Version + 1
	switch r, err := s.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: doc.Username}, {Key: "version", Value: cur.Version}}, scoreSet(doc)); {
	case err != nil:
		return 0, fmt.Errorf("updating score document of %q from version %d: %w", doc.Username, cur.Version, err)
	case r.MatchedCount == 0:
		return 0, errVersionMoved
	}
	return WriteUpdated, nil
}

// scoreSet is the update that writes d over the stored document.
func scoreSet(d ScoreDoc) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{
		{Key: "score", Value: d.Score},
		{Key: "components", Value: d.Components},
		{Key: "refreshedAt", Value: d.RefreshedAt},
		{Key: "version", Value: d.Version},
	}}}
}

// backoff is the wait after the n-th conflict: uniformly random up to BackoffBase·2^(n-1), capped at BackoffMax
// ("full jitter", so writers that collided do not collide again in lockstep); consumer.Backoff follows failures.
func (s *Store) backoff(n int) time.Duration {
	ceiling := s.cfg.BackoffMax
	if n <= 30 && s.cfg.BackoffBase<<(n-1) > 0 { // else it overflowed
		ceiling = min(s.cfg.BackoffBase<<(n-1), ceiling)
	}
	return rand.N(ceiling + 1)
}

// userLocks serialises the writes of one user within a process: it saves the round trips of conflicts
// between them, and keeps writes correct on FerretDB 1.24, whose updateOne is no atomic compare-and-set
// (a find, then a replace by _id): two concurrent updates guarded by the same version can both match.
type userLocks struct {
	mu   sync.Mutex
	held map[string]*userLock
}

type userLock struct {
	slot    chan struct{} // holds a token while the lock is held
	waiters int           // holders and waiters; the entry goes at 0
}

// lock takes users' locks in the order given, each once it is free, until ctx is done (then it
// releases those it took). Several must be sorted and free of repeats (sortedChunks): a holder
// then waits only for a lock later in the order than all it holds, so no cycle of waiting forms.
func (l *userLocks) lock(ctx context.Context, users ...string) (unlock func(), err error) {
	taken := make([]*userLock, 0, len(users))
	unlock = func() {
		for i, ul := range taken {
			<-ul.slot
			l.release(users[i], ul)
		}
	}
	for _, u := range users {
		l.mu.Lock()
		if l.held == nil {
			l.held = map[string]*userLock{}
		}
		ul := l.held[u]
		if ul == nil {
			ul = &userLock{slot: make(chan struct{}, 1)}
			l.held[u] = ul
		}
		ul.waiters++
		l.mu.Unlock()
		select {
		case ul.slot <- struct{}{}:
			taken = append(taken, ul)
		case <-ctx.Done():
			l.release(u, ul)
			unlock()
			return nil, ctx.Err()
		}
	}
	return unlock, nil
}

func (l *userLocks) release(username string, ul *userLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ul.waiters--
	if ul.waiters == 0 {
		delete(l.held, username)
	}
}
