package extjson

import (
	"bufio"
	"fmt"
	"io"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Writer writes one document a line, as mongoexport does (with
// --jsonFormat=canonical when canonical is set: the lossless choice, as
// relaxed mode writes int32 and int64 alike, and a small int64 comes back as
// an int32).
type Writer struct {
	w         *bufio.Writer
	canonical bool
	docs      atomic.Int64
	bytes     atomic.Int64
}

// NewWriter writes to w; call Flush when done.
func NewWriter(w io.Writer, canonical bool) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), canonical: canonical}
}

// Write appends one document (a bson.Raw, bson.D, map or struct).
func (w *Writer) Write(doc any) error {
	b, err := bson.MarshalExtJSON(doc, w.canonical, false)
	if err != nil {
		return fmt.Errorf("encoding document %d as Extended JSON: %w", w.docs.Load()+1, err)
	}
	b = append(b, '\n')
	if _, err := w.w.Write(b); err != nil {
		return err
	}
	w.docs.Add(1)
	w.bytes.Add(int64(len(b)))
	return nil
}

// Docs returns the documents written so far.
func (w *Writer) Docs() int64 { return w.docs.Load() }

// Bytes returns the uncompressed bytes written so far.
func (w *Writer) Bytes() int64 { return w.bytes.Load() }

func (w *Writer) Flush() error { return w.w.Flush() }
