package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/extjson"
)

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

// Plan is the result of reading every input file once before anything is
// inserted, so that a bad line stops the load with nothing half-loaded, and
// so --shift-to-now and --arrival original know the queue's time range.
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

// scan reads every file through, handing each queue entry to each (if not
// nil). A bad document is an error naming its file and line, unless skipBad
// and the reader can resynchronise after it.
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
	p := StartProgress(progress, Meter{Label: "checking " + path, Unit: "bytes read", Done: in.BytesRead, Total: in.Size})
	defer p.Stop()
	r := extjson.NewReader(in, path)
	for n := 1; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		doc, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		var bad *extjson.Error
		if err != nil && !errors.As(err, &bad) {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if err := fn(doc, bad); err != nil {
			return err
		}
		if bad != nil && bad.Fatal {
			return nil
		}
	}
}

// QueueScan is what ReadQueue found besides the entries it handed over.
type QueueScan struct {
	Path string // the queue's file
	// Reference is the moment the snapshot stands for: its manifest's
	// time, else the newest entry's enqueue time. Ages count from it.
	Reference time.Time
	Entries   int64 // handed to the callback
	Malformed int64 // no username or no enqueue time: the consumer dead-letters them
}

// ReadQueue streams the queue entries of anything replay's --in takes,
// calling fn with each well-formed entry's username and enqueue time, read as
// the consumer reads them; queue is as for ResolveInput. A document that does
// not parse stops it, with its file and line, unless skipBad.
func ReadQueue(ctx context.Context, in, queue string, skipBad bool, fn func(user string, createdAt time.Time)) (*QueueScan, error) {
	files, m, err := ResolveInput(in, queue)
	if err != nil {
		return nil, err
	}
	q := &QueueScan{}
	if m != nil {
		q.Reference = m.CreatedAt
	}
	for _, f := range files {
		if f.Queue {
			files, q.Path = []InputFile{f}, f.Path
			break
		}
	}
	var newest time.Time
	_, err = scan(ctx, files, skipBad, nil, func(user string, at time.Time) {
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
	if q.Reference.IsZero() {
		q.Reference = newest
	}
	return q, nil
}

// BookkeepingFields are the top-level queue-entry fields a consumer (an
// older version, another implementation) may have written to claim an entry,
// count its attempts or back it off; producers never write them
// (docs/contract.md). Replay strips them, and every field whose name starts
// with BookkeepingPrefix, so every entry is pending again.
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

// prepareEntry returns the entry as it is inserted: without bookkeeping
// fields (each removal counted in stripped), and with its enqueue time
// changed to retimed when that is not zero. An entry whose time came from
// its ObjectId gets an explicit createdAt, since an _id cannot move.
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
