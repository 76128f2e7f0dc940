// Package ops is what the operator commands of the production binary
// (status, deadletters, doctor) ask of MongoDB; cmd/scorerefresh parses
// their flags. Every read is bounded whatever the queue's depth
// (docs/operator-commands.md): counts are exact only up to a threshold and
// estimated past it, figures that need documents read a window of at most N
// of them and say so, and writes go in batches of one round trip each.
package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
)

// SchemaVersion is the version of every --json document: it changes only
// when a field is removed or changes meaning, not when one is added.
const SchemaVersion = 1

// Collections are the collections the operator commands read and write.
type Collections struct {
	DB *mongo.Database
	consumer.Collections
	Scores *mongo.Collection
}

// Env is a connection set up exactly as `scorerefresh run` sets up its own:
// the same configuration, client options (pool, app name) and rules file.
type Env struct {
	Config config.Config
	Colls  Collections
	*app.Service
}

// Open connects as the service would, without serving metrics (an operator
// command must not take the service's port).
func Open(ctx context.Context, cfg config.Config, version, revision string) (*Env, error) {
	cfg.MetricsAddr = ""
	svc, err := app.New(ctx, cfg, app.Options{Version: version, Revision: revision})
	if err != nil {
		return nil, err
	}
	colls := Collections{DB: svc.DB, Collections: svc.Colls, Scores: svc.DB.Collection(cfg.ScoresCollection)}
	return &Env{Config: cfg, Colls: colls, Service: svc}, nil
}

// ServerTime is the server's clock (hello.localTime), the one every replica
// and operator shares, and the local time halfway through the round trip.
func ServerTime(ctx context.Context, db *mongo.Database) (server, local time.Time, rtt time.Duration, err error) {
	start := time.Now()
	raw, err := db.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	rtt = time.Since(start)
	if err != nil {
		return time.Time{}, time.Time{}, rtt, fmt.Errorf("reading the server's clock (hello): %w", err)
	}
	server, ok := raw.Lookup("localTime").TimeOK()
	if !ok || server.IsZero() {
		return time.Time{}, time.Time{}, rtt, fmt.Errorf("reading the server's clock: hello has no localTime date")
	}
	return server, start.Add(rtt / 2), rtt, nil
}

// countUpTo counts filter's documents exactly while they are at most limit,
// reading at most limit+1 index keys; past that it reports limit+1, not exact.
func countUpTo(ctx context.Context, coll *mongo.Collection, filter bson.D, limit int64) (n int64, exact bool, err error) {
	n, err = coll.CountDocuments(ctx, filter, options.Count().SetLimit(limit+1)) // 0 on an error
	return n, err == nil && n <= limit, err
}

// depth is a collection's size: estimatedDocumentCount (collection
// metadata, O(1)) past limit, an exact count at or below it.
func depth(ctx context.Context, coll *mongo.Collection, limit int64) (n int64, exact bool, err error) {
	est, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("estimating the size of %s: %w", coll.Name(), err)
	}
	if est > limit {
		return est, false, nil
	}
	if n, exact, err = countUpTo(ctx, coll, bson.D{}, limit); err != nil {
		return 0, false, fmt.Errorf("counting %s: %w", coll.Name(), err)
	}
	return n, exact, nil // not exact: limit+1, more than estimated
}

// idString renders any _id for a human or a JSON field: an ObjectId as its
// hex, a string as itself, anything else as relaxed Extended JSON.
func idString(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeObjectID:
		return v.ObjectID().Hex()
	case bson.TypeString:
		return v.StringValue()
	}
	return v.String() // "" when missing
}

// findAll reads every document of coll that filter matches; what names the read in its error.
func findAll[T any](ctx context.Context, coll *mongo.Collection, filter any, opts *options.FindOptionsBuilder, what string) ([]T, error) {
	var docs []T
	cur, err := coll.Find(ctx, filter, opts)
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return docs, nil
}

// Filter selects dead letters. The zero Filter selects all of them.
type Filter struct {
	Reasons []string  `json:"reasons,omitempty"` // deadLetter.reason is one of these
	User    string    `json:"user,omitempty"`    // username equals this
	Since   time.Time `json:"since,omitzero"`    // deadLetter.at at or after
	Until   time.Time `json:"until,omitzero"`    // deadLetter.at before
}

