package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestStartRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := map[string]Config{
		"no target":              {},
		"slope and func":         {Target: "127.0.0.1:1", LoadSlope: time.Millisecond, DelayFunc: func(int) (time.Duration, time.Duration) { return 0, 0 }},
		"negative read size":     {Target: "127.0.0.1:1", ReadSize: -1},
		"address it cannot bind": {Target: "127.0.0.1:1", Listen: "127.0.0.1:-1"},
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := Start(t.Context(), cfg)
			if err == nil {
				p.Close()
				t.Fatalf("Start accepted %+v", cfg)
			}
		})
	}
}

func TestPassesBytesUnchanged(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ size int }{
		"a few bytes":                     {size: 5},
		"exactly one read":                {size: ReadSizeDefault},
		"not a multiple of the read size": {size: 1<<20 + 7},
		"several megabytes":               {size: 8 << 20},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{})
			payload := make([]byte, tt.size)
			_, _ = rand.NewChaCha8([32]byte{byte(tt.size)}).Read(payload)
			nc := b.dial(t)

			// Write and read at once: the echo cannot hold megabytes.
			wrote := make(chan error, 1)
			go func() {
				_, err := nc.Write(payload)
				if err == nil {
					err = nc.CloseWrite()
				}
				wrote <- err
			}()
			if err := nc.SetReadDeadline(time.Now().Add(failAfter)); err != nil {
				t.Fatal(err)
			}
			// Reading to EOF also checks that the client's close travelled
			// to the echo server and the echo server's close came back.
			got, err := io.ReadAll(nc)
			if err != nil {
				t.Fatalf("reading echo: %v", err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("writing payload: %v", err)
			}
			if !bytes.Equal(got, payload) {
				t.Fatalf("echo differs: %d bytes back of %d sent", len(got), len(payload))
			}

			b.p.Close() // counts are final once every goroutine has ended
			want := Stats{Accepted: 1, BytesUp: int64(tt.size), BytesDown: int64(tt.size)}
			if s := b.p.Stats(); s != want {
				t.Fatalf("Stats = %+v, want %+v", s, want)
			}
		})
	}
}

func TestDelayHoldsBytesUntilDue(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Up: time.Second, Clock: clock})
	nc := b.dial(t)
	replies := collect(t, nc)

	write(t, nc, "ping")
	b.waitQueued(t, up, 4)
	clock.waitArmed(t, time.Second)
	clock.Advance(time.Second - time.Nanosecond)
	if s := b.p.Stats(); s.BytesUp != 0 {
		t.Fatalf("%d bytes reached the server before the delay had passed", s.BytesUp)
	}
	assertNothingYet(t, replies, "reply before the delay had passed")

	clock.Advance(time.Nanosecond)
	if got := receive(t, replies, 4); got != "ping" {
		t.Fatalf("reply = %q, want ping", got)
	}
}

func TestDelayDoesNotSerialiseChunks(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Up: time.Second, Down: time.Second, Clock: clock})
	nc := b.dial(t)
	replies := collect(t, nc)

	// Two chunks, read one after the other at the same instant.
	write(t, nc, "a")
	b.waitQueued(t, up, 1)
	clock.waitArmed(t, time.Second)
	write(t, nc, "b")
	b.waitQueued(t, up, 1)

	// One delay delivers both to the server; had the second waited for the
	// first to be out, it would need another second that never comes.
	clock.Advance(time.Second)
	b.waitQueued(t, down, 2)
	clock.waitArmed(t, time.Second)
	assertNothingYet(t, replies, "reply before the downstream delay had passed")
	clock.Advance(time.Second)
	if got := receive(t, replies, 2); got != "ab" {
		t.Fatalf("replies = %q, want ab", got)
	}
}

func TestDelayChangeAppliesToLaterChunks(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Up: time.Hour, Clock: clock})
	nc := b.dial(t)
	replies := collect(t, nc)

	write(t, nc, "a")
	b.waitQueued(t, up, 1)
	clock.waitArmed(t, time.Hour)
	b.p.SetDelay(0, 0)
	write(t, nc, "b")
	b.waitQueued(t, up, 1)
	assertNothingYet(t, replies, "a later chunk overtook an earlier one")

	clock.Advance(time.Hour)
	if got := receive(t, replies, 2); got != "ab" {
		t.Fatalf("replies = %q, want ab", got)
	}
	// The clock stands still: only the new, zero delay lets this through.
	write(t, nc, "c")
	if got := receive(t, replies, 1); got != "c" {
		t.Fatalf("reply = %q, want c", got)
	}
}

