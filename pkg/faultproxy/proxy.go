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

// Defaults for Config.
const (
	ListenDefault      = "127.0.0.1:0"
	DialTimeoutDefault = 5 * time.Second
	ReadSizeDefault    = 32 << 10
)

// acceptRetry is how long the accept loop pauses after a failure that is not
// the listener closing (such as running out of file descriptors), so it
// neither spins nor gives up on a proxy a test still uses.
const acceptRetry = 10 * time.Millisecond

// Config configures a proxy. Only Target is required.
type Config struct {
	// Target is the host:port every accepted connection is forwarded to. It is
	// dialled once per connection; while it is down, clients are reset.
	Target string
	// Listen is the address to accept clients on. Defaults to "127.0.0.1:0"
	// (a free loopback port; Addr says which).
	Listen string
	// Up and Down are the initial delays client→target and target→client.
	// SetDelay changes them. Default: none.
	Up, Down time.Duration
	// LoadSlope models a server that slows down under concurrent load: each
	// request chunk is held back LoadSlope longer for every other connection
	// busy at the moment it is read. A connection is busy from when a request
	// chunk arrives from the client until the first chunk of the reply
	// arrives from the target. It adds to Up. Zero disables it.
	LoadSlope time.Duration
	// DelayFunc, when set, replaces LoadSlope with a model of your own: it is
	// called for every chunk with the number of busy connections (the chunk's
	// own connection included when it is busy) and returns the extra delay of
	// each direction, added to Up or Down. It is called from the proxy's
	// goroutines, concurrently, and must be quick. Setting both DelayFunc and
	// LoadSlope is an error.
	DelayFunc func(busy int) (up, down time.Duration)
	// Clock measures delays. Defaults to the wall clock.
	Clock clock.Clock
	// DialTimeout bounds each dial to Target. Defaults to 5 seconds.
	DialTimeout time.Duration
	// ReadSize is the most bytes read from one side at once, and so the
	// largest chunk. Defaults to 32 KiB.
	ReadSize int
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
	ln      net.Listener
	target  string
	dialer  net.Dialer
	clock   clock.Clock
	load    loadModel
	size    int
	signals *testSignals

	ctx       context.Context // ends at Close; bounds dials
	cancel    context.CancelFunc
	detach    func() bool // stops the caller's ctx from closing the proxy
	closeOnce sync.Once
	wg        sync.WaitGroup // every goroutine the proxy started

	bytesUp, bytesDown atomic.Int64

	mu        sync.Mutex
	closed    bool
	conns     map[*conn]struct{}
	upDelay   time.Duration
	downDelay time.Duration
	refusing  bool
	blackhole bool
	changed   chan struct{} // closed and replaced whenever blackhole changes
	busy      int
	stats     Stats // counters only; Active, Busy and bytes are filled in by Stats
}

// Start listens on cfg.Listen and forwards every connection to cfg.Target
// until Close, or until ctx ends (which closes the proxy just as Close does;
// with testing.T.Context that is when the test function returns).
func Start(ctx context.Context, cfg Config) (*Proxy, error) {
	return start(ctx, cfg, nil)
}

// start is Start with the signals a test waits on.
func start(ctx context.Context, cfg Config, signals *testSignals) (*Proxy, error) {
	if cfg.Target == "" {
		return nil, errors.New("config: Target is required")
	}
	if cfg.DelayFunc != nil && cfg.LoadSlope != 0 {
		return nil, errors.New("config: set DelayFunc or LoadSlope, not both")
	}
	if cfg.ReadSize < 0 {
		return nil, fmt.Errorf("config: ReadSize %d is negative", cfg.ReadSize)
	}
	listen := cmp.Or(cfg.Listen, ListenDefault)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", listen, err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Proxy{
		ln:        ln,
		target:    cfg.Target,
		dialer:    net.Dialer{Timeout: cmp.Or(cfg.DialTimeout, DialTimeoutDefault)},
		clock:     clock.Or(cfg.Clock),
		load:      loadModel{slope: cfg.LoadSlope, fn: cfg.DelayFunc},
		size:      cmp.Or(cfg.ReadSize, ReadSizeDefault),
		signals:   signals,
		ctx:       pctx,
		cancel:    cancel,
		conns:     map[*conn]struct{}{},
		upDelay:   max(cfg.Up, 0),
		downDelay: max(cfg.Down, 0),
		changed:   make(chan struct{}),
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
// and returns once every goroutine of the proxy has ended. Calling it again
// does nothing.
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

// SetDelay sets the delay of chunks read from now on: up for client→target,
// down for target→client. Negative values count as zero.
func (p *Proxy) SetDelay(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upDelay, p.downDelay = max(up, 0), max(down, 0)
}

// Cut resets every open connection (see the package comment) and returns how
// many it reset. The proxy goes on accepting; a connection accepted while Cut
// runs may survive it.
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
	p.stats.Cut += int64(n)
	p.mu.Unlock()
	return n
}

// Refuse turns refusing on or off: while on, every new connection is reset
// as soon as it is accepted. Open connections are not touched.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = on
}

// Blackhole turns the partition on or off: while on, bytes are held in both
// directions on every connection; turning it off delivers them in order.
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

// Restore ends refusing and the partition. Delays are not faults and stay as
// they are; SetDelay(0, 0) removes them.
func (p *Proxy) Restore() {
	p.Refuse(false)
	p.Blackhole(false)
}

// Stats returns the proxy's counts. It stays valid after Close.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	s := p.stats
	s.Active = len(p.conns)
	s.Busy = p.busy
	p.mu.Unlock()
	s.BytesUp = p.bytesUp.Load()
	s.BytesDown = p.bytesDown.Load()
	return s
}

// accept admits clients until the listener closes.
func (p *Proxy) accept() {
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(acceptRetry):
			}
			continue
		}
		p.admit(nc)
	}
}

// admit resets a client the proxy refuses and starts serving any other.
func (p *Proxy) admit(nc net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
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
}

// testSignals lets a test wait for what the proxy did instead of sleeping.
// It is nil outside tests.
type testSignals struct {
	queued [2]atomic.Int64  // bytes queued for delivery so far, per direction
	notify [2]chan struct{} // capacity 1: queued grew
}

func newTestSignals() *testSignals {
	return &testSignals{notify: [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}}
}

// chunkQueued reports a chunk of n bytes queued in direction d.
func (s *testSignals) chunkQueued(d direction, n int) {
	if s == nil {
		return
	}
	s.queued[d].Add(int64(n))
	select {
	case s.notify[d] <- struct{}{}:
	default:
	}
}
