package scoring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// ErrConflict is wrapped by the error Write returns when it gives up after
// MaxConflictRetries version conflicts.
var ErrConflict = errors.New("score document version conflict")

// ErrSuperseded is wrapped by the error WriteAfter returns when the score
// document was written since the refresh read it (ReadPrior): by a refresh
// that ran alongside, whose start cannot be ordered against this one's (see
// Prior). The caller recomputes over the document as it is now.
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
	MaxConflictRetries int           // give up after this many conflicts in one Write; default 10
	BackoffBase        time.Duration // the first retry waits up to this (full jitter); default 5ms
	BackoffMax         time.Duration // cap on the wait, doubling from BackoffBase; default 500ms
	OnConflict         func()        // called once per version conflict (metrics hook); may be nil
	// OnSkip is called once per write skipped because the stored document is
	// newer, with the reason (SkipNewer); may be nil. Each skip is also
	// logged to Logger.
	OnSkip func(reason string)
	Logger *slog.Logger // receives one line per skipped write; nil discards
	Clock  clock.Clock  // what conflict backoffs wait on; nil is the wall clock
	// Traits is what the server is (shared with the consumer); nil: traits
	// of the Store's own, learnt on its first batched write.
	Traits *servertraits.Traits
}

// SkipNewer is the reason of a write skipped because the stored document came
// from a recompute that began later.
const SkipNewer = "newer"

// Defaults of StoreConfig.
const (
	DefaultMaxConflictRetries = 10
	DefaultBackoffBase        = 5 * time.Millisecond
	DefaultBackoffMax         = 500 * time.Millisecond
)

// WriteOutcome says what Write did.
type WriteOutcome int

// The outcomes of a successful Write. The zero value means no write happened
// (Write returned an error).
const (
	WriteInserted     WriteOutcome = iota + 1 // first document of the user, version 1
	WriteUpdated                              // replaced the document, version + 1
	WriteSkippedNewer                         // the stored document came from a newer recompute
)

// String names the outcome for logs.
func (o WriteOutcome) String() string {
	switch o {
	case WriteInserted:
		return "inserted"
	case WriteUpdated:
		return "updated"
	case WriteSkippedNewer:
		return "skipped_newer"
	}
	return fmt.Sprintf("WriteOutcome(%d)", int(o))
}

// Store reads and writes score documents. It is safe for concurrent use.
// Share one per process: it also serialises the writes of each user within
// the process (see userLocks), which saves conflicts everywhere and is what
// keeps writes correct on FerretDB.
type Store struct {
	coll  *mongo.Collection
	cfg   StoreConfig
	locks userLocks
}

// NewStore returns a Store writing to coll (user_scores).
func NewStore(coll *mongo.Collection, cfg StoreConfig) *Store {
	if cfg.MaxConflictRetries <= 0 {
		cfg.MaxConflictRetries = DefaultMaxConflictRetries
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	cfg.BackoffMax = max(cfg.BackoffMax, cfg.BackoffBase)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Traits == nil {
		cfg.Traits = servertraits.New()
	}
	return &Store{coll: coll, cfg: cfg}
}

// Get returns username's score document; found is false when there is none.
func (s *Store) Get(ctx context.Context, username string) (doc ScoreDoc, found bool, err error) {
	err = s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: username}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return ScoreDoc{}, false, nil
	}
	if err != nil {
		return ScoreDoc{}, false, fmt.Errorf("reading score document of %q: %w", username, err)
	}
	return doc, true, nil
}

// Write stores res as username's score, computed by a recompute that began at
// refreshedAt, under optimistic concurrency (docs/contract.md): it reads the
// document, then inserts version 1 if there is none or updates the version it
// read to version + 1. A racing insert (duplicate key) or update (no match on
// the version read) is a conflict: Write calls OnConflict, waits a jittered,
// exponentially growing backoff and starts again from the read. After
// MaxConflictRetries conflicts it returns an error wrapping ErrConflict.
//
// If the stored document comes from a recompute that began after refreshedAt,
// Write leaves it alone and returns WriteSkippedNewer: the older result lost,
// which is not an error, but is counted (OnSkip) and logged. An equal
// refreshedAt is written (version + 1).
func (s *Store) Write(ctx context.Context, username string, res Result, refreshedAt time.Time) (WriteOutcome, error) {
	return s.write(ctx, username, res, refreshedAt)
}

