package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/extjson"
	"github.com/scorerefresh/scorerefresh/planner"
)

// Arrival is --arrival, as the planner's profiles of the same names: max
// inserts every entry at once; original each at its offset from the first
// entry divided by the speed, so producers race the drain.
type Arrival string

const (
	ArrivalMax      = Arrival(planner.ArrivalMax)
	ArrivalOriginal = Arrival(planner.ArrivalOriginal)
)

// DefaultBatchSize is the documents per insertMany (one round trip each).
const DefaultBatchSize = 1000

// pacingSlack: entries due within it go in now, batched, not after a sleep:
// a fast replay makes dozens of round trips a second, not one an entry.
const pacingSlack = 20 * time.Millisecond

// LoadConfig says what to load, where and how.
type LoadConfig struct {
	DB         *mongo.Database
	Queue      string              // the collection the queue file goes into (QUEUE_COLLECTION)
	Files      []InputFile         // one of them the queue, as ResolveInput lists them
	ShiftToNow bool                // move createdAt so the newest entry is now, keeping gaps
	TimeFields map[string][]string // source collection -> date fields shifted with the queue (the rules' time fields)
	Arrival    Arrival             // default ArrivalMax
	Speed      float64             // ArrivalOriginal's speed-up; default 1
	SkipBad    bool                // leave out documents that do not parse, listing them, instead of stopping
	Clock      clock.Clock         // paces arrival; default the wall clock
	Progress   io.Writer           // progress lines; nil: none
}

// Loader loads one replay's files: Scan, then LoadSources, then LoadQueue (which a drain may run alongside).
type Loader struct {
	cfg      LoadConfig
	plan     *Plan
	shift    time.Duration  // how far --shift-to-now moves times
	origin   time.Time      // when the first queue entry is due, for paced arrival
	queue    int            // the queue's index in plan.Files
	stripped map[string]int // how many times each bookkeeping field was removed
	loaded   []atomic.Int64 // documents inserted, by index in plan.Files
}

func NewLoader(cfg LoadConfig) *Loader {
	cfg.Arrival = cmp.Or(cfg.Arrival, ArrivalMax)
	cfg.Speed = cmp.Or(cfg.Speed, 1)
	cfg.Clock = clock.Or(cfg.Clock)
	return &Loader{cfg: cfg, stripped: map[string]int{}}
}

// Scan reads every file once and fails, inserting nothing, on the first bad document unless SkipBad.
func (l *Loader) Scan(ctx context.Context) (*Plan, error) {
	p, err := scan(ctx, l.cfg.Files, l.cfg.SkipBad, l.cfg.Progress, nil)
	var bad *extjson.Error
	switch {
	case errors.As(err, &bad) && !bad.Fatal:
		return nil, fmt.Errorf("%w\nnothing was loaded; fix the line or pass --skip-bad to leave out every such document and list them in the report", err)
	case err != nil && errors.As(err, &bad):
		return nil, fmt.Errorf("%w\nnothing was loaded", err)
	case err != nil:
		return nil, err
	}
	l.plan, l.loaded = p, make([]atomic.Int64, len(p.Files))
	l.queue = slices.IndexFunc(p.Files, func(f FilePlan) bool { return f.Queue })
	if l.cfg.ShiftToNow && !p.Last.IsZero() {
		l.shift = l.cfg.Clock.Now().Sub(p.Last)
	}
	return p, nil
}

// Inserted is the queue entries inserted so far (0 before Scan, or without a queue file);
// safe from any goroutine.
func (l *Loader) Inserted() int64 {
	if l.queue < 0 || l.queue >= len(l.loaded) {
		return 0
	}
	return l.loaded[l.queue].Load()
}

// LoadedSoFar says, file by file, what a load that failed left behind.
func (l *Loader) LoadedSoFar() string {
	var parts []string
	for i, f := range l.plan.Files {
		parts = append(parts, fmt.Sprintf("%s: %d of %d documents", f.Path, l.loaded[i].Load(), f.Documents))
	}
	return strings.Join(parts, "; ")
}

