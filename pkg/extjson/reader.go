// Package extjson reads and writes MongoDB Extended JSON documents in the
// layouts mongoexport writes, streaming, in constant memory: one document a
// line (its default), canonical or relaxed; one JSON array of documents
// (--jsonArray), on one line or pretty-printed; documents over several lines
// each (--pretty). Every conversion goes through the driver's
// bson.UnmarshalExtJSON and bson.MarshalExtJSON.
package extjson

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Layout is how documents are laid out in a file.
type Layout int

// The layouts a Reader recognises from the file's first bytes.
const (
	LayoutLines        Layout = iota // one document per line
	LayoutArray                      // a JSON array of documents
	LayoutConcatenated               // documents back to back, each over several lines
)

// Error is a document that could not be read: its file, line and position.
type Error struct {
	File    string
	Line    int   // line where the document starts, 1-based
	Element int   // position of the document in the file, 1-based
	Err     error // what the driver (or the JSON syntax) said
	// Fatal: the reader cannot find the next document (a JSON syntax error
	// in an array or a multi-line layout). In the line layout none is.
	Fatal bool
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
	layout  Layout
	started bool
	done    bool
	element int           // documents seen so far, good or bad
	line    int           // line of the last document returned
	next    int           // line layout: number of the next line to read
	lines   *lineTracker  // array and concatenated layouts
	dec     *json.Decoder // array and concatenated layouts
}

// NewReader reads documents from r. name appears in errors (a file name).
func NewReader(r io.Reader, name string) *Reader {
	lt := &lineTracker{r: r}
	return &Reader{name: name, br: bufio.NewReaderSize(lt, 64<<10), lines: lt, next: 1}
}

// Next returns the next document, io.EOF after the last one, or an *Error for
// one that does not parse, after which Next goes on unless it is Fatal.
func (r *Reader) Next() (bson.Raw, error) {
	if r.done {
		return nil, io.EOF
	}
	if !r.started {
		if err := r.start(); err != nil {
			r.done = true
			return nil, err
		}
	}
	if r.layout == LayoutLines {
		return r.nextLine()
	}
	return r.nextElement()
}

// start detects the layout: a '[' opens an array, a first line that is a
// lone '{' starts pretty-printed documents, anything else is one a line.
func (r *Reader) start() error {
	r.started = true
	b, err := r.br.ReadByte()
	for ; err == nil && strings.IndexByte(" \t\r\n", b) >= 0; b, err = r.br.ReadByte() {
		if b == '\n' {
			r.next++
		}
	}
	if err != nil {
		return err // io.EOF for an input of blanks, as for an empty one
	}
	r.br.UnreadByte()
	if b == '[' {
		r.layout = LayoutArray
	} else if string(r.firstLine()) == "{" {
		r.layout = LayoutConcatenated
	}
	if r.layout == LayoutLines {
		r.lines.stop() // lines are counted as they are read
		return nil
	}
	// The decoder's offsets start where the buffered reader stands now.
	r.lines.origin = r.lines.pos - int64(r.br.Buffered())
	r.dec = json.NewDecoder(r.br)
	if r.layout == LayoutArray {
		if _, err := r.dec.Token(); err != nil {
			return &Error{File: r.name, Line: r.next, Element: 1, Err: err, Fatal: true}
		}
	}
	return nil
}

// firstLine returns the first line without consuming it, or nil when it is
// longer than the buffer (so not a lone '{').
func (r *Reader) firstLine() []byte {
	b, err := r.br.Peek(r.br.Size())
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	} else if err == nil {
		return nil
	}
	return bytes.TrimSpace(b) // err != nil: the file is one line
}

func (r *Reader) nextLine() (bson.Raw, error) {
	for {
		line, err := r.br.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			r.done = true
			return nil, err // io.EOF or a read error
		}
		n := r.next
		r.next++
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue // blank lines (a trailing newline, hand edits) are not documents
		}
		r.element++
		r.line = n
		return r.parse(line, false)
	}
}

func (r *Reader) nextElement() (bson.Raw, error) {
	if r.layout == LayoutArray && !r.dec.More() {
		r.done = true
		if _, err := r.dec.Token(); err != nil { // the closing ']'
			return nil, &Error{File: r.name, Line: r.lines.lineAt(r.dec.InputOffset()), Element: r.element + 1, Err: err, Fatal: true}
		}
		return nil, io.EOF
	}
	var raw json.RawMessage
	err := r.dec.Decode(&raw)
	if errors.Is(err, io.EOF) && r.layout == LayoutConcatenated {
		r.done = true
		return nil, io.EOF
	}
	r.element++
	if err != nil {
		r.done = true
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
// newlines it passed are, so an offset reported by json.Decoder (which reads
// ahead) becomes a line number. It forgets newlines once counted: its memory
// is bounded by the decoder's read-ahead.
type lineTracker struct {
	r       io.Reader
	pos     int64   // bytes read from r
	origin  int64   // pos at which the decoder's offset 0 lies
	nl      []int64 // offsets of newlines not yet counted
	counted int     // newlines already counted
	off     bool
}

func (t *lineTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	for i := 0; !t.off; {
		j := bytes.IndexByte(p[i:n], '\n')
		if j < 0 {
			break
		}
		t.nl = append(t.nl, t.pos+int64(i+j))
		i += j + 1
	}
	t.pos += int64(n)
	return n, err
}

// stop ends tracking (the line layout counts lines itself).
func (t *lineTracker) stop() { t.off, t.nl = true, nil }

// lineAt returns the 1-based line of the byte at the decoder's offset off,
// which must never decrease from call to call.
func (t *lineTracker) lineAt(off int64) int {
	i, _ := slices.BinarySearch(t.nl, t.origin+off) // the newlines before off
	t.counted += i
	t.nl = t.nl[i:]
	return t.counted + 1
}
