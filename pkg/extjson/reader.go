// Package extjson streams MongoDB Extended JSON (canonical or relaxed, via
// the driver's UnmarshalExtJSON and MarshalExtJSON) in mongoexport's layouts:
// a document a line (its default), a JSON array (--jsonArray, on one line or
// pretty), documents over several lines each (--pretty).
package extjson

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Error is a document that could not be read: its file, line and position.
type Error struct {
	File    string
	Line    int   // line where the document starts, 1-based
	Element int   // position of the document in the file, 1-based
	Err     error // what the driver (or the JSON syntax) said
	Fatal   bool  // no next document to be found (a JSON syntax error outside the line layout)
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s:%d: document %d: %v", e.File, e.Line, e.Element, e.Err)
	if e.Fatal {
		msg += " (cannot resynchronise after a JSON syntax error in this layout)"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Reader yields the documents of one Extended JSON stream.
type Reader struct {
	name    string
	br      *bufio.Reader
	array   bool                     // dec reads a JSON array, not documents back to back
	next    func() (bson.Raw, error) // start, the layout's reader, eof after io.EOF or a Fatal error
	element int                      // documents seen so far, good or bad
	line    int                      // line of the last document returned; the line layout's lines read
	lines   *lineTracker             // array and concatenated layouts
	dec     *json.Decoder            // array and concatenated layouts
}

// NewReader reads documents from r. name appears in errors (a file name).
func NewReader(r io.Reader, name string) *Reader {
	lt := &lineTracker{r: r}
	rd := &Reader{name: name, br: bufio.NewReaderSize(lt, 64<<10), lines: lt}
	rd.next = rd.start
	return rd
}

// Next returns the next document, io.EOF after the last one, or an *Error for
// one that does not parse, after which Next goes on unless it is Fatal.
func (r *Reader) Next() (bson.Raw, error) { return r.next() }

func eof() (bson.Raw, error) { return nil, io.EOF }

// start detects the layout from the first non-blank bytes: '[' opens an array,
// a lone '{' on the first line starts pretty documents, else one a line.
func (r *Reader) start() (bson.Raw, error) {
	b, err := r.br.Peek(r.br.Size())
	b = bytes.TrimLeft(b, " \t\r\n")
	line, _, found := bytes.Cut(b, []byte{'\n'}) // not found in a full buffer: too long for a lone '{'
	r.array = len(b) > 0 && b[0] == '['
	if !r.array && !((found || err != nil) && string(bytes.TrimSpace(line)) == "{") {
		r.lines.off, r.lines.nl = true, nil // lines are counted as they are read
		r.next = r.nextLine
		return r.next()
	}
	// The decoder's offsets start where the buffered reader stands now.
	r.lines.origin = r.lines.pos - int64(r.br.Buffered())
	r.dec, r.next = json.NewDecoder(r.br), r.nextElement
	if r.array {
		if _, err := r.dec.Token(); err != nil {
			r.next = eof
			return nil, &Error{File: r.name, Line: r.lines.lineAt(r.dec.InputOffset()), Element: 1, Err: err, Fatal: true}
		}
	}
	return r.next()
}

func (r *Reader) nextLine() (bson.Raw, error) {
	for {
		line, err := r.br.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			r.next = eof
			return nil, err // io.EOF or a read error
		}
		r.line++
		if line = bytes.TrimSpace(line); len(line) > 0 { // blank lines (a trailing newline, hand edits) are not documents
			r.element++
			return r.parse(line, false)
		}
	}
}

func (r *Reader) nextElement() (bson.Raw, error) {
	if r.array && !r.dec.More() {
		r.next = eof
		if _, err := r.dec.Token(); err != nil { // the closing ']'
			return nil, &Error{File: r.name, Line: r.lines.lineAt(r.dec.InputOffset()), Element: r.element + 1, Err: err, Fatal: true}
		}
		return nil, io.EOF
	}
	var raw json.RawMessage
	err := r.dec.Decode(&raw)
	if errors.Is(err, io.EOF) && !r.array {
		r.next = eof
		return nil, io.EOF
	}
	r.element++
	if err != nil {
		r.next = eof
		at := r.dec.InputOffset()
		if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
			at = se.Offset // where the syntax breaks, in the decoder's offsets
		}
		r.line = r.lines.lineAt(at)
		return nil, &Error{File: r.name, Line: r.line, Element: r.element, Err: err, Fatal: true}
	}
	// The decoder stands just past the value, less the value's own newlines.
	r.line = r.lines.lineAt(r.dec.InputOffset()) - bytes.Count(raw, []byte{'\n'})
	return r.parse(raw, true)
}