// WriteAfter is Write for a refresh that read prior (ReadPrior) before its
// recompute read anything: a document still at the version prior holds was
// written before this refresh began, so it is replaced whatever its
// refreshedAt says, and the refreshedAt written is moved past its own (see
// causalAfter). One round trip, the read having been done. A document
// written since, by a refresh that ran alongside this one, is left alone:
// WriteAfter calls OnConflict and returns an error wrapping ErrSuperseded,
// and the refresh recomputes (Refresher does).
func (s *Store) WriteAfter(ctx context.Context, prior Prior, username string, res Result, refreshedAt time.Time) (WriteOutcome, error) {
	unlock, err := s.locks.lock(ctx, username)
	if err != nil {
		return 0, fmt.Errorf("waiting for another write of the score of %q: %w", username, err)
	}
	defer unlock()
	cur, found := prior[username]
	outcome, err := s.writeOver(ctx, causalAfter(newScoreDoc(username, res, refreshedAt), cur, found), cur, found)
	if errors.Is(err, errVersionMoved) {
		s.conflicted()
		return 0, fmt.Errorf("writing score of %q over version %d: %w", username, cur.Version, ErrSuperseded)
	}
	return outcome, err
}

func (s *Store) write(ctx context.Context, username string, res Result, refreshedAt time.Time) (WriteOutcome, error) {
	unlock, err := s.locks.lock(ctx, username)
	if err != nil {
		return 0, fmt.Errorf("waiting for another write of the score of %q: %w", username, err)
	}
	defer unlock()

	doc := newScoreDoc(username, res, refreshedAt)
	for conflicts := 1; ; conflicts++ {
		outcome, err := s.writeOnce(ctx, doc)
		if !errors.Is(err, errVersionMoved) {
			return outcome, err
		}
		s.conflicted()
		if conflicts >= s.cfg.MaxConflictRetries {
			return 0, fmt.Errorf("writing score of %q: gave up after %d version conflicts: %w", username, conflicts, ErrConflict)
		}
		if err := clock.Sleep(ctx, s.cfg.Clock, s.backoff(conflicts)); err != nil {
			return 0, fmt.Errorf("backing off after a version conflict on the score of %q: %w", username, err)
		}
	}
}

func (s *Store) conflicted() {
	if s.cfg.OnConflict != nil {
		s.cfg.OnConflict()
	}
}

// newScoreDoc is the document storing res as username's score, without its
// version.
func newScoreDoc(username string, res Result, refreshedAt time.Time) ScoreDoc {
	doc := ScoreDoc{
		Username:   username,
		Score:      res.Score,
		Components: maps.Clone(res.Components),
		// BSON dates hold milliseconds: compare what will be stored.
		RefreshedAt: refreshedAt.Truncate(time.Millisecond).UTC(),
	}
	if doc.Components == nil {
		doc.Components = map[string]float64{} // a document, never null
	}
	return doc
}

// Prior holds the score documents of a refresh's users as they were before
// its recompute read anything (ReadPrior): version and refreshedAt, by
// username; a user without a document is absent.
//
// It exists because refreshedAt alone cannot order two refreshes: each
// replica stamps its refreshes with its own estimate of the server's clock,
// and two estimates may disagree by more than the time between one user's
// refresh on one replica and its next on another (under load, or after a
// replica's estimate went stale). Judged by refreshedAt alone, the later
// refresh, the one that read the user's newest documents, is then skipped
// as older and its entries acknowledged without them: an event lost. A
// document read before the recompute began was written before it, so the
// recompute reflects everything that document does, whatever the stamps
// say. A document written while the recompute ran is no better ordered by
// its stamp (after a lease takeover, two replicas refresh one user at
// once): the refresh that meets one recomputes instead, and that recompute,
// begun after the rival's write, reflects everything either saw.
type Prior map[string]ScoreDoc

// ReadPrior reads the version and refreshedAt of users' score documents,
// before their recompute: one round trip per chunk WriteBatch writes (a find
// by _id for one user, which every server answers from the _id index).
func (s *Store) ReadPrior(ctx context.Context, users []string) (Prior, error) {
	if len(users) == 1 {
		noteRoundTrip(ctx)
		doc, found, err := s.Get(ctx, users[0])
		if err != nil || !found {
			return Prior{}, err
		}
		return Prior{users[0]: doc}, nil
	}
	prior := Prior{}
	for _, chunk := range sortedChunks(prior.set(users)) {
		docs, err := s.readMany(ctx, chunk, bson.D{{Key: "version", Value: 1}, {Key: "refreshedAt", Value: 1}})
		if err != nil {
			return nil, err
		}
		maps.Copy(prior, docs)
	}
	return prior, nil
}

