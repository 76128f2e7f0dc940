package faultproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// ReadSizeDefault is Config.ReadSize's default.
const ReadSizeDefault = 32 << 10

// Config configures a proxy. Only Target is required.
type Config struct {
	Target   string        // host:port each accepted connection is dialled to
	Listen   string        // where clients connect; default a free loopback port (Addr says which)
	Up, Down time.Duration // the initial delays client→target and target→client
	// LoadSlope holds each request chunk back LoadSlope longer per other connection busy when it
	// is read (Load in the package comment), on top of Up: a server slowing down under load.
	LoadSlope time.Duration
	// DelayFunc replaces LoadSlope (setting both is an error): called concurrently for every chunk
	// with the busy connections (its own included when busy), it returns each direction's extra delay.
	DelayFunc func(busy int) (up, down time.Duration)
	Clock     clock.Clock              // measures delays; default the wall clock
	ReadSize  int                      // the most bytes read at once, and so the largest chunk
	onQueued  func(d direction, n int) // a test's hook: n bytes queued in d
}

// Stats counts what the proxy has done since it started.
type Stats struct {
	Accepted     int64 // connections accepted, refused ones included
	Refused      int64 // connections reset at once because the proxy was refusing
	DialFailures int64 // connections reset because Target could not be reached
	Cut          int64 // connections reset by Cut
	Active       int   // connections being proxied now (dialling included)
	Busy         int   // active connections with a request awaiting its reply
	BytesUp      int64 // bytes delivered to Target
	BytesDown    int64 // bytes delivered to clients
}

// Proxy is a running proxy. Its methods are safe for concurrent use.
type Proxy struct {
	ln  net.Listener
	cfg Config // ReadSize and Clock defaulted

	ctx       context.Context // ends at Close; bounds dials
	cancel    context.CancelFunc
	detach    func() bool // stops the caller's ctx from closing the proxy
	closeOnce sync.Once
	wg        sync.WaitGroup // every goroutine the proxy started

	bytes [2]atomic.Int64 // delivered, by direction

	mu        sync.Mutex
	closed    bool
	conns     map[*conn]struct{}
	delay     [2]time.Duration // by direction
	refusing  bool
	blackhole bool
	changed   chan struct{} // closed and replaced whenever blackhole changes
	busy      int
	stats     Stats // counters only; Active, Busy and bytes are filled in by Stats
}

// Start listens on cfg.Listen and forwards every connection to cfg.Target
// until Close or until ctx ends (with testing.T.Context: the test returns).
func Start(ctx context.Context, cfg Config) (*Proxy, error) {
	switch {
	case cfg.Target == "":
		return nil, errors.New("config: Target is required")
	case cfg.DelayFunc != nil && cfg.LoadSlope != 0:
		return nil, errors.New("config: set DelayFunc or LoadSlope, not both")
	case cfg.ReadSize < 0:
		return nil, fmt.Errorf("config: ReadSize %d is negative", cfg.ReadSize)
	}
	listen := cmp.Or(cfg.Listen, "127.0.0.1:0")
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", listen, err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cfg.ReadSize, cfg.Clock = cmp.Or(cfg.ReadSize, ReadSizeDefault), clock.Or(cfg.Clock)
	p := &Proxy{
		ln:      ln,
		cfg:     cfg,
		ctx:     pctx,
		cancel:  cancel,
		conns:   map[*conn]struct{}{},
		delay:   [2]time.Duration{max(cfg.Up, 0), max(cfg.Down, 0)},
		changed: make(chan struct{}),
	}
	p.wg.Go(p.accept)
	// After the accept loop has joined the WaitGroup: a ctx that has already
	// ended must not run Close's Wait before it.
	p.detach = context.AfterFunc(ctx, p.Close)
	return p, nil
}

// Addr is the host:port clients should connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection (dropping bytes still held)
// and returns once every goroutine of the proxy has ended. It is idempotent.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.detach()
		p.cancel()
		_ = p.ln.Close()
		p.mu.Lock()
		p.closed = true
		open := slices.Collect(maps.Keys(p.conns))
		p.mu.Unlock()
		for _, c := range open {
			p.closeConn(c, false)
		}
	})
	p.wg.Wait()
}

// SetDelay sets the delays of chunks read from now on; negative is zero.
func (p *Proxy) SetDelay(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = [2]time.Duration{max(up, 0), max(down, 0)}
}

// Cut resets every open connection and returns how many; one accepted while
// Cut runs may survive it.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	open := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()
	n := 0
	for _, c := range open {
		if p.closeConn(c, true) {
			n++
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Cut += int64(n)
	return n
}

// Refuse turns refusing new connections on or off.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = on
}

// Blackhole turns the partition on or off.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blackhole == on {
		return
	}
	p.blackhole = on
	close(p.changed) // wakes every writer to look again
	p.changed = make(chan struct{})
}

// Restore ends refusing and the partition; delays stay.
func (p *Proxy) Restore() {
	p.Refuse(false)
	p.Blackhole(false)
}

// Stats returns the proxy's counts. It stays valid after Close.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Active, s.Busy = len(p.conns), p.busy
	s.BytesUp, s.BytesDown = p.bytes[up].Load(), p.bytes[down].Load()
	return s
}

func (p *Proxy) accept() {
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			// Out of file descriptors, say: neither spin nor give up.
			if errors.Is(err, net.ErrClosed) || clock.Sleep(p.ctx, clock.Real{}, 10*time.Millisecond) != nil {
				return
			}
			continue
		}
		p.mu.Lock()
		p.stats.Accepted++
		switch {
		case p.closed:
			_ = nc.Close()
		case p.refusing:
			p.stats.Refused++
			drop(nc, true)
		default:
			c := &conn{client: nc, done: make(chan struct{})}
			p.conns[c] = struct{}{}
			p.wg.Go(func() { p.serve(c) })
		}
		p.mu.Unlock()
	}
}
