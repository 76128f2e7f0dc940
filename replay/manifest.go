package replay

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/backlog"
	"github.com/scorerefresh/scorerefresh/pkg/extjson"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/scoring"
)

const (
	ManifestName   = "manifest.json"           // the file of a snapshot directory saying which file holds which collection
	ManifestFormat = "scorerefresh-snapshot/1" // the manifest's layout
)

// Manifest describes a snapshot directory, written by Snapshot and Generate.
type Manifest struct {
	Format      string         `json:"format"`
	CreatedAt   time.Time      `json:"createdAt"`
	Origin      string         `json:"origin"`                // what was snapshotted, or how it was generated
	Database    string         `json:"database,omitempty"`    // the database snapshotted
	Rules       string         `json:"rules,omitempty"`       // the rules file whose sources were taken
	Consistency string         `json:"consistency,omitempty"` // what the snapshot guarantees
	Files       []ManifestFile `json:"files"`
}

// ManifestFile is one collection's file.
type ManifestFile struct {
	File       string `json:"file"` // relative to the directory
	Collection string `json:"collection"`
	Queue      bool   `json:"queue,omitempty"` // the queue: replayed into QUEUE_COLLECTION
	Documents  int64  `json:"documents"`
	Bytes      int64  `json:"bytes"` // on disk
}

// InputFile is one file to load and where it goes.
type InputFile struct {
	Path       string
	Collection string // source collection name; ignored for the queue
	Queue      bool
}

// ResolveInput lists the files of --in, and their manifest (or nil). A file
// is the queue. A directory is read through its manifest, else each input
// file (optionally .gz) is the collection it is named after, queue the queue.
func ResolveInput(path, queue string) (files []InputFile, m *Manifest, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.IsDir() {
		return []InputFile{{Path: path, Collection: queue, Queue: true}}, nil, nil
	}
	if m, err = ReadManifest(path); err == nil {
		for _, f := range m.Files {
			files = append(files, InputFile{Path: filepath.Join(path, f.File), Collection: f.Collection, Queue: f.Queue})
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	} else {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range ents {
			name := strings.TrimSuffix(e.Name(), ".gz")
			ext := filepath.Ext(name)
			if coll := strings.TrimSuffix(name, ext); !e.IsDir() && slices.Contains([]string{".json", ".jsonl", ".ndjson"}, ext) {
				files = append(files, InputFile{Path: filepath.Join(path, e.Name()), Collection: coll, Queue: coll == queue})
			}
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(files), func(f InputFile) bool { return !f.Queue })); n != 1 {
		return files, m, fmt.Errorf("%s: %d files hold the queue, want exactly one (a %s naming it, or a file named after QUEUE_COLLECTION such as score_events.json)", path, n, ManifestName)
	}
	return files, m, nil
}

func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	var m Manifest
	if err := readJSON(path, &m); err != nil {
		return nil, err
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("%s: format %q, this build reads %q", path, m.Format, ManifestFormat)
	}
	return &m, nil
}

// writeManifest writes m into dir, its origin redacted whatever the caller
// passed: a manifest travels with the data it describes.
func writeManifest(dir string, m *Manifest) error {
	m.Origin = redact.String(m.Origin)
	return writeJSON(filepath.Join(dir, ManifestName), m)
}

// SnapshotConsistency is what a snapshot guarantees with writers running,
// recorded in its manifest and in docs/replay.md.
const SnapshotConsistency = "per-collection scan in _id order, not a point in time: " +
	"queue entries are only inserted and deleted (the consumer's bookkeeping lives in the claims collection), " +
	"so every entry present for the whole scan is written exactly once, and an entry enqueued or acknowledged " +
	"during the scan may or may not be; the queue is read before the sources, and producers write sources " +
	"before they enqueue, so every change a snapshotted entry announces is in the sources"

// SnapshotConfig says what to snapshot and where.
type SnapshotConfig struct {
	DB       *mongo.Database
	Queue    string    // the queue collection
	Sources  []string  // source collections to take as well; empty: the queue only
	Out      string    // a file (the queue only) or a directory (one file per collection and a manifest)
	Gzip     bool      // gzip the files written into a directory (a file is gzipped when its name ends in .gz)
	Relaxed  bool      // relaxed Extended JSON (mongoexport's default); canonical otherwise, which keeps int64 apart from int32
	Origin   string    // recorded in the manifest, e.g. the redacted URI
	Rules    string    // recorded in the manifest
	Progress io.Writer // progress lines; nil: none
}

