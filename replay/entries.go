package replay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// QueueScan is what ReadQueue found besides the entries it handed over.
type QueueScan struct {
	Path string // the queue's file
	// Reference is the moment the snapshot stands for: its manifest's
	// time, else the newest entry's enqueue time. Ages count from it.
	Reference time.Time
	Entries   int64 // handed to the callback
	Malformed int64 // no username or no enqueue time: the consumer dead-letters them
	Skipped   int64 // documents that do not parse (only with skipBad)
}

// ReadQueue streams the queue entries of a snapshot, a generated backlog or
// a mongoexport file (anything --in of replay takes), calling fn with each
// well-formed entry's username and enqueue time, read as the consumer reads
// them (createdAt, else the ObjectId's time). queue names the queue's file
// in a directory without a manifest. A document that does not parse stops
// it, with its file and line, unless skipBad.
func ReadQueue(ctx context.Context, in, queue string, skipBad bool, fn func(user string, createdAt time.Time)) (*QueueScan, error) {
	files, err := ResolveInput(in, queue)
	if err != nil {
		return nil, err
	}
	q := &QueueScan{}
	for _, f := range files {
		if f.Queue {
			files, q.Path = []InputFile{f}, f.Path
			break
		}
	}
	if st, err := os.Stat(in); err == nil && st.IsDir() {
		if m, err := ReadManifest(in); err == nil {
			q.Reference = m.CreatedAt
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	var newest time.Time
	p, err := scan(ctx, files, skipBad, nil, func(e entryInfo) {
		if e.username == "" || e.createdAt.IsZero() {
			q.Malformed++
			return
		}
		q.Entries++
		newest = maxTime(newest, e.createdAt)
		fn(e.username, e.createdAt)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the queue of %s: %w", in, err)
	}
	q.Skipped = p.SkippedTotal
	if q.Reference.IsZero() {
		q.Reference = newest
	}
	return q, nil
}