func (f Filter) BSON() bson.D {
	q, _ := f.query()
	return q
}

// String describes the filter for a prompt or a summary line.
func (f Filter) String() string {
	_, words := f.query()
	return cmp.Or(strings.Join(words, ", "), "all dead letters")
}

func (f Filter) query() (q bson.D, words []string) {
	q, at, words := bson.D{}, bson.D{}, []string{}
	if len(f.Reasons) > 0 {
		q = append(q, bson.E{Key: "deadLetter.reason", Value: bson.D{{Key: "$in", Value: f.Reasons}}})
		words = append(words, "reason "+strings.Join(f.Reasons, " or "))
	}
	if f.User != "" {
		q = append(q, bson.E{Key: "username", Value: f.User})
		words = append(words, fmt.Sprintf("user %q", f.User))
	}
	if !f.Since.IsZero() {
		at = append(at, bson.E{Key: "$gte", Value: f.Since})
		words = append(words, "dead-lettered since "+stamp(f.Since))
	}
	if !f.Until.IsZero() {
		at = append(at, bson.E{Key: "$lt", Value: f.Until})
		words = append(words, "dead-lettered before "+stamp(f.Until))
	}
	if len(at) > 0 {
		q = append(q, bson.E{Key: "deadLetter.at", Value: at})
	}
	return q, words
}

// CountDeadLetters counts the dead letters matching f, exactly up to upTo.
func CountDeadLetters(ctx context.Context, dead *mongo.Collection, f Filter, upTo int64) (int64, bool, error) {
	n, exact, err := countUpTo(ctx, dead, f.BSON(), upTo)
	if err != nil {
		return 0, false, fmt.Errorf("counting dead letters (%s): %w", f, err)
	}
	return n, exact, nil
}

// ParseTime reads a --since or --until value: an RFC 3339 time
// (2026-03-01T12:00:00Z), a date (2026-03-01, midnight UTC), or a duration
// meaning that long before now (90m, 24h).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration means that long ago and must not be negative", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-03-01T12:00:00Z), a date (2026-03-01) or a duration ago (24h)", s)
}

// DeadLetterRow is one dead letter as `deadletters list` shows it, never the whole document.
type DeadLetterRow struct {
	ID         string     `json:"id"`       // ObjectId hex, a string as is, else Extended JSON
	Username   *string    `json:"username"` // null when not a string
	UserNote   string     `json:"usernameNote,omitempty"`
	CreatedAt  *time.Time `json:"createdAt"`
	Reason     string     `json:"reason"`
	At         time.Time  `json:"at"`
	Attempts   int        `json:"attempts"`
	Error      string     `json:"error"`
	OriginalID string     `json:"originalId,omitempty"` // a renamed copy's original _id
}

// DeadLetterList is `deadletters list --json`.
type DeadLetterList struct {
	SchemaVersion int             `json:"schemaVersion"`
	Kind          string          `json:"kind"` // "deadletters.list"
	Filter        Filter          `json:"filter"`
	Matching      int64           `json:"matching"`
	MatchingExact bool            `json:"matchingExact"`
	Limit         int             `json:"limit"`
	DeadLetters   []DeadLetterRow `json:"deadLetters"`
}

// stored is what the operator commands read of a dead letter or a queue
// entry: never the whole document, which a producer may have made huge.
type stored struct {
	ID         bson.RawValue           `bson:"_id"`
	Username   bson.RawValue           `bson:"username"`
	CreatedAt  bson.RawValue           `bson:"createdAt"`
	DeadLetter consumer.DeadLetterInfo `bson:"deadLetter"`
}

