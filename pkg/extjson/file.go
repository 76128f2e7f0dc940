package extjson

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// File is an input file opened by Open, decompressed if it is gzip.
type File struct {
	io.Reader
	f    *os.File
	gz   *gzip.Reader
	read byteCounter // bytes read from disk (compressed), for progress
	size int64
}

// Open opens path for reading, decompressing a gzip file (recognised by its
// magic bytes, whatever its name).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	in := &File{f: f, size: st.Size()}
	br := bufio.NewReader(io.TeeReader(f, &in.read))
	in.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		in.gz, in.Reader = gz, gz
	}
	return in, nil
}

// Size returns the file's size on disk.
func (f *File) Size() int64 { return f.size }

// BytesRead returns how much of the file on disk has been read; safe to call
// from another goroutine (a progress bar), as are BytesWritten, Docs and Bytes.
func (f *File) BytesRead() int64 { return f.read.Load() }

func (f *File) Close() error {
	var err error
	if f.gz != nil {
		err = f.gz.Close()
	}
	return errors.Join(err, f.f.Close())
}

// byteCounter counts the bytes that pass through a tee.
type byteCounter struct{ atomic.Int64 }

func (c *byteCounter) Write(p []byte) (int, error) {
	c.Add(int64(len(p)))
	return len(p), nil
}

// Output is a file being written by Create, under its final name only once
// Commit succeeds: an interrupted export leaves no file that looks complete.
type Output struct {
	io.Writer
	f       *os.File
	gz      *gzip.Writer
	path    string
	written byteCounter
}

// Create starts writing path, gzip-compressed when the name ends in ".gz".
func Create(path string) (*Output, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, err
	}
	o := &Output{f: f, path: path}
	o.Writer = io.MultiWriter(f, &o.written)
	if strings.HasSuffix(path, ".gz") {
		o.gz = gzip.NewWriter(o.Writer)
		o.Writer = o.gz
	}
	return o, nil
}

// BytesWritten returns the bytes written to disk so far (compressed).
func (o *Output) BytesWritten() int64 { return o.written.Load() }

// Commit finishes the file and gives it its final name.
func (o *Output) Commit() error {
	var err error
	if o.gz != nil {
		err = o.gz.Close()
	}
	err = errors.Join(err, o.f.Sync(), o.f.Close())
	if err != nil {
		os.Remove(o.f.Name())
		return fmt.Errorf("writing %s: %w", o.path, err)
	}
	if err := os.Chmod(o.f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(o.f.Name(), o.path)
}

// Abort discards the file; a no-op after Commit.
func (o *Output) Abort() {
	o.f.Close()
	os.Remove(o.f.Name())
}

// Writer writes one document a line, as mongoexport does (canonical: as
// --jsonFormat=canonical, the lossless choice; relaxed mode writes int32 and
// int64 alike, so a small int64 comes back as an int32).
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

func (w *Writer) Docs() int64 { return w.docs.Load() }

// Bytes returns the uncompressed bytes written so far.
func (w *Writer) Bytes() int64 { return w.bytes.Load() }

func (w *Writer) Flush() error { return w.w.Flush() }
