package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	m := Meter{Label: "loading score_events", Unit: "documents",
		Done: func() int64 { return 5000 }, Total: func() int64 { return 20000 }, Bytes: func() int64 { return 3 << 20 },
		Extra: func() string { return "depth 15,000" }}
	got := formatProgress(m, 2*time.Second, 2500, true)
	want := "loading score_events [======                  ]  25% 5,000/20,000 documents  3.0 MiB  2,500/s  ETA 6s  2s  depth 15,000"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	plain := formatProgress(Meter{Label: "snapshot", Done: func() int64 { return 1234567 }}, time.Second, 1234567, false)
	if plain != "snapshot 1,234,567  1,234,567/s  1s" {
		t.Errorf("unknown total: %q", plain)
	}
}

func TestProgressOffATerminalPrintsPlainLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	stop := StartProgress(&buf, Meter{Label: "x", Done: func() int64 { return 1 }})
	stop()
	stop()
	if out := buf.String(); strings.Contains(out, "\r") || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "x 1") {
		t.Errorf("%q: want one plain final line", out)
	}
	StartProgress(nil, Meter{Label: "x", Done: func() int64 { return 1 }})() // nil writer: nothing, no panic
}