// ListDeadLetters returns the newest limit dead letters matching f, and how
// many match in all (exact up to exactLimit).
func ListDeadLetters(ctx context.Context, dead *mongo.Collection, f Filter, limit int, exactLimit int64) (*DeadLetterList, error) {
	l := &DeadLetterList{SchemaVersion: SchemaVersion, Kind: "deadletters.list", Filter: f, Limit: limit, DeadLetters: []DeadLetterRow{}}
	var err error
	if l.Matching, l.MatchingExact, err = CountDeadLetters(ctx, dead, f, exactLimit); err != nil {
		return nil, err
	}
	docs, err := findAll[stored](ctx, dead, f.BSON(), options.Find().SetSort(bson.D{{Key: "deadLetter.at", Value: -1}}).
		SetLimit(int64(limit)).SetBatchSize(int32(limit)).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}, {Key: "deadLetter", Value: 1}}), fmt.Sprintf("reading %d dead letters (%s)", limit, f))
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		r := DeadLetterRow{
			ID: idString(d.ID), Reason: d.DeadLetter.Reason, At: d.DeadLetter.At,
			Attempts: int(d.DeadLetter.Attempts), Error: clip(d.DeadLetter.Error, 1024), OriginalID: idString(d.DeadLetter.OriginalID),
		}
		if u, ok := d.Username.StringValueOK(); ok {
			r.Username = new(clip(u, 300))
		} else if d.Username.Type == 0 {
			r.UserNote = "missing"
		} else {
			r.UserNote = fmt.Sprintf("%s: %s", d.Username.Type, clip(d.Username.String(), 100))
		}
		if t, ok := d.CreatedAt.TimeOK(); ok {
			r.CreatedAt = &t
		}
		l.DeadLetters = append(l.DeadLetters, r)
	}
	return l, nil
}

// IDCandidates are the _id values an operator's argument may mean: an
// ObjectId given as hex also matches the string, Extended JSON ({"$oid":
// …}, 42, "x") is taken as that value, anything else is a string.
func IDCandidates(arg string) (bson.A, error) {
	if oid, err := bson.ObjectIDFromHex(arg); err == nil {
		return bson.A{oid, arg}, nil
	}
	if strings.HasPrefix(arg, "{") || strings.HasPrefix(arg, `"`) || numeric.MatchString(arg) {
		var doc bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(`{"v":`+arg+`}`), false, &doc); err != nil {
			return nil, fmt.Errorf("reading %s as an Extended JSON value: %w", arg, err)
		}
		if numeric.MatchString(arg) {
			return bson.A{doc.Lookup("v"), arg}, nil // "42" may be a string _id too
		}
		return bson.A{doc.Lookup("v")}, nil
	}
	return bson.A{arg}, nil
}

var numeric = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// ShowDeadLetters returns the whole documents whose _id, or whose original
// _id (a renamed copy), is one of ids.
func ShowDeadLetters(ctx context.Context, dead *mongo.Collection, ids bson.A) ([]bson.Raw, error) {
	in := bson.D{{Key: "$in", Value: ids}}
	return findAll[bson.Raw](ctx, dead, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "_id", Value: in}}, bson.D{{Key: "deadLetter.originalId", Value: in}},
	}}}, options.Find().SetLimit(100), fmt.Sprintf("reading dead letter %v", ids))
}

// WriteExtJSON prints documents as indented relaxed Extended JSON, as mongosh shows them.
func WriteExtJSON(w io.Writer, docs []bson.Raw) error {
	for _, d := range docs {
		b, err := bson.MarshalExtJSONIndent(d, false, false, "", "  ")
		if err != nil {
			return fmt.Errorf("rendering a dead letter as Extended JSON: %w", err)
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}

// Purge deletes the dead letters matching f, at most limit (0: all), in
// batches: one read of batch _ids, one delete command of them. progress is
// called after each batch with the running total.
func Purge(ctx context.Context, dead *mongo.Collection, f Filter, limit int64, batch int, progress func(deleted int64)) (int64, error) {
	var deleted int64
	for limit == 0 || deleted < limit {
		n := min(int64(batch), cmp.Or(limit, math.MaxInt64)-deleted)
		docs, err := findAll[stored](ctx, dead, f.BSON(), options.Find().SetLimit(n).SetBatchSize(int32(n)).SetProjection(bson.D{{Key: "_id", Value: 1}}),
			fmt.Sprintf("reading %d dead letter ids", n))
		if err != nil {
			return deleted, err
		}
		ids := make(bson.A, len(docs))
		for i, d := range docs {
			ids[i] = d.ID
		}
		if len(ids) == 0 {
			return deleted, nil
		}
		gone, err := deleteByID(ctx, dead, ids)
		deleted += gone
		if err != nil {
			return deleted, fmt.Errorf("deleting %d dead letters: %w", len(ids), err)
		}
		if progress != nil {
			progress(deleted)
		}
		if int64(len(ids)) < n {
			return deleted, nil
		}
	}
	return deleted, nil
}

// deleteByID deletes coll's documents with these _ids in one command, a
// statement per _id: plain _id equality is an index lookup on every server
// (FerretDB pushes down nothing else). It counts what it deleted, on an error too.
func deleteByID(ctx context.Context, coll *mongo.Collection, ids bson.A) (int64, error) {
	models := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		models[i] = mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: id}})
	}
	res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if res == nil {
		return 0, err
	}
	return res.DeletedCount, err
}

