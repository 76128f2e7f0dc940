package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
)

// Handler serves /metrics from reg, and /healthz and /readyz from h.
func Handler(reg *prometheus.Registry, h *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	mux.Handle("/healthz", probe(h.Live))
	mux.Handle("/readyz", probe(h.Ready))
	return mux
}

type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (":0" picks a free port). The timeouts bound each phase of a connection, so
// stalled clients (a slow-loris, a scraper that stops reading) cannot pile up; they are generous
// for a Prometheus scrape (10s, every 15s to 1m, kept alive) and Kubernetes probes (1s).
func Listen(addr string, handler http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	return &Server{ln: ln, srv: &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// These endpoints take no headers of note, and the default (1 MiB)
		// lets one client hold that much per connection.
		MaxHeaderBytes: 16 << 10,
	}}, nil
}

func (s *Server) Addr() string { return s.ln.Addr().String() }

// ServerShutdownTimeout is how long a scrape in progress gets once Serve's context ends.
const ServerShutdownTimeout = 3 * time.Second

// Serve serves until ctx ends, then shuts down within ServerShutdownTimeout.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving metrics: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), ServerShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// Health answers Kubernetes' probes. Liveness (/healthz) fails only when a watched loop has not
// beaten within its allowance: a busy loop still beats, a wedged one does not; MongoDB being down
// never fails it (a restart would not help). Readiness (/readyz) fails while any condition is
// false (MongoDB unreachable, the claim loop failing) and recovers by itself.
type Health struct {
	clock clock.Nower

	mu         sync.Mutex
	beats      map[string]*heartbeat
	conditions map[string]condition
}

type condition struct {
	ok     bool
	detail string
}

type heartbeat struct {
	allowed time.Duration
	last    time.Time
}

// NewHealth returns a Health with no loops and no conditions (live and
// ready); clk (nil: the wall clock) measures silences.
func NewHealth(clk clock.Nower) *Health {
	return &Health{clock: cmp.Or[clock.Nower](clk, clock.Real{}), beats: map[string]*heartbeat{}, conditions: map[string]condition{}}
}

// Watch watches a loop that must beat at least every allowed: call beat each time it progresses.
func (h *Health) Watch(name string, allowed time.Duration) (beat func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := &heartbeat{allowed: allowed, last: h.clock.Now()}
	h.beats[name] = b
	return func() {
		h.mu.Lock()
		b.last = h.clock.Now()
		h.mu.Unlock()
	}
}

// Set records a readiness condition. Declare every condition at start with
// its initial state, so readiness is false until it is known to hold.
func (h *Health) Set(name string, ok bool, detail string) {
	h.mu.Lock()
	h.conditions[name] = condition{ok: ok, detail: detail}
	h.mu.Unlock()
}

// Live reports whether every watched loop beat within its allowance.
func (h *Health) Live() (bool, string) { return h.check(true) }

// Ready reports whether every condition holds.
func (h *Health) Ready() (bool, string) { return h.check(false) }

// check lists, sorted, the loops silent past their allowance (live) or the false conditions.
func (h *Health) check(live bool) (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	var bad []string
	for name, b := range h.beats {
		if silent := now.Sub(b.last); live && silent > b.allowed {
			bad = append(bad, fmt.Sprintf("%s: no progress for %s (allowed %s)", name, silent.Round(time.Second), b.allowed))
		}
	}
	for name, c := range h.conditions {
		if !live && !c.ok {
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
