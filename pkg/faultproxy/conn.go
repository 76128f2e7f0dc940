package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// conn is one proxied connection: a client, the target connection dialled
// for it, and a queue of chunks per direction between a reader and a writer.
type conn struct {
	client net.Conn
	done   chan struct{} // closed by closeConn: readers and writers stop

	// Guarded by Proxy.mu.
	server     net.Conn // nil until dialled
	closed     bool
	busy       bool // a request is on its way and no reply has come back
	halfClosed int  // directions whose end of stream has been delivered
}

// chunk is what one read returned, waiting for its delivery time.
type chunk struct {
	at   time.Time
	data []byte
	eof  bool // the sender closed its side: pass the close on
}

// queue holds the chunks of one direction in the order they were read.
type queue struct {
	mu     sync.Mutex
	chunks []chunk
	ready  chan struct{} // capacity 1: a chunk was pushed
}

func (q *queue) push(ch chunk) {
	q.mu.Lock()
	q.chunks = append(q.chunks, ch)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// next takes the oldest chunk, waiting for one; false means done closed
// first.
func (q *queue) next(done <-chan struct{}) (chunk, bool) {
	for {
		q.mu.Lock()
		if len(q.chunks) > 0 {
			ch := q.chunks[0]
			q.chunks[0] = chunk{} // let the bytes go
			q.chunks = q.chunks[1:]
			q.mu.Unlock()
			return ch, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-done:
			return chunk{}, false
		}
	}
}

// serve dials the target for c and pumps bytes both ways until c closes.
func (p *Proxy) serve(c *conn) {
	server, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(p.ctx, "tcp", p.cfg.Target)
	if err != nil {
		if p.ctx.Err() == nil { // not a dial that Close interrupted
			p.mu.Lock()
			p.stats.DialFailures++
			p.mu.Unlock()
		}
		p.closeConn(c, true)
		return
	}
	p.mu.Lock()
	if c.closed { // cut or closed while dialling
		p.mu.Unlock()
		_ = server.Close()
		return
	}
	c.server = server
	p.mu.Unlock()

	ups, downs := &queue{ready: make(chan struct{}, 1)}, &queue{ready: make(chan struct{}, 1)}
	p.wg.Go(func() { p.read(c, c.client, ups, up) })
	p.wg.Go(func() { p.write(c, server, ups, up) })
	p.wg.Go(func() { p.read(c, server, downs, down) })
	p.write(c, c.client, downs, down)
}

// read queues what src sends, stamped with its delivery time, until it ends.
func (p *Proxy) read(c *conn, src net.Conn, q *queue, d direction) {
	buf := make([]byte, p.cfg.ReadSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q.push(chunk{at: p.deliverAt(c, d), data: bytes.Clone(buf[:n])})
			if p.cfg.onQueued != nil {
				p.cfg.onQueued(d, n)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			// The close travels behind the bytes, as it would on the wire.
			p.mu.Lock()
			base := p.delay[d]
			p.mu.Unlock()
			q.push(chunk{at: p.cfg.Clock.Now().Add(base), eof: true})
			return
		default:
			// A reset from the peer, or the connection was closed here.
			p.closeConn(c, true)
			return
		}
	}
}

// deliverAt returns when a chunk read now in direction d may be delivered,
// and keeps the count of busy connections.
func (p *Proxy) deliverAt(c *conn, d direction) time.Time {
	p.mu.Lock()
	if d == up && !c.busy && !c.closed {
		c.busy = true
		p.busy++
	}
	busy, base := p.busy, p.delay[d]
	if d == down && c.busy {
		c.busy = false
		p.busy--
	}
	p.mu.Unlock()
	return p.cfg.Clock.Now().Add(base + p.cfg.loadDelay(d, busy))
}

// write delivers q's chunks to dst in order, each once due and not held.
func (p *Proxy) write(c *conn, dst net.Conn, q *queue, d direction) {
	for {
		ch, ok := q.next(c.done)
		if !ok || !p.waitDue(c, ch.at) {
			return
		}
		if ch.eof {
			p.halfClose(c, dst)
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			p.closeConn(c, false)
			return
		}
		p.bytes[d].Add(int64(len(ch.data)))
	}
}

// waitDue waits until at has passed and no partition is on; false means c
// closed first.
func (p *Proxy) waitDue(c *conn, at time.Time) bool {
	for {
		p.mu.Lock()
		held, changed := p.blackhole, p.changed
		p.mu.Unlock()
		var due <-chan time.Time // nil while held: only a change can wake us
		if !held {
			wait := at.Sub(p.cfg.Clock.Now())
			if wait <= 0 {
				return true
			}
			due = p.cfg.Clock.After(wait)
		}
		select {
		case <-due:
		case <-changed:
		case <-c.done:
			return false
		}
	}
}

// halfClose passes a sender's close on to dst; after both, c is done.
func (p *Proxy) halfClose(c *conn, dst net.Conn) {
	cw, ok := dst.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		p.closeConn(c, false)
		return
	}
	p.mu.Lock()
	c.halfClosed++
	both := c.halfClosed == 2
	p.mu.Unlock()
	if both {
		p.closeConn(c, false)
	}
}

// closeConn closes both sides of c, with a reset if asked, and reports
// whether this call closed it.
func (p *Proxy) closeConn(c *conn, reset bool) bool {
	p.mu.Lock()
	if c.closed {
		p.mu.Unlock()
		return false
	}
	c.closed = true
	delete(p.conns, c)
	if c.busy {
		c.busy = false
		p.busy--
	}
	server := c.server
	p.mu.Unlock()
	close(c.done)
	drop(c.client, reset)
	if server != nil {
		drop(server, reset)
	}
	return true
}

// drop closes nc; with reset, the peer gets a TCP RST instead of a FIN, which
// is what a crashed server or a cut cable looks like from the client.
func drop(nc net.Conn, reset bool) {
	if tc, ok := nc.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

// direction is the way bytes travel through the proxy.
type direction int

const (
	up   direction = iota // client to target: requests
	down                  // target to client: replies
)

// loadDelay is the extra delay of a chunk travelling in d while busy
// connections are busy (the chunk's own connection included when it is one).
func (c Config) loadDelay(d direction, busy int) time.Duration {
	if c.DelayFunc != nil {
		u, dn := c.DelayFunc(busy)
		return max([2]time.Duration{u, dn}[d], 0)
	}
	// The slope lands on requests only: holding a request back is how a
	// slower server looks from outside, and it keeps the connection busy for
	// longer, so load feeds back on itself as it does on a real server.
	if d == up && busy > 1 {
		return c.LoadSlope * time.Duration(busy-1)
	}
	return 0
}