// Unredrivable are the dead-letter reasons redrive skips unless forced: a
// malformed entry comes straight back as malformed, and a too_large one is
// only a reduced copy of the original (the first KiB of each string).
var Unredrivable = []string{"malformed", "too_large"}

type RedriveOptions struct {
	Filter   Filter
	Limit    int64 // dead letters at most; 0: every match
	Batch    int   // dead letters per round trip (default 500)
	DryRun   bool  // read and report, write nothing
	Force    bool  // also redrive the Unredrivable reasons
	Progress func(RedriveResult)
	// AfterInsert runs between a batch's queue insert and its dead-letter
	// delete, where a crash leaves it half done; an error stops there. For tests.
	AfterInsert func(batch int) error
}

// RedriveResult is what a redrive did (or, dry, would do).
type RedriveResult struct {
	SchemaVersion int              `json:"schemaVersion"`
	Kind          string           `json:"kind"` // "deadletters.redrive"
	DryRun        bool             `json:"dryRun"`
	Filter        Filter           `json:"filter"`
	Total         int64            `json:"total"` // matching dead letters to redrive (exact up to 100,000)
	Read          int64            `json:"read"`
	Requeued      int64            `json:"requeued"`      // inserted into the queue by this run
	AlreadyQueued int64            `json:"alreadyQueued"` // in the queue from an earlier, interrupted run
	Removed       int64            `json:"removed"`       // dead letters deleted
	Conflicts     int64            `json:"conflicts"`     // the queue holds a different entry under the _id: left alone
	Failed        int64            `json:"failed"`        // the queue refused the entry: left alone
	Problems      []string         `json:"problems"`      // the first 20 conflicts and failures, by _id
	Skipped       map[string]int64 `json:"skipped"`       // by reason: not redriven without --force
	Batches       int              `json:"batches"`
}

