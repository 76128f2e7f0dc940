package metrics

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
)

// Health answers Kubernetes' probes.
//
// Liveness (/healthz) fails only when a watched loop has not beaten for longer
// than its allowance: a loop that is busy still beats, a loop that is wedged
// does not, so Kubernetes restarts a stuck pod and leaves a slow one alone.
// MongoDB being down never fails liveness: restarting would not help.
//
// Readiness (/readyz) fails while any condition is false (MongoDB unreachable,
// the claim loop failing), and comes back by itself when they recover.
type Health struct {
	clock clock.Nower

	mu         sync.Mutex
	beats      map[string]*Heartbeat
	conditions map[string]condition
}

type condition struct {
	ok     bool
	detail string
}

// Heartbeat is one watched loop.
type Heartbeat struct {
	h       *Health
	name    string
	allowed time.Duration
	last    time.Time
}

// NewHealth returns a Health with no loops and no conditions (live and ready).
// clk measures the silences; nil is the wall clock.
func NewHealth(clk clock.Nower) *Health {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Health{clock: clk, beats: map[string]*Heartbeat{}, conditions: map[string]condition{}}
}

// Watch starts watching a loop that must beat at least every allowed.
func (h *Health) Watch(name string, allowed time.Duration) *Heartbeat {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := &Heartbeat{h: h, name: name, allowed: allowed, last: h.clock.Now()}
	h.beats[name] = b
	return b
}

// Beat records that the loop made progress.
func (b *Heartbeat) Beat() {
	b.h.mu.Lock()
	b.last = b.h.clock.Now()
	b.h.mu.Unlock()
}

// Set records a readiness condition. Declare every condition at start with
// its initial state, so readiness is false until it is known to hold.
func (h *Health) Set(name string, ok bool, detail string) {
	h.mu.Lock()
	h.conditions[name] = condition{ok: ok, detail: detail}
	h.mu.Unlock()
}

// Live reports whether every watched loop beat within its allowance.
func (h *Health) Live() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	var stuck []string
	for _, b := range h.beats {
		if silent := now.Sub(b.last); silent > b.allowed {
			stuck = append(stuck, fmt.Sprintf("%s: no progress for %s (allowed %s)", b.name, silent.Round(time.Second), b.allowed))
		}
	}
	sort.Strings(stuck)
	return len(stuck) == 0, strings.Join(stuck, "; ")
}

// Ready reports whether every condition holds.
func (h *Health) Ready() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var bad []string
	for name, c := range h.conditions {
		if !c.ok {
			bad = append(bad, name+": "+c.detail)
		}
	}
	sort.Strings(bad)
	return len(bad) == 0, strings.Join(bad, "; ")
}

func probe(check func() (bool, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		ok, detail := check()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			// Details quote driver errors, which may quote the URI, to
			// whoever can reach the port.
			fmt.Fprintln(w, redact.String(detail))
			return
		}
		fmt.Fprintln(w, "ok")
	}
}
