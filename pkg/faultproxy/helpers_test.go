package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock/clocktest"
)

// failAfter bounds every wait in these tests, so a broken proxy fails a test
// instead of hanging it. Nothing asserts that anything is fast.
const failAfter = 20 * time.Second

// testBundle is a proxy in front of an echo server, and the signals to wait on.
type testBundle struct {
	p       *Proxy
	signals *testSignals
	waited  [2]int64 // bytes queued per direction that the test has waited for
}

// setup starts a proxy with cfg; an empty Target means a new echo server.
func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	if cfg.Target == "" {
		cfg.Target = startEcho(t)
	}
	signals := newTestSignals()
	cfg.onQueued = signals.chunkQueued
	p, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("starting proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return &testBundle{p: p, signals: signals}
}

// dial connects a client to the proxy.
func (b *testBundle) dial(t *testing.T) *net.TCPConn {
	t.Helper()
	nc, err := net.Dial("tcp", b.p.Addr())
	if err != nil {
		t.Fatalf("dialling proxy: %v", err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return nc.(*net.TCPConn)
}

// expectReset connects a client that the proxy must reset. The handshake
// completes before the proxy decides, so the reset reaches the client either
// while its dial is still checking the socket or on its first read.
func (b *testBundle) expectReset(t *testing.T) {
	t.Helper()
	nc, err := net.Dial("tcp", b.p.Addr())
	if err == nil {
		defer func() { _ = nc.Close() }()
		err = readErr(t, nc)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connecting: %v, want a reset", err)
	}
}

// waitQueued waits until the proxy has queued n more bytes in direction d
// than the test last waited for.
func (b *testBundle) waitQueued(t *testing.T, d direction, n int) {
	t.Helper()
	b.waited[d] += int64(n)
	timeout := time.After(failAfter)
	for {
		got := b.signals.queued[d].Load()
		if got >= b.waited[d] {
			return
		}
		select {
		case <-b.signals.notify[d]:
		case <-timeout:
			t.Fatalf("proxy queued %d bytes %s, want %d", got, d, b.waited[d])
		}
	}
}

// startEcho starts a server that sends back whatever it receives and closes
// its side once the client has closed its own.
func startEcho(t *testing.T) string {
	t.Helper()
	return startServer(t, func(nc net.Conn) { _, _ = io.Copy(nc, nc) })
}

// startServer accepts connections and runs handle on each; everything is
// closed and waited for when the test ends.
func startServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				defer func() { _ = nc.Close() }()
				handle(nc)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, nc := range conns {
			_ = nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readN reads exactly n bytes from nc.
func readN(t *testing.T, nc net.Conn, n int) []byte {
	t.Helper()
	if err := nc.SetReadDeadline(time.Now().Add(failAfter)); err != nil {
		t.Fatalf("setting deadline: %v", err)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(nc, buf); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return buf
}

// write sends s on nc.
func write(t *testing.T, nc net.Conn, s string) {
	t.Helper()
	if _, err := nc.Write([]byte(s)); err != nil {
		t.Fatalf("writing %q: %v", s, err)
	}
}

// roundTrip checks that s comes back through the proxy and echo server.
func roundTrip(t *testing.T, nc net.Conn, s string) {
	t.Helper()
	write(t, nc, s)
	if got := string(readN(t, nc, len(s))); got != s {
		t.Fatalf("echo = %q, want %q", got, s)
	}
}

// collect reads nc in the background: each read's bytes on the returned
// channel, then the error that ended reading, then the channel closes.
func collect(t *testing.T, nc net.Conn) <-chan any {
	t.Helper()
	out := make(chan any, 64)
	if err := nc.SetReadDeadline(time.Now().Add(failAfter)); err != nil {
		t.Fatalf("setting deadline: %v", err)
	}
	go func() {
		defer close(out)
		buf := make([]byte, 1024)
		for {
			n, err := nc.Read(buf)
			if n > 0 {
				out <- string(buf[:n])
			}
			if err != nil {
				out <- err
				return
			}
		}
	}()
	return out
}

// assertNothingYet fails if ch already holds something.
func assertNothingYet(t *testing.T, ch <-chan any, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: got %v", what, v)
	default:
	}
}

// fakeClock is a clock that moves only when the test advances it, and
// remembers which of its waits a test has looked at.
type fakeClock struct {
	*clocktest.Fake
	seen int // waits checked by waitArmed
}

func newFakeClock() *fakeClock {
	return &fakeClock{Fake: clocktest.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
}

// waitArmed waits until the proxy begins its next wait on the clock, and
// checks that it waits d.
func (c *fakeClock) waitArmed(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := c.WaitUntil(ctx, func([]time.Duration) bool { return len(c.Armed()) > c.seen }); err != nil {
		t.Fatalf("proxy never waited on the clock")
	}
	if got := c.Armed()[c.seen]; got != d {
		t.Fatalf("proxy waits %v on the clock, want %v", got, d)
	}
	c.seen++
}

// receive takes n bytes from a channel made by collect.
func receive(t *testing.T, ch <-chan any, n int) string {
	t.Helper()
	var got string
	timeout := time.After(failAfter)
	for len(got) < n {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatalf("connection ended after %q", got)
			}
			switch v := v.(type) {
			case string:
				got += v
			case error:
				t.Fatalf("reading after %q: %v", got, v)
			}
		case <-timeout:
			t.Fatalf("received %q of %d bytes", got, n)
		}
	}
	return got
}

// readErr reads from nc and returns the error it must fail with.
func readErr(t *testing.T, nc net.Conn) error {
	t.Helper()
	if err := nc.SetReadDeadline(time.Now().Add(failAfter)); err != nil {
		t.Fatalf("setting deadline: %v", err)
	}
	buf := make([]byte, 64)
	n, err := nc.Read(buf)
	if err == nil {
		t.Fatalf("read %q, want the connection to fail", buf[:n])
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %v", failAfter)
	}
	return err
}

// testSignals lets a test wait for what the proxy did instead of sleeping.
type testSignals struct {
	queued [2]atomic.Int64  // bytes queued for delivery so far, per direction
	notify [2]chan struct{} // capacity 1: queued grew
}

func newTestSignals() *testSignals {
	return &testSignals{notify: [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}}
}

// chunkQueued reports a chunk of n bytes queued in direction d.
func (s *testSignals) chunkQueued(d direction, n int) {
	s.queued[d].Add(int64(n))
	select {
	case s.notify[d] <- struct{}{}:
	default:
	}
}

func (d direction) String() string {
	if d == up {
		return "up"
	}
	return "down"
}