func (r *RedriveResult) problem(format string, args ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Redrive puts dead letters back in the queue (see Requeued), each under its
// own _id, then deletes them from the dead letters. Crash-safe and idempotent
// without transactions: the insert comes before the delete, so a re-run after
// a crash between them meets a duplicate key, finds its own stamp on the
// queue entry (same deadLetter.at) and only deletes the dead letter; an entry
// without that stamp is someone else's: the dead letter stays, reported. (Were
// the half-done entry consumed before the re-run, it is queued once more: one
// harmless extra refresh.) Each batch costs one read, one insert, one delete,
// and one read of the queue only when some _ids exist.
func Redrive(ctx context.Context, colls Collections, opts RedriveOptions) (RedriveResult, error) {
	opts.Batch = cmp.Or(opts.Batch, 500)
	res := RedriveResult{SchemaVersion: SchemaVersion, Kind: "deadletters.redrive", DryRun: opts.DryRun, Filter: opts.Filter, Problems: []string{}, Skipped: map[string]int64{}}
	now, _, _, err := ServerTime(ctx, colls.DB)
	if err != nil {
		return res, err
	}
	// The operator's filter less the unredrivable reasons (unless forced),
	// counted as skipped, and only dead letters older than the run: one that
	// fails again during the run must not be redriven by it again and again.
	and := func(a, b bson.D) bson.D { return bson.D{{Key: "$and", Value: bson.A{a, b}}} }
	filter := and(opts.Filter.BSON(), bson.D{{Key: "deadLetter.at", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: now}}}}}})
	if !opts.Force {
		for _, reason := range Unredrivable {
			n, _, err := countUpTo(ctx, colls.DeadLetter, and(filter, bson.D{{Key: "deadLetter.reason", Value: reason}}), 100_000)
			if err != nil {
				return res, fmt.Errorf("counting %s dead letters: %w", reason, err)
			}
			if n > 0 {
				res.Skipped[reason] = n
			}
		}
		filter = and(filter, bson.D{{Key: "deadLetter.reason", Value: bson.D{{Key: "$nin", Value: Unredrivable}}}})
	}
	if res.Total, _, err = countUpTo(ctx, colls.DeadLetter, filter, 100_000); err != nil {
		return res, fmt.Errorf("counting dead letters to redrive: %w", err)
	}
	find := options.Find().SetSort(bson.D{{Key: "deadLetter.at", Value: 1}}).SetBatchSize(int32(opts.Batch))
	if opts.Limit > 0 {
		res.Total = min(res.Total, opts.Limit)
		find.SetLimit(opts.Limit)
	}
	if opts.DryRun {
		find.SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "deadLetter.at", Value: 1}})
	}
	cur, err := colls.DeadLetter.Find(ctx, filter, find)
	if err != nil {
		return res, fmt.Errorf("reading dead letters to redrive (%s): %w", opts.Filter, err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	for {
		var batch []bson.Raw
		for len(batch) < opts.Batch && cur.Next(ctx) {
			batch = append(batch, slices.Clone(cur.Current))
		}
		if err := cur.Err(); err != nil {
			return res, fmt.Errorf("reading dead letters to redrive (%s): %w", opts.Filter, err)
		}
		if len(batch) == 0 {
			return res, nil
		}
		if err := redriveBatch(ctx, colls, batch, now, opts, &res); err != nil {
			return res, err
		}
		if opts.Progress != nil {
			opts.Progress(res)
		}
	}
}

// redriveBatch inserts the batch's entries unordered, sorts out duplicate
// keys and deletes the dead letters whose entry is now in the queue.
func redriveBatch(ctx context.Context, colls Collections, batch []bson.Raw, now time.Time, opts RedriveOptions, res *RedriveResult) error {
	var err error
	res.Batches++
	res.Read += int64(len(batch))
	if opts.DryRun {
		_, err = alreadyQueued(ctx, colls.Queue, batch, true, res)
		return err
	}
	docs := make([]any, len(batch))
	for i, d := range batch {
		if docs[i], err = Requeued(d, now); err != nil {
			return err
		}
	}
	failed := map[int]bool{}
	var dups []bson.Raw
	if _, err := colls.Queue.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
			return fmt.Errorf("inserting %d redriven entries into the queue: %w", len(docs), err)
		}
		for _, we := range bwe.WriteErrors {
			failed[we.Index] = true
			if mongo.IsDuplicateKeyError(we) {
				dups = append(dups, batch[we.Index])
				continue
			}
			res.Failed++
			res.problem("%s: the queue refused it: %s", idString(batch[we.Index].Lookup("_id")), we.Message)
		}
	}
	var done bson.A
	for i, d := range batch {
		if !failed[i] {
			done = append(done, d.Lookup("_id"))
			res.Requeued++
		}
	}
	if len(dups) > 0 {
		ours, err := alreadyQueued(ctx, colls.Queue, dups, false, res)
		if err != nil {
			return err
		}
		done = append(done, ours...)
	}
	if opts.AfterInsert != nil {
		if err := opts.AfterInsert(res.Batches); err != nil {
			return err
		}
	}
	if len(done) == 0 {
		return nil
	}
	removed, err := deleteByID(ctx, colls.DeadLetter, done)
	res.Removed += removed
	if err != nil {
		return fmt.Errorf("deleting %d redriven dead letters: %w", len(done), err)
	}
	return nil
}

