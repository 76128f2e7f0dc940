package extjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// sample holds every BSON type a snapshot must carry through unchanged.
func sample(t *testing.T) []bson.D {
	t.Helper()
	dec, err := bson.ParseDecimal128("1234.5600")
	if err != nil {
		t.Fatal(err)
	}
	oid, _ := bson.ObjectIDFromHex("65e1c2a0f1d2c3b4a5968778")
	at := time.Date(2024, 3, 1, 12, 0, 0, 123e6, time.UTC)
	return []bson.D{
		{{Key: "_id", Value: oid}, {Key: "username", Value: "alice"}, {Key: "createdAt", Value: bson.NewDateTimeFromTime(at)},
			{Key: "n32", Value: int32(7)}, {Key: "n64", Value: int64(7)}, {Key: "big", Value: int64(1) << 53}, {Key: "f", Value: 2.0},
			{Key: "dec", Value: dec}, {Key: "old", Value: bson.NewDateTimeFromTime(time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))},
			{Key: "nested", Value: bson.D{{Key: "list", Value: bson.A{int32(1), "two", bson.D{{Key: "three", Value: int64(3)}}}}, {Key: "nil", Value: nil}}},
			{Key: "uuid", Value: bson.Binary{Subtype: bson.TypeBinaryUUID, Data: []byte("0123456789abcdef")}},
			{Key: "ts", Value: bson.Timestamp{T: 1700000000, I: 3}}, {Key: "re", Value: bson.Regex{Pattern: "^a", Options: "i"}}},
		{{Key: "_id", Value: "string-id"}, {Key: "username", Value: "bob \"quoted\"\nnewline"}, {Key: "ok", Value: true}},
	}
}