// LoadSources inserts every source file at once (producers write sources
// before they enqueue), moving the date fields of cfg.TimeFields with the
// queue so that windowed components count what they counted at snapshot time.
func (l *Loader) LoadSources(ctx context.Context) error {
	for i, f := range l.plan.Files {
		fields := l.cfg.TimeFields[f.Collection]
		if f.Queue {
			continue
		}
		err := l.load(ctx, i, f.Collection, func(raw bson.Raw) (any, time.Duration, error) {
			if l.shift == 0 || len(fields) == 0 {
				return raw, 0, nil
			}
			var doc bson.D
			if err := bson.Unmarshal(raw, &doc); err != nil {
				return nil, 0, err
			}
			for i, el := range doc {
				if dt, ok := el.Value.(bson.DateTime); ok && slices.Contains(fields, el.Key) {
					doc[i].Value = bson.NewDateTimeFromTime(dt.Time().Add(l.shift))
				}
			}
			return doc, 0, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// LoadQueue inserts the queue file, without bookkeeping fields, at the pace of cfg.Arrival.
func (l *Loader) LoadQueue(ctx context.Context) error {
	if l.queue < 0 || l.queue >= len(l.loaded) {
		return nil // no queue file (or not scanned): nothing to pace
	}
	l.origin = l.cfg.Clock.Now()
	return l.load(ctx, l.queue, l.cfg.Queue, func(raw bson.Raw) (any, time.Duration, error) {
		_, createdAt := QueueEntry(raw)
		at, wait := l.retime(createdAt)
		doc, err := prepareEntry(raw, at, l.stripped)
		return doc, wait, err
	})
}

// retime returns an entry's new createdAt (zero: unchanged) and how long until
// it is due. Paced, it is due at its offset from the first divided by the speed
// and, with --shift-to-now, stamped with it: its age is its wait in this replay.
func (l *Loader) retime(createdAt time.Time) (time.Time, time.Duration) {
	switch {
	case createdAt.IsZero() || l.cfg.Arrival != ArrivalOriginal && l.shift == 0:
		return time.Time{}, 0
	case l.cfg.Arrival != ArrivalOriginal:
		return createdAt.Add(l.shift), 0
	}
	due := l.origin.Add(time.Duration(float64(createdAt.Sub(l.plan.First)) / l.cfg.Speed))
	wait := due.Sub(l.cfg.Clock.Now())
	if !l.cfg.ShiftToNow {
		due = time.Time{}
	}
	return due, wait
}

// load streams file i of the plan into collection into in batches. prep gives
// what to insert and the wait before it: past pacingSlack, flush, then sleep.
func (l *Loader) load(ctx context.Context, i int, into string, prep func(bson.Raw) (any, time.Duration, error)) error {
	f, done, coll := l.plan.Files[i], &l.loaded[i], l.cfg.DB.Collection(into)
	defer StartProgress(l.cfg.Progress, Meter{Label: "loading " + coll.Name(), Unit: "documents",
		Done: done.Load, Total: func() int64 { return f.Documents }})()
	batch := make([]any, 0, DefaultBatchSize)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		// Ordered: a failure leaves in the documents before the first failed.
		_, err := coll.InsertMany(ctx, batch)
		n := int64(len(batch))
		if bwe := (mongo.BulkWriteException{}); errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 {
			n = int64(bwe.WriteErrors[0].Index)
		} else if err != nil {
			n = 0
		}
		done.Add(n)
		batch = batch[:0]
		if err != nil {
			return fmt.Errorf("inserting into %s: %d of %d documents of %s are in, the rest are not: %w\n"+
				"(a duplicate key means the collection already held them: replay into an empty database or pass --drop)",
				coll.Name(), done.Load(), f.Documents, f.Path, err)
		}
		return nil
	}
	err := eachDocument(ctx, f.Path, nil, func(raw []byte, bad *extjson.Error) error {
		if bad != nil {
			return nil // counted and listed by the scan
		}
		doc, wait, err := prep(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		if wait > pacingSlack {
			if err := flush(); err != nil {
				return err
			}
			if err := clock.Sleep(ctx, l.cfg.Clock, wait); err != nil {
				return err
			}
		}
		if batch = append(batch, doc); len(batch) == cap(batch) {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("stopped after %d of %d documents of %s: %w", done.Load(), f.Documents, f.Path, err)
	}
	return err
}

// MaxListedSkips caps the skipped lines a report lists; all are counted.
const MaxListedSkips = 1000

// SkippedLine is a document --skip-bad left out.
type SkippedLine struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// FilePlan is what the scan found in one input file.
type FilePlan struct {
	InputFile
	Documents int64 // documents that parse
	Skipped   int64 // documents that do not (only with SkipBad)
}

// Plan is what reading every file before inserting anything found: a bad
// line stops the load with nothing in, and the queue's time range is known.
type Plan struct {
	Files         []FilePlan
	Entries       int64     // queue entries that parse
	DistinctUsers int       // distinct usernames among them
	First, Last   time.Time // oldest and newest enqueue time (createdAt, else the ObjectId's)
	Untimed       int64     // entries with neither (the consumer dead-letters them)
	OutOfOrder    int64     // entries older than one before them in the file: paced arrival inserts them late
	Skipped       []SkippedLine
	SkippedTotal  int64
}

// scan reads every file, handing each queue entry to each (if not nil); a bad
// document is an error unless skipBad and the reader resynchronises after it.
func scan(ctx context.Context, files []InputFile, skipBad bool, progress io.Writer, each func(user string, createdAt time.Time)) (*Plan, error) {
	p := &Plan{}
	users := map[string]struct{}{}
	for _, f := range files {
		fp := FilePlan{InputFile: f}
		err := eachDocument(ctx, f.Path, progress, func(doc []byte, bad *extjson.Error) error {
			if bad != nil {
				if !skipBad || bad.Fatal {
					return bad
				}
				fp.Skipped++
				p.SkippedTotal++
				if len(p.Skipped) < MaxListedSkips {
					p.Skipped = append(p.Skipped, SkippedLine{File: bad.File, Line: bad.Line, Error: bad.Err.Error()})
				}
				return nil
			}
			fp.Documents++
			if !f.Queue {
				return nil
			}
			user, at := QueueEntry(doc)
			if each != nil {
				each(user, at)
			}
			if user != "" {
				users[user] = struct{}{}
			}
			switch {
			case at.IsZero():
				p.Untimed++
			case p.Last.IsZero() || !at.Before(p.Last):
				p.First, p.Last = cmp.Or(p.First, at), at
			default:
				p.OutOfOrder++
				if at.Before(p.First) {
					p.First = at
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if f.Queue {
			p.Entries = fp.Documents
		}
		p.Files = append(p.Files, fp)
	}
	p.DistinctUsers = len(users)
	return p, nil
}

// eachDocument calls fn for every document of the file at path, good or bad,
// in order, with a progress line over the file's bytes.
func eachDocument(ctx context.Context, path string, progress io.Writer, fn func(doc []byte, bad *extjson.Error) error) error {
	in, err := extjson.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	defer StartProgress(progress, Meter{Label: "checking " + path, Unit: "bytes read", Done: in.BytesRead, Total: in.Size})()
	r := extjson.NewReader(in, path)
	for n := 1; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		doc, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil // also after a Fatal error
		}
		var bad *extjson.Error
		if err != nil && !errors.As(err, &bad) {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if err := fn(doc, bad); err != nil {
			return err
		}
	}
}

// QueueScan is what ReadQueue found besides the entries it handed over.
type QueueScan struct {
	Path      string    // the queue's file
	Reference time.Time // the snapshot's moment, which ages count from: its manifest's time, else the newest entry's
	Entries   int64     // handed to the callback
	Malformed int64     // no username or no enqueue time: the consumer dead-letters them
}

// ReadQueue calls fn with the username and enqueue time (QueueEntry) of each
// well-formed queue entry of anything --in takes; queue is as for
// ResolveInput. A document that does not parse stops it, unless skipBad.
func ReadQueue(ctx context.Context, in, queue string, skipBad bool, fn func(user string, createdAt time.Time)) (*QueueScan, error) {
	files, m, err := ResolveInput(in, queue)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(files, func(f InputFile) bool { return f.Queue }) // ResolveInput found exactly one
	q := &QueueScan{Path: files[i].Path}
	if m != nil {
		q.Reference = m.CreatedAt
	}
	var newest time.Time
	_, err = scan(ctx, files[i:i+1], skipBad, nil, func(user string, at time.Time) {
		if user == "" || at.IsZero() {
			q.Malformed++
			return
		}
		q.Entries++
		if at.After(newest) {
			newest = at
		}
		fn(user, at)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the queue of %s: %w", in, err)
	}
	q.Reference = cmp.Or(q.Reference, newest)
	return q, nil
}

// BookkeepingFields are the top-level fields a consumer (an older version,
// another implementation) may have written to claim an entry, count its
// attempts or back it off; producers never write them (docs/contract.md).
// Replay strips them, and fields starting with BookkeepingPrefix.
var BookkeepingFields = []string{
	"claimToken", "claimedBy", "claimedAt", "claimOwner",
	"leaseUntil", "lockedUntil", "lockedBy",
	"attempts", "notBefore", "nextAttemptAt", "lastError",
	"deadLetter",
}

const BookkeepingPrefix = "processing"

// QueueEntry reads an entry's user and enqueue time as the consumer does
// (docs/contract.md): createdAt, else the ObjectId's timestamp. Either is
// zero when the entry lacks it (the consumer dead-letters it).
func QueueEntry(raw bson.Raw) (user string, createdAt time.Time) {
	user, _ = raw.Lookup("username").StringValueOK()
	if v := raw.Lookup("createdAt"); v.Type == bson.TypeDateTime {
		return user, v.Time()
	}
	if oid, ok := raw.Lookup("_id").ObjectIDOK(); ok {
		createdAt = oid.Timestamp()
	}
	return user, createdAt
}

// prepareEntry returns the entry to insert: without bookkeeping fields
// (counting removals in stripped), its enqueue time set to retimed unless
// zero; one timed by its ObjectId gets a createdAt (an _id cannot move).
func prepareEntry(raw bson.Raw, retimed time.Time, stripped map[string]int) (bson.D, error) {
	var doc bson.D
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	doc = slices.DeleteFunc(doc, func(el bson.E) bool {
		drop := slices.Contains(BookkeepingFields, el.Key) || strings.HasPrefix(el.Key, BookkeepingPrefix)
		if drop {
			stripped[el.Key]++
		}
		return drop
	})
	if _, created := QueueEntry(raw); retimed.IsZero() || created.IsZero() {
		return doc, nil // an untimed entry is malformed: the consumer dead-letters it as it is
	}
	at := bson.NewDateTimeFromTime(retimed)
	if raw.Lookup("createdAt").Type != bson.TypeDateTime {
		return append(doc, bson.E{Key: "createdAt", Value: at}), nil
	}
	for i := range doc {
		if doc[i].Key == "createdAt" {
			doc[i].Value = at
		}
	}
	return doc, nil
}
