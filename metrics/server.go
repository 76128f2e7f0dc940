package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics from reg, and /healthz and /readyz from h.
func Handler(reg *prometheus.Registry, h *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	mux.Handle("/healthz", probe(h.Live))
	mux.Handle("/readyz", probe(h.Ready))
	return mux
}

// Server is the metrics and health HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Timeouts bound how long one client may hold a connection in each phase, so
// that slow or stalled clients (a slow-loris, a scraper that stops reading)
// cannot pile up connections and goroutines.
type Timeouts struct {
	ReadHeader time.Duration // from accepting to the end of the headers
	Read       time.Duration // from accepting to the end of the body
	Write      time.Duration // from the end of the headers to the end of the response
	Idle       time.Duration // a kept-alive connection waiting for its next request
}

// Listen binds addr (e.g. ":9090"; ":0" picks a free port). The timeouts suit
// a Prometheus scrape (10s timeout by default, every 15s to 1m, over one
// kept-alive connection) and Kubernetes probes (1s): generous for them, short
// for a client that stalls.
func Listen(addr string, handler http.Handler) (*Server, error) {
	return listen(addr, handler, Timeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 2 * time.Minute})
}

func listen(addr string, handler http.Handler, to Timeouts) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	return &Server{ln: ln, srv: &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: to.ReadHeader,
		ReadTimeout:       to.Read,
		WriteTimeout:      to.Write,
		IdleTimeout:       to.Idle,
		// These endpoints take no headers of note, and the default (1 MiB)
		// lets one client hold that much per connection.
		MaxHeaderBytes: 16 << 10,
	}}, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// ServerShutdownTimeout bounds Serve's shutdown once its context ends: a
// scrape in progress gets this long to finish.
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