func TestDelayHoldsBytesUntilClose(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Up: time.Hour})
	nc := b.dial(t)
	replies := collect(t, nc)

	write(t, nc, "ping")
	b.waitQueued(t, up, 4)
	assertNothingYet(t, replies, "reply an hour early")
	b.p.Close()
	if v := <-replies; v == nil || isString(v) {
		t.Fatalf("after Close the client read %v, want the connection to end", v)
	}
	if s := b.p.Stats(); s.BytesUp != 0 {
		t.Fatalf("%d bytes reached the server", s.BytesUp)
	}
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

func TestBlackholeHoldsBytesUntilRestore(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	before := b.dial(t)
	roundTrip(t, before, "hello")
	b.waitQueued(t, up, 5) // counted from here on

	b.p.Blackhole(true)
	during := b.dial(t)
	fromBefore, fromDuring := collect(t, before), collect(t, during)
	write(t, before, "one")
	b.waitQueued(t, up, 3)
	write(t, before, "two")
	b.waitQueued(t, up, 3)
	write(t, during, "three")
	b.waitQueued(t, up, 5)
	assertNothingYet(t, fromBefore, "reply through a partition")
	assertNothingYet(t, fromDuring, "reply through a partition")
	if s := b.p.Stats(); s.BytesUp != 5 || s.Busy != 2 {
		t.Fatalf("Stats = %+v, want only hello delivered and 2 connections busy", s)
	}

	b.p.Restore()
	if got := receive(t, fromBefore, 6); got != "onetwo" {
		t.Fatalf("held replies = %q, want onetwo", got)
	}
	if got := receive(t, fromDuring, 5); got != "three" {
		t.Fatalf("held reply = %q, want three", got)
	}
}

func TestCutResetsOpenConnections(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	first, second := b.dial(t), b.dial(t)
	roundTrip(t, first, "one")
	roundTrip(t, second, "two")

	if n := b.p.Cut(); n != 2 {
		t.Fatalf("Cut reset %d connections, want 2", n)
	}
	for _, nc := range []net.Conn{first, second} {
		if err := readErr(t, nc); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after Cut: %v, want a reset", err)
		}
	}
	if s := b.p.Stats(); s.Cut != 2 || s.Active != 0 {
		t.Fatalf("Stats = %+v, want 2 cut and none active", s)
	}
	roundTrip(t, b.dial(t), "after the cut")
}

func TestRefuseResetsNewConnections(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		lift func(*Proxy)
	}{
		"Refuse(false)": {lift: func(p *Proxy) { p.Refuse(false) }},
		"Restore":       {lift: (*Proxy).Restore},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{})
			open := b.dial(t)
			roundTrip(t, open, "before")

			b.p.Refuse(true)
			b.expectReset(t)
			roundTrip(t, open, "refusing leaves open connections alone")

			tt.lift(b.p)
			roundTrip(t, b.dial(t), "after")
			if s := b.p.Stats(); s.Accepted != 3 || s.Refused != 1 {
				t.Fatalf("Stats = %+v, want 3 accepted and 1 refused", s)
			}
		})
	}
}

func TestTargetDownResetsClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	_ = ln.Close() // nothing listens there now

	b := setup(t, Config{Target: target})
	b.expectReset(t)
	if s := b.p.Stats(); s.DialFailures != 1 || s.Active != 0 {
		t.Fatalf("Stats = %+v, want 1 dial failure and none active", s)
	}
}

func TestDelayFuncSeesBusyConnections(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		calls []int
	)
	b := setup(t, Config{DelayFunc: func(busy int) (time.Duration, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, busy)
		return 0, 0
	}})
	seen := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}
	first, second := b.dial(t), b.dial(t)
	fromFirst, fromSecond := collect(t, first), collect(t, second)

	// A partition keeps both requests waiting for their replies.
	b.p.Blackhole(true)
	write(t, first, "1")
	b.waitQueued(t, up, 1)
	write(t, second, "2")
	b.waitQueued(t, up, 1)
	if got := seen(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("busy counts for two requests = %v, want [1 2]", got)
	}
	if s := b.p.Stats(); s.Busy != 2 {
		t.Fatalf("Busy = %d, want 2", s.Busy)
	}

	b.p.Restore()
	receive(t, fromFirst, 1)
	receive(t, fromSecond, 1)
	// The first reply back still counts both; the second only its own.
	replies := seen()[2:]
	slices.Sort(replies)
	if !slices.Equal(replies, []int{1, 2}) {
		t.Fatalf("busy counts for the replies = %v, want 1 and 2", replies)
	}
	if s := b.p.Stats(); s.Busy != 0 {
		t.Fatalf("Busy = %d after both replies, want 0", s.Busy)
	}
}