// alreadyQueued returns the dead letters' _ids an earlier redrive of them put
// in the queue (redrive.deadLetteredAt is their deadLetter.at); any other
// entry there is a conflict. A dry run counts the _ids the queue lacks as requeued.
func alreadyQueued(ctx context.Context, queue *mongo.Collection, dls []bson.Raw, dry bool, res *RedriveResult) (bson.A, error) {
	ids := make(bson.A, len(dls))
	for i, d := range dls {
		ids[i] = d.Lookup("_id")
	}
	docs, err := findAll[bson.Raw](ctx, queue, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "redrive.deadLetteredAt", Value: 1}}), fmt.Sprintf("reading %d queue entries already there", len(ids)))
	if err != nil {
		return nil, err
	}
	stamps := map[string]bson.RawValue{}
	for _, d := range docs {
		stamps[consumer.IDKey(d.Lookup("_id"))] = d.Lookup("redrive", "deadLetteredAt")
	}
	conflict := "the queue holds a different entry under this _id" +
		map[bool]string{false: "; the dead letter stays (redrive it once that entry is processed)"}[dry]
	var ours bson.A
	for i, d := range dls {
		stamp, present := stamps[consumer.IDKey(ids[i].(bson.RawValue))]
		switch want := deadLetteredAt(d); {
		case dry && !present:
			res.Requeued++
		case present && stamp.Equal(want):
			ours = append(ours, ids[i])
			res.AlreadyQueued++
		default:
			res.Conflicts++
			res.problem("%s: %s", idString(ids[i].(bson.RawValue)), conflict)
		}
	}
	return ours, nil
}

// Requeued is the queue entry a dead letter becomes: every original field,
// createdAt set to now, deadLetter removed, and redrive: {originalCreatedAt,
// at, reason, deadLetteredAt, attempts, originalId?}. originalCreatedAt
// survives repeated redrives (the first one's is kept); without a createdAt
// it is the original ObjectId's time, else null.
func Requeued(dl bson.Raw, now time.Time) (bson.Raw, error) {
	elems, err := dl.Elements()
	if err != nil {
		return nil, fmt.Errorf("reading dead letter: %w", err)
	}
	doc := bson.D{}
	for _, e := range elems {
		if k := e.Key(); k != "deadLetter" && k != "redrive" && k != "createdAt" {
			doc = append(doc, bson.E{Key: k, Value: e.Value()})
		}
	}
	stamp := bson.D{
		{Key: "originalCreatedAt", Value: originalCreatedAt(dl)},
		{Key: "at", Value: now},
		{Key: "reason", Value: dl.Lookup("deadLetter", "reason")},
		{Key: "deadLetteredAt", Value: deadLetteredAt(dl)},
		{Key: "attempts", Value: dl.Lookup("deadLetter", "attempts")},
	}
	if orig, err := dl.LookupErr("deadLetter", "originalId"); err == nil {
		stamp = append(stamp, bson.E{Key: "originalId", Value: orig})
	}
	for i := range stamp {
		if v, ok := stamp[i].Value.(bson.RawValue); ok && v.Type == 0 {
			stamp[i].Value = nil // a field the dead letter lacks: null, not an invalid value
		}
	}
	doc = append(doc, bson.E{Key: "createdAt", Value: now}, bson.E{Key: "redrive", Value: stamp})
	raw, err := bson.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding redriven entry %s: %w", idString(dl.Lookup("_id")), err)
	}
	return raw, nil
}

func originalCreatedAt(dl bson.Raw) any {
	if v, err := dl.LookupErr("redrive", "originalCreatedAt"); err == nil && v.Type != bson.TypeNull {
		return v
	}
	if v, err := dl.LookupErr("createdAt"); err == nil && v.Type != bson.TypeNull {
		return v // a non-date createdAt is kept as it was: it is evidence
	}
	for _, id := range []bson.RawValue{dl.Lookup("deadLetter", "originalId"), dl.Lookup("_id")} {
		if oid, ok := id.ObjectIDOK(); ok {
			return oid.Timestamp()
		}
	}
	return nil
}

// deadLetteredAt is the dead letter's deadLetter.at, null when missing: the
// value its redrive stamp records and a re-run compares.
func deadLetteredAt(dl bson.Raw) bson.RawValue {
	v := dl.Lookup("deadLetter", "at")
	if v.Type == 0 {
		return bson.RawValue{Type: bson.TypeNull}
	}
	return v
}