func marshalAll(t *testing.T, docs []bson.D, canonical bool) [][]byte {
	t.Helper()
	var out [][]byte
	for _, d := range docs {
		b, err := bson.MarshalExtJSON(d, canonical, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// layouts renders docs the ways mongoexport does: default, --jsonArray, and
// --jsonArray --pretty (tab-indented, ",\n" between documents), and --pretty.
func layouts(t *testing.T, docs []bson.D, canonical bool) map[string]string {
	t.Helper()
	js := marshalAll(t, docs, canonical)
	var pretty [][]byte
	for _, b := range js {
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "\t"); err != nil {
			t.Fatal(err)
		}
		pretty = append(pretty, buf.Bytes())
	}
	return map[string]string{
		"lines":        string(bytes.Join(js, []byte("\n"))) + "\n",
		"array":        "[" + string(bytes.Join(js, []byte(","))) + "]\n",
		"pretty array": "[" + string(bytes.Join(pretty, []byte(",\n"))) + "]\n\n",
		"pretty":       string(bytes.Join(pretty, []byte("\n"))) + "\n",
	}
}

func readAll(t *testing.T, r *Reader) []bson.D {
	t.Helper()
	var docs []bson.D
	for {
		raw, err := r.Next()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		var d bson.D
		if err := bson.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
}

func sameDocs(t *testing.T, got, want []bson.D) {
	t.Helper()
	g, _ := bson.MarshalExtJSON(bson.D{{Key: "d", Value: got}}, true, false)
	w, _ := bson.MarshalExtJSON(bson.D{{Key: "d", Value: want}}, true, false)
	if !bytes.Equal(g, w) {
		t.Errorf("documents differ\n got: %s\nwant: %s", g, w)
	}
}

func TestEveryLayoutAndModeReadsBackTheSameTypedDocuments(t *testing.T) {
	t.Parallel()
	want := sample(t)
	wantLayout := map[string]Layout{"lines": LayoutLines, "array": LayoutArray, "pretty array": LayoutArray, "pretty": LayoutConcatenated}
	for _, canonical := range []bool{true, false} {
		for name, text := range layouts(t, want, canonical) {
			r := NewReader(strings.NewReader(text), "f.json")
			got := readAll(t, r)
			if r.Layout() != wantLayout[name] {
				t.Errorf("%s: layout %v, want %v", name, r.Layout(), wantLayout[name])
			}
			if canonical {
				sameDocs(t, got, want)
			} else if len(got) != len(want) {
				t.Errorf("relaxed %s: %d documents, want %d", name, len(got), len(want))
			}
		}
	}
}

func TestWriterRoundTripsCanonically(t *testing.T) {
	t.Parallel()
	want := sample(t)
	var buf bytes.Buffer
	w := NewWriter(&buf, true)
	for _, d := range want {
		if err := w.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if w.Docs() != 2 || w.Bytes() != int64(buf.Len()) || strings.Count(buf.String(), "\n") != 2 {
		t.Errorf("docs %d bytes %d, buffer %d bytes %d lines", w.Docs(), w.Bytes(), buf.Len(), strings.Count(buf.String(), "\n"))
	}
	sameDocs(t, readAll(t, NewReader(&buf, "x")), want)
}

func TestBadLineNamesFileAndLineAndCanBeSkipped(t *testing.T) {
	t.Parallel()
	text := "\n" + `{"username":"a"}` + "\n\n" + `{"username":` + "\n" + `{"createdAt":{"$date":"yesterday"}}` + "\n" + `[1]` + "\n" + `{"username":"b"}`
	r := NewReader(strings.NewReader(text), "queue.json")
	type hit struct {
		line int
		ok   bool
	}
	var hits []hit
	for {
		_, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var e *Error
		if err != nil && (!errors.As(err, &e) || e.Fatal || e.File != "queue.json" || e.Line != r.Line()) {
			t.Fatalf("unexpected error %v", err)
		}
		hits = append(hits, hit{r.Line(), err == nil})
	}
	want := []hit{{2, true}, {4, false}, {5, false}, {6, false}, {7, true}}
	if len(hits) != len(want) {
		t.Fatalf("got %v, want %v", hits, want)
	}
	for i := range want {
		if hits[i] != want[i] {
			t.Errorf("document %d: got %+v, want %+v", i+1, hits[i], want[i])
		}
	}
}

func TestArrayElementErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		text      string
		wantLine  int
		fatal     bool
		goodAfter int
	}{
		"invalid Extended JSON is skippable": {"[\n{\"a\":1},\n{\"d\":{\"$date\":\"x\"}},\n{\"a\":2}\n]", 3, false, 1},
		"a syntax error stops the file":      {"[\n{\"a\":1},\n{\"a\":,\n{\"a\":2}\n]", 3, true, 0},
		"a pretty document's bad value":      {"{\n\t\"a\": 1\n}\n{\n\t\"d\": {\n\t\t\"$numberLong\": \"x\"\n\t}\n}\n{\n\t\"a\": 2\n}\n", 4, false, 1},
	}
	for name, tc := range tests {
		r := NewReader(strings.NewReader(tc.text), "a.json")
		if _, err := r.Next(); err != nil {
			t.Fatalf("%s: first document: %v", name, err)
		}
		_, err := r.Next()
		var e *Error
		if !errors.As(err, &e) || e.Line != tc.wantLine || e.Fatal != tc.fatal || e.Element != 2 {
			t.Errorf("%s: got %#v, want line %d fatal %v", name, err, tc.wantLine, tc.fatal)
			continue
		}
		good := 0
		for {
			_, err := r.Next()
			if err != nil {
				break
			}
			good++
		}
		if good != tc.goodAfter {
			t.Errorf("%s: %d documents after the bad one, want %d", name, good, tc.goodAfter)
		}
	}
}

func TestGzipByNameOnWriteAndByMagicOnRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "q.json.gz")
	out, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(out, true)
	for i := range 1000 {
		if err := w.Write(bson.D{{Key: "i", Value: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file visible before Commit: %v", err)
	}
	if err := out.Commit(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Size() >= w.Bytes()/2 {
		t.Errorf("%d bytes on disk for %d of JSON: not compressed", st.Size(), w.Bytes())
	}
	// Renamed without .gz, it is still recognised.
	plain := filepath.Join(dir, "renamed.json")
	if err := os.Rename(path, plain); err != nil {
		t.Fatal(err)
	}
	in, err := Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if got := len(readAll(t, NewReader(in, plain))); got != 1000 {
		t.Errorf("read %d documents, want 1000", got)
	}
	if in.BytesRead() != in.Size() {
		t.Errorf("read %d of %d bytes", in.BytesRead(), in.Size())
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := Create(filepath.Join(dir, "q.json"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(out, "{}\n")
	out.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}

func TestEmptyInputs(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{"empty": "", "blank": "\n \n", "empty array": "[]\n"} {
		if _, err := NewReader(strings.NewReader(text), "e").Next(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: %v, want EOF", name, err)
		}
	}
}

// Layout, Line, Layout's names and Writer.Bytes serve only these tests.

// Bytes returns the uncompressed bytes written so far.
func (w *Writer) Bytes() int64 { return w.bytes.Load() }

// Layout is how documents are laid out in a file.
type Layout int

const (
	LayoutLines        Layout = iota // one document per line
	LayoutArray                      // a JSON array of documents
	LayoutConcatenated               // documents back to back, each over several lines
)

// Layout returns the layout detected by the first call to Next.
func (r *Reader) Layout() Layout {
	switch {
	case r.dec == nil:
		return LayoutLines
	case r.array:
		return LayoutArray
	}
	return LayoutConcatenated
}

// Line returns the line where the document last returned (or rejected) starts.
func (r *Reader) Line() int { return r.line }

func (l Layout) String() string {
	return [...]string{"lines", "array", "concatenated"}[l]
}