// parse converts one JSON value; canonical and relaxed are both accepted.
func (r *Reader) parse(data []byte, decoded bool) (bson.Raw, error) {
	if len(data) == 0 || data[0] != '{' {
		return nil, &Error{File: r.name, Line: r.line, Element: r.element, Err: errors.New("not a JSON object")}
	}
	var doc bson.Raw
	if err := bson.UnmarshalExtJSON(data, false, &doc); err != nil {
		if !decoded && !json.Valid(data) {
			err = fmt.Errorf("not valid JSON: %w", err)
		}
		return nil, &Error{File: r.name, Line: r.line, Element: r.element, Err: err}
	}
	return doc, nil
}

// lineTracker sits under the buffered reader and remembers where the
// newlines it passed are, so an offset json.Decoder (which reads ahead)
// reports becomes a line number, forgetting them once counted.
type lineTracker struct {
	r       io.Reader
	pos     int64   // bytes read from r
	origin  int64   // pos at which the decoder's offset 0 lies
	nl      []int64 // offsets of newlines not yet counted
	counted int     // newlines already counted
	off     bool    // the line layout counts its own
}

func (t *lineTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	for i := 0; i < n && !t.off; i++ {
		if p[i] == '\n' {
			t.nl = append(t.nl, t.pos+int64(i))
		}
	}
	t.pos += int64(n)
	return n, err
}

// lineAt returns the 1-based line of the byte at decoder offset off, which must never decrease.
func (t *lineTracker) lineAt(off int64) int {
	i, _ := slices.BinarySearch(t.nl, t.origin+off) // the newlines before off
	t.counted += i
	t.nl = t.nl[i:]
	return t.counted + 1
}

// File is an input file opened by Open, decompressed if it is gzip.
type File struct {
	io.Reader
	close func() error
	read  byteCounter // bytes read from disk (compressed), for progress
	size  int64
}

// Open opens path for reading, decompressing gzip (known by its magic bytes, whatever the name).
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
	in := &File{close: f.Close, size: st.Size()}
	br := bufio.NewReader(io.TeeReader(f, &in.read))
	in.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		in.Reader, in.close = gz, func() error { return errors.Join(gz.Close(), f.Close()) }
	}
	return in, nil
}

func (f *File) Size() int64 { return f.size }

// BytesRead returns how much of the file on disk has been read; safe to call
// from another goroutine (a progress bar), as are BytesWritten and Docs.
func (f *File) BytesRead() int64 { return f.read.Load() }

func (f *File) Close() error { return f.close() }

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
	finish  func() error // ends the gzip stream, if any
	path    string
	written byteCounter
}

// Create starts writing path, gzip-compressed when the name ends in ".gz".
func Create(path string) (*Output, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, err
	}
	o := &Output{f: f, path: path, finish: func() error { return nil }}
	o.Writer = io.MultiWriter(f, &o.written)
	if strings.HasSuffix(path, ".gz") {
		gz := gzip.NewWriter(o.Writer)
		o.Writer, o.finish = gz, gz.Close
	}
	return o, nil
}

// BytesWritten is the bytes written to disk so far (compressed).
func (o *Output) BytesWritten() int64 { return o.written.Load() }

// Commit finishes the file and gives it its final name.
func (o *Output) Commit() error {
	if err := errors.Join(o.finish(), o.f.Chmod(0o644), o.f.Sync(), o.f.Close()); err != nil {
		os.Remove(o.f.Name())
		return fmt.Errorf("writing %s: %w", o.path, err)
	}
	return os.Rename(o.f.Name(), o.path)
}

// Abort discards the file; a no-op after Commit.
func (o *Output) Abort() {
	o.f.Close()
	os.Remove(o.f.Name())
}

// Writer writes one document a line, as mongoexport does; canonical is lossless
// (relaxed writes int32 and int64 alike: a small int64 comes back an int32).
type Writer struct {
	w         *bufio.Writer
	canonical bool
	docs      atomic.Int64
	bytes     atomic.Int64 // uncompressed
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

func (w *Writer) Flush() error { return w.w.Flush() }