// set is users as the keys of a map, for sortedChunks: the chunks
// WriteBatch writes, so each chunk costs its read and its write as before.
func (Prior) set(users []string) map[string]struct{} {
	m := make(map[string]struct{}, len(users))
	for _, u := range users {
		m[u] = struct{}{}
	}
	return m
}

// causalAfter returns doc stamped after cur, a document written before the
// recompute of doc began (read into a Prior): that recompute began after
// cur's write, so after cur's recompute began, whatever the two replicas'
// clock estimates said. A refreshedAt one millisecond past cur's keeps
// every write's refreshedAt newer than the one it replaces, which later
// writers' comparisons rely on.
func causalAfter(doc, cur ScoreDoc, found bool) ScoreDoc {
	if found && !cur.RefreshedAt.Before(doc.RefreshedAt) {
		doc.RefreshedAt = cur.RefreshedAt.Add(time.Millisecond)
	}
	return doc
}

// skipped counts and logs a write left out because the stored document is
// newer: losing to a newer recompute is correct, but never silent.
func (s *Store) skipped(username string, stored, ours time.Time) {
	if s.cfg.OnSkip != nil {
		s.cfg.OnSkip(SkipNewer)
	}
	s.cfg.Logger.Info("score write skipped: a newer recompute already wrote",
		"user", username, "reason", SkipNewer, "storedRefreshedAt", stored, "refreshedAt", ours)
}

// errVersionMoved reports that another writer got in between our read and our
// write.
var errVersionMoved = errors.New("version moved")

func (s *Store) writeOnce(ctx context.Context, doc ScoreDoc) (WriteOutcome, error) {
	noteRoundTrip(ctx)
	cur, found, err := s.Get(ctx, doc.Username)
	if err != nil {
		return 0, err
	}
	if found && cur.RefreshedAt.After(doc.RefreshedAt) {
		s.skipped(doc.Username, cur.RefreshedAt, doc.RefreshedAt)
		return WriteSkippedNewer, nil
	}
	return s.writeOver(ctx, doc, cur, found)
}

// writeOver writes doc over cur (absent unless found), guarded by cur's
// version.
func (s *Store) writeOver(ctx context.Context, doc ScoreDoc, cur ScoreDoc, found bool) (WriteOutcome, error) {
	if !found {
		doc.Version = 1
		noteRoundTrip(ctx)
		_, err := s.coll.InsertOne(ctx, doc)
		if mongo.IsDuplicateKeyError(err) {
			return 0, errVersionMoved
		}
		if err != nil {
			return 0, fmt.Errorf("inserting score document of %q: %w", doc.Username, err)
		}
		return WriteInserted, nil
	}
	noteRoundTrip(ctx)
	r, err := s.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: doc.Username}, {Key: "version", Value: cur.Version}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "score", Value: doc.Score},
			{Key: "components", Value: doc.Components},
			{Key: "refreshedAt", Value: doc.RefreshedAt},
			{Key: "version", Value: cur.Version + 1},
		}}})
	if err != nil {
		return 0, fmt.Errorf("updating score document of %q from version %d: %w", doc.Username, cur.Version, err)
	}
	if r.MatchedCount == 0 {
		return 0, errVersionMoved
	}
	return WriteUpdated, nil
}

// backoff returns the wait before the retry that follows the n-th conflict:
// uniformly random up to BackoffBase·2^(n-1), capped at BackoffMax ("full
// jitter", so writers that collided do not collide again in lockstep).
// Not consumer.Backoff: a pause after a version conflict (contention), not a retry after a failure.
func (s *Store) backoff(n int) time.Duration {
	ceiling := s.cfg.BackoffMax
	if n <= 30 {
		ceiling = min(s.cfg.BackoffBase<<(n-1), s.cfg.BackoffMax)
		if ceiling <= 0 { // overflowed
			ceiling = s.cfg.BackoffMax
		}
	}
	return rand.N(ceiling + 1)
}