// Snapshot streams the queue, then the sources, to files, one document a
// line. Into a directory it writes a manifest last: with one, it is complete.
func Snapshot(ctx context.Context, cfg SnapshotConfig) (*Manifest, error) {
	m := &Manifest{Format: ManifestFormat, CreatedAt: time.Now().UTC(), Origin: cfg.Origin, Database: cfg.DB.Name(),
		Rules: cfg.Rules, Consistency: SnapshotConsistency}
	// Sources need a directory; else an existing one or a trailing slash says so.
	st, err := os.Stat(cfg.Out)
	dir := len(cfg.Sources) > 0 || strings.HasSuffix(filepath.ToSlash(cfg.Out), "/") || err == nil && st.IsDir()
	colls, path := []string{cfg.Queue}, func(string) string { return cfg.Out }
	if dir {
		if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
			return nil, err
		}
		colls, path = append(colls, cfg.Sources...), func(name string) string { return filepath.Join(cfg.Out, name+jsonExt(cfg.Gzip)) }
	}
	for i, name := range colls {
		if i > 0 && name == cfg.Queue {
			continue
		}
		f, err := writeFile(path(name), name, !cfg.Relaxed, func(w *extjson.Writer, bytes func() int64) error {
			return Export(ctx, cfg.DB.Collection(name), w, bytes, path(name), cfg.Progress)
		})
		if err != nil {
			return nil, err
		}
		f.Queue = i == 0
		if !dir {
			f.File = cfg.Out
		}
		m.Files = append(m.Files, f)
	}
	if !dir {
		return m, nil
	}
	return m, writeManifest(cfg.Out, m)
}

// jsonExt is the extension of a directory's files.
func jsonExt(gz bool) string {
	if gz {
		return ".json.gz"
	}
	return ".json"
}

// writeFile writes coll's file at path with fill (which flushes w), committing it if fill succeeds.
func writeFile(path, coll string, canonical bool, fill func(w *extjson.Writer, bytes func() int64) error) (ManifestFile, error) {
	mf := ManifestFile{File: filepath.Base(path), Collection: coll}
	out, err := extjson.Create(path)
	if err != nil {
		return mf, err
	}
	defer out.Abort()
	w := extjson.NewWriter(out, canonical)
	if err := fill(w, out.BytesWritten); err != nil {
		return mf, err
	}
	if err := out.Commit(); err != nil {
		return mf, err
	}
	mf.Documents, mf.Bytes = w.Docs(), out.BytesWritten()
	return mf, nil
}

