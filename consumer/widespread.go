package consumer

import (
	"sync"
	"time"
)

// failureWindow tells a user's own failure from a failure of everything. A
// refresh that fails or hits its deadline while most refreshes around it do
// the same (a source collection down, the server slowed to a crawl) says
// nothing about that user, and charging it an attempt would dead-letter a
// healthy backlog within minutes of a slowdown. Outcomes are counted in two
// consecutive buckets of span each; the failure is widespread while the
// last span-to-2·span of outcomes holds at least minSample refreshes and
// more than half of them failed.
type failureWindow struct {
	span      time.Duration
	minSample int

	mu        sync.Mutex
	start     time.Time // start of the current bucket
	cur, prev bucket
}

type bucket struct{ ok, failed int }

func newFailureWindow(span time.Duration, minSample int) *failureWindow {
	return &failureWindow{span: span, minSample: minSample}
}

// record counts one finished refresh.
func (w *failureWindow) record(now time.Time, failed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roll(now)
	if failed {
		w.cur.failed++
	} else {
		w.cur.ok++
	}
}

// widespread reports whether most recent refreshes failed.
func (w *failureWindow) widespread(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roll(now)
	ok, failed := w.cur.ok+w.prev.ok, w.cur.failed+w.prev.failed
	return ok+failed >= w.minSample && failed*2 > ok+failed
}

func (w *failureWindow) roll(now time.Time) {
	switch d := now.Sub(w.start); {
	case w.start.IsZero() || d >= 2*w.span || d < 0:
		w.start, w.cur, w.prev = now, bucket{}, bucket{}
	case d >= w.span:
		w.start, w.prev, w.cur = w.start.Add(w.span), w.cur, bucket{}
	}
}
