package extjson

import (
	"bytes"
	"io"
	"slices"
)

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

// lineAt returns the 1-based line of the byte at the decoder's offset off.
// Calls must come with offsets that never decrease.
func (t *lineTracker) lineAt(off int64) int {
	i, _ := slices.BinarySearch(t.nl, t.origin+off) // the newlines before off
	t.counted += i
	t.nl = t.nl[i:]
	return t.counted + 1
}
