package metrics

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serve starts a Server with the timeouts of hs on a free port.
func serve(t *testing.T, hs *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs.Handler = Handler(prometheus.NewRegistry(), NewHealth(nil))
	srv := &Server{ln: ln, srv: hs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv.Addr()
}

// awaitClose reads conn until the server closes it. The test's own deadline
// is far beyond the server's: reaching it means the server never cut the
// connection.
func awaitClose(t *testing.T, conn net.Conn, r io.Reader, what string) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open", what)
	}
}

func TestSlowLorisWhoNeverFinishesHeadersIsCutOff(t *testing.T) {
	t.Parallel()
	addr := serve(t, &http.Server{ReadHeaderTimeout: 50 * time.Millisecond, ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: time.Minute})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A request line and one header, then nothing: the blank line that ends
	// the headers never comes.
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	awaitClose(t, conn, conn, "headers never finished")
}

func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	t.Parallel()
	addr := serve(t, &http.Server{ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: 50 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	awaitClose(t, conn, br, "idle keep-alive")
}

func TestListenBoundsEveryPhaseOfAConnection(t *testing.T) {
	t.Parallel()
	srv, err := Listen("127.0.0.1:0", http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.ln.Close()
	s := srv.srv
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": s.ReadHeaderTimeout, "ReadTimeout": s.ReadTimeout,
		"WriteTimeout": s.WriteTimeout, "IdleTimeout": s.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s = %v: a client can hold a connection forever", name, d)
		}
	}
	if s.MaxHeaderBytes <= 0 || s.MaxHeaderBytes > 1<<16 {
		t.Errorf("MaxHeaderBytes = %d, want a small positive bound", s.MaxHeaderBytes)
	}
}

func TestProbeDetailsNeverShowASecret(t *testing.T) {
	t.Parallel()
	h := NewHealth(nil)
	h.Set("mongodb", false, "ping failed: dial mongodb://admin:hunter2@db:27017/?tlsCertificateKeyFilePassword=hunter3 refused")
	rec := httptest.NewRecorder()
	probe(h.Ready)(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if body := rec.Body.String(); strings.Contains(body, "hunter2") || strings.Contains(body, "hunter3") || !strings.Contains(body, "ping failed") {
		t.Errorf("/readyz body %q", body)
	}
}
