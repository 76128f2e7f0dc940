package replay

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/internal/backlog"
	"github.com/scorerefresh/scorerefresh/pkg/extjson"
	"github.com/scorerefresh/scorerefresh/scoring"
)

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

// Generate writes a synthetic snapshot: the queue, then source documents for
// every user the queue names, shaped for cfg.Rules, and a manifest. It is
// deterministic for a seed and End, and streams: memory grows with users,
// not entries.
func Generate(cfg GenerateConfig) (*Manifest, error) {
	if cfg.Entries <= 0 || cfg.Users <= 0 {
		return nil, fmt.Errorf("entries and users must be positive (got %d and %d)", cfg.Entries, cfg.Users)
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	// One seeded source, drawn from in a fixed order (queue, then each
	// collection): the same seed gives the same files.
	rnd, used, ext := rand.New(rand.NewPCG(cfg.Seed, 0x5c0e)), make([]bool, cfg.Users), ".json"
	if cfg.Gzip {
		ext += ".gz"
	}
	m := &Manifest{Format: ManifestFormat, CreatedAt: cfg.End, Origin: cfg.Origin, Rules: cfg.Rules.Source}
	// The queue: entries spread evenly over the span up to End, users drawn
	// by the shape.
	gen := backlog.New(backlog.Spec{Shape: cfg.Shape, Entries: cfg.Entries, Users: cfg.Users, Hot: backlog.FirehoseShare, Span: cfg.Span, End: cfg.End}, rnd)
	f, err := generateFile(filepath.Join(cfg.Out, cfg.Queue+ext), cfg.Queue, cfg.Entries, cfg.Progress, func() (any, bool) {
		e := gen.Next()
		used[e.User] = true
		// Jitter within the step keeps times in file order, as a snapshot
		// taken in _id order of ObjectIds minted at enqueue time has them.
		at := e.At.Add(time.Duration(rnd.Int64N(int64(max(gen.Step()/2, 1)))))
		return bson.D{{Key: "_id", Value: objectID(rnd, at)}, {Key: "username", Value: userName(e.User)},
			{Key: "createdAt", Value: bson.NewDateTimeFromTime(at)}, {Key: "kind", Value: "generated"}, {Key: "shape", Value: string(cfg.Shape)}}, true
	})
	if err != nil {
		return nil, err
	}
	f.Queue = true
	m.Files = append(m.Files, f)
	// Each collection: 1 to 2·DocsPerUser-1 documents for each user the
	// queue names, in user order.
	for _, coll := range cfg.Rules.Collections() {
		comps := slices.DeleteFunc(slices.Clone(cfg.Rules.Components), func(c scoring.Component) bool { return c.Collection != coll })
		user, left := -1, 0
		f, err := generateFile(filepath.Join(cfg.Out, coll+ext), coll, -1, cfg.Progress, func() (any, bool) {
			for left == 0 {
				if user++; user >= cfg.Users {
					return nil, false
				}
				if used[user] {
					left = 1 + rnd.IntN(2*cfg.DocsPerUser-1)
				}
			}
			left--
			return sourceDoc(rnd, comps, userName(user), cfg.End, objectID(rnd, cfg.End)), true
		})
		if err != nil {
			return nil, err
		}
		m.Files = append(m.Files, f)
	}
	return m, writeManifest(cfg.Out, m)
}

// withDefaults fills what cfg leaves unset.
func (cfg GenerateConfig) withDefaults() GenerateConfig {
	cfg.Span = cmp.Or(cfg.Span, 10*time.Minute)
	cfg.DocsPerUser = cmp.Or(cfg.DocsPerUser, 2)
	cfg.Queue = cmp.Or(cfg.Queue, "score_events")
	if cfg.End.IsZero() {
		cfg.End = time.Now()
	}
	cfg.End = cfg.End.UTC().Truncate(time.Millisecond)
	if cfg.Rules == nil {
		cfg.Rules = scoring.DefaultRules()
	}
	return cfg
}

// sourceDoc is one document every component reading its collection counts
// for user: numeric fields for sum and max, a few distinct values for
// distinct, and a time well inside the window.
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

// objectID mints an ObjectId for at from the seeded source, so generated
// files are reproducible.
func objectID(rnd *rand.Rand, at time.Time) bson.ObjectID {
	var id bson.ObjectID
	binary.BigEndian.PutUint32(id[:4], uint32(at.Unix()))
	binary.BigEndian.PutUint64(id[4:], rnd.Uint64())
	return id
}

// generateFile writes the documents next yields (until it says false) to
// path: total of them, or an unknown number when total is negative. Its
// progress line ends once the file is complete.
func generateFile(path, coll string, total int, progress io.Writer, next func() (any, bool)) (ManifestFile, error) {
	var p *Progress
	mf, err := writeFile(path, coll, true, func(w *extjson.Writer, bytes func() int64) error {
		p = StartProgress(progress, Meter{Label: "generating " + coll, Unit: "documents", Done: w.Docs, Bytes: bytes,
			Total: func() int64 { return int64(max(total, 0)) }})
		for i := 0; total < 0 || i < total; i++ {
			doc, ok := next()
			if !ok {
				break
			}
			if err := w.Write(doc); err != nil {
				return err
			}
		}
		return w.Flush()
	})
	if p != nil {
		p.Stop()
	}
	mf.File = filepath.Base(path)
	return mf, err
}

// Shape is the distribution of users over a generated backlog, drawn by
// internal/backlog, whose constants say what each one means.
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