func TestLoadSlopeHoldsRequestsUnderLoad(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{LoadSlope: time.Second, Clock: clock})
	alone, loaded := b.dial(t), b.dial(t)
	fromAlone, fromLoaded := collect(t, alone), collect(t, loaded)

	b.p.Blackhole(true)
	write(t, alone, "1") // the only busy connection: no extra delay
	b.waitQueued(t, up, 1)
	write(t, loaded, "2") // one other connection busy: one slope more
	b.waitQueued(t, up, 1)
	b.p.Restore()

	if got := receive(t, fromAlone, 1); got != "1" {
		t.Fatalf("reply = %q, want 1", got)
	}
	clock.waitArmed(t, time.Second)
	assertNothingYet(t, fromLoaded, "reply before the load delay had passed")
	clock.Advance(time.Second)
	if got := receive(t, fromLoaded, 1); got != "2" {
		t.Fatalf("reply = %q, want 2", got)
	}
}

func TestLoadDelay(t *testing.T) {
	t.Parallel()
	perBusy := func(busy int) (time.Duration, time.Duration) {
		return time.Duration(busy) * time.Millisecond, time.Duration(busy) * 2 * time.Millisecond
	}
	tests := map[string]struct {
		model Config
		dir   direction
		busy  int
		want  time.Duration
	}{
		"no model":                      {dir: up, busy: 5, want: 0},
		"slope, connection alone":       {model: Config{LoadSlope: 10 * time.Millisecond}, dir: up, busy: 1, want: 0},
		"slope, two others busy":        {model: Config{LoadSlope: 10 * time.Millisecond}, dir: up, busy: 3, want: 20 * time.Millisecond},
		"slope leaves replies alone":    {model: Config{LoadSlope: 10 * time.Millisecond}, dir: down, busy: 3, want: 0},
		"slope, nothing busy":           {model: Config{LoadSlope: 10 * time.Millisecond}, dir: up, busy: 0, want: 0},
		"func, request":                 {model: Config{DelayFunc: perBusy}, dir: up, busy: 3, want: 3 * time.Millisecond},
		"func, reply":                   {model: Config{DelayFunc: perBusy}, dir: down, busy: 3, want: 6 * time.Millisecond},
		"func, negative counts as zero": {model: Config{DelayFunc: func(int) (time.Duration, time.Duration) { return -1, -1 }}, dir: up, busy: 1, want: 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tt.model.loadDelay(tt.dir, tt.busy); got != tt.want {
				t.Fatalf("delay(%v, %d) = %v, want %v", tt.dir, tt.busy, got, tt.want)
			}
		})
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		// arrange puts a connection into the state under test.
		arrange func(t *testing.T, b *testBundle, nc *net.TCPConn)
		target  func(t *testing.T) string
	}{
		"idle connection": {
			arrange: func(t *testing.T, b *testBundle, nc *net.TCPConn) { roundTrip(t, nc, "hi") },
		},
		"bytes held by a delay": {
			arrange: func(t *testing.T, b *testBundle, nc *net.TCPConn) {
				b.p.SetDelay(time.Hour, time.Hour)
				write(t, nc, "held")
				b.waitQueued(t, up, 4)
			},
		},
		"bytes held by a partition": {
			arrange: func(t *testing.T, b *testBundle, nc *net.TCPConn) {
				b.p.Blackhole(true)
				write(t, nc, "held")
				b.waitQueued(t, up, 4)
			},
		},
		"writer stuck on a target that does not read": {
			target: func(t *testing.T) string {
				stop := make(chan struct{})
				addr := startServer(t, func(net.Conn) { <-stop })
				t.Cleanup(func() { close(stop) }) // runs before the server's own
				return addr
			},
			arrange: func(t *testing.T, b *testBundle, nc *net.TCPConn) {
				// Far more than the socket buffers hold: the proxy reads it all
				// and its writer blocks on the target.
				const size = 32 << 20
				if _, err := nc.Write(make([]byte, size)); err != nil {
					t.Fatalf("writing: %v", err)
				}
				b.waitQueued(t, up, size)
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var cfg Config
			if tt.target != nil {
				cfg.Target = tt.target(t)
			}
			b := setup(t, cfg)
			nc := b.dial(t)
			tt.arrange(t, b, nc)

			// Close waits for every goroutine the proxy started, so its
			// return is the proof that none was left behind.
			closed := make(chan struct{})
			go func() {
				b.p.Close()
				close(closed)
			}()
			select {
			case <-closed:
			case <-time.After(failAfter):
				t.Fatal("Close did not return: a proxy goroutine is stuck")
			}
			readErr(t, nc)
			if s := b.p.Stats(); s.Active != 0 || s.Busy != 0 {
				t.Fatalf("Stats after Close = %+v, want nothing active or busy", s)
			}
			b.p.Close() // a second Close does nothing
		})
	}
}

func TestContextEndClosesProxy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	p, err := Start(ctx, Config{Target: startEcho(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	nc, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	roundTrip(t, nc, "hi")

	cancel()
	readErr(t, nc)
	p.Close()
	if nc, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = nc.Close()
		t.Fatal("proxy still accepts after its context ended")
	}
}