// Export streams every document of coll to w in _id order, flushed, with a
// progress line (bytes: what w's destination took). dest names it in errors.
func Export(ctx context.Context, coll *mongo.Collection, w *extjson.Writer, bytes func() int64, dest string, progress io.Writer) error {
	total, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return fmt.Errorf("counting %s: %w", coll.Name(), err)
	}
	defer StartProgress(progress, Meter{Label: "snapshot " + coll.Name(), Unit: "documents", Done: w.Docs, Bytes: bytes,
		Total: func() int64 { return total }})()
	// Sorting on _id walks the _id index: no in-memory sort, and _id never
	// changes, so no document is met twice (see SnapshotConsistency).
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(1000))
	if err != nil {
		return fmt.Errorf("reading %s: %w", coll.Name(), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	for cur.Next(ctx) {
		if err := w.Write(cur.Current); err != nil {
			return fmt.Errorf("%s: %w", dest, err)
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("reading %s after %d documents: %w", coll.Name(), w.Docs(), err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", dest, err)
	}
	return nil
}

// GenerateConfig describes a synthetic backlog.
type GenerateConfig struct {
	Shape       Shape
	Entries     int            // queue entries
	Users       int            // users to draw from (user-00000 .. ); the shape decides how many appear
	Rules       *scoring.Rules // the source data matches these rules' components
	Seed        uint64         // same seed, same files
	Span        time.Duration  // the entries' enqueue times spread over this; default 10m
	End         time.Time      // the newest entry's createdAt; default now
	DocsPerUser int            // source documents per user and collection, on average; default 2
	Out         string         // directory to write
	Gzip        bool
	Queue       string // the queue's file name (without extension); default score_events
	Origin      string // recorded in the manifest (the command line)
	Progress    io.Writer
}

// Generate writes a synthetic snapshot: the queue, source documents shaped
// for cfg.Rules for every user it names, and a manifest. The same seed and
// End give the same files; memory grows with users, not entries.
func Generate(cfg GenerateConfig) (*Manifest, error) {
	if cfg.Entries <= 0 || cfg.Users <= 0 {
		return nil, fmt.Errorf("entries and users must be positive (got %d and %d)", cfg.Entries, cfg.Users)
	}
	cfg.DocsPerUser = cmp.Or(cfg.DocsPerUser, 2)
	cfg.Queue = cmp.Or(cfg.Queue, "score_events")
	cfg.End = cmp.Or(cfg.End, time.Now()).UTC().Truncate(time.Millisecond)
	cfg.Rules = cmp.Or(cfg.Rules, scoring.DefaultRules())
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	// One seeded source, drawn from in a fixed order: queue, then collections.
	rnd, used, ext := rand.New(rand.NewPCG(cfg.Seed, 0x5c0e)), make([]bool, cfg.Users), jsonExt(cfg.Gzip)
	m := &Manifest{Format: ManifestFormat, CreatedAt: cfg.End, Origin: cfg.Origin, Rules: cfg.Rules.Source}
	gen := backlog.New(backlog.Spec{Shape: cfg.Shape, Entries: cfg.Entries, Users: cfg.Users, Hot: backlog.FirehoseShare, Span: cfg.Span, End: cfg.End}, rnd)
	f, err := generateFile(filepath.Join(cfg.Out, cfg.Queue+ext), cfg.Queue, int64(cfg.Entries), cfg.Progress, func(yield func(any) bool) {
		for range cfg.Entries {
			e := gen.Next()
			used[e.User] = true
			// Jitter within the step keeps times in file order, as a snapshot
			// taken in _id order of ObjectIds minted at enqueue time has them.
			at := e.At.Add(time.Duration(rnd.Int64N(int64(max(gen.Step()/2, 1)))))
			if !yield(bson.D{{Key: "_id", Value: objectID(rnd, at)}, {Key: "username", Value: userName(e.User)},
				{Key: "createdAt", Value: bson.NewDateTimeFromTime(at)}, {Key: "kind", Value: "generated"}, {Key: "shape", Value: string(cfg.Shape)}}) {
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	f.Queue = true
	m.Files = append(m.Files, f)
	// Each collection: 1 to 2·DocsPerUser-1 documents per user the queue names.
	for _, coll := range cfg.Rules.Collections() {
		comps := slices.DeleteFunc(slices.Clone(cfg.Rules.Components), func(c scoring.Component) bool { return c.Collection != coll })
		f, err := generateFile(filepath.Join(cfg.Out, coll+ext), coll, 0, cfg.Progress, func(yield func(any) bool) {
			for user, named := range used {
				if !named {
					continue
				}
				for range 1 + rnd.IntN(2*cfg.DocsPerUser-1) {
					if !yield(sourceDoc(rnd, comps, userName(user), cfg.End, objectID(rnd, cfg.End))) {
						return
					}
				}
			}
		})
		if err != nil {
			return nil, err
		}
		m.Files = append(m.Files, f)
	}
	return m, writeManifest(cfg.Out, m)
}

// sourceDoc is a document every component reading its collection counts for
// user: numbers for sum and max, a few values for distinct, a time in the window.
func sourceDoc(rnd *rand.Rand, comps []scoring.Component, user string, end time.Time, id bson.ObjectID) bson.D {
	doc := bson.D{{Key: "_id", Value: id}}
	set := func(k string, v any) {
		if !slices.ContainsFunc(doc, func(e bson.E) bool { return e.Key == k }) {
			doc = append(doc, bson.E{Key: k, Value: v})
		}
	}
	for _, c := range comps {
		set(c.UserField, user)
		window := 24 * time.Hour
		if c.Window > 0 {
			window = min(window, c.Window/2)
		}
		set(cmp.Or(c.TimeField, scoring.DefaultTimeField), bson.NewDateTimeFromTime(end.Add(-time.Duration(rnd.Int64N(int64(window))))))
		switch c.Op {
		case scoring.OpSum, scoring.OpMax:
			set(c.Field, int32(1+rnd.IntN(10)))
		case scoring.OpDistinct:
			set(c.Field, fmt.Sprintf("v%d", rnd.IntN(5)))
		}
	}
	return doc
}

// objectID mints an ObjectId for at from the seeded source (reproducible).
func objectID(rnd *rand.Rand, at time.Time) bson.ObjectID {
	var id bson.ObjectID
	binary.BigEndian.PutUint32(id[:4], uint32(at.Unix()))
	binary.BigEndian.PutUint64(id[4:], rnd.Uint64())
	return id
}

// generateFile writes docs to path: total of them, or an unknown number when total is 0.
func generateFile(path, coll string, total int64, progress io.Writer, docs iter.Seq[any]) (ManifestFile, error) {
	stop := func() {}
	mf, err := writeFile(path, coll, true, func(w *extjson.Writer, bytes func() int64) error {
		stop = StartProgress(progress, Meter{Label: "generating " + coll, Unit: "documents", Done: w.Docs, Bytes: bytes,
			Total: func() int64 { return total }})
		for doc := range docs {
			if err := w.Write(doc); err != nil {
				return err
			}
		}
		return w.Flush()
	})
	stop() // once the file is complete
	return mf, err
}

// Shape is the distribution of users over a generated backlog.
type Shape = backlog.Shape

// The shapes of `backlog generate --shape`.
const (
	ShapeFirehose = backlog.Firehose
	ShapeDiverse  = backlog.Diverse
	ShapeZipf     = backlog.Zipf
	ShapeMixed    = backlog.Mixed
)

// Shapes lists every shape, for usage text and validation.
var Shapes = []Shape{ShapeFirehose, ShapeDiverse, ShapeZipf, ShapeMixed}

// ParseShape validates a --shape value.
func ParseShape(s string) (Shape, error) {
	if slices.Contains(Shapes, Shape(s)) {
		return Shape(s), nil
	}
	return "", fmt.Errorf("unknown shape %q: want one of %v", s, Shapes)
}

// userName is the username of user i; user 0 is the firehose.
func userName(i int) string { return fmt.Sprintf("user-%05d", i) }
