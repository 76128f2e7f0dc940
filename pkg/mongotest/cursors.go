package mongotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Cursors follows, from the driver's command events, every server cursor a
// client opens, and reports the ones it left open: a cursor neither read to
// its end (a reply with cursor id 0) nor killed. The embedded server keeps a
// SQLite connection for each such cursor until the client's connection
// closes, and MongoDB keeps the cursor for ten minutes: a service that
// abandons cursors jams the one and piles up work on the other. Neither
// server counts them for us (currentOp is empty on the embedded server), so
// the test watches what was asked and answered.
//
// A cursor-returning command whose reply the client never read (its context
// ended first) may have opened a cursor nobody can name: those are reported
// too, as abandoned.
type Cursors struct {
	mu        sync.Mutex
	started   map[int64]startedCmd // by request id
	open      map[int64]string     // cursor id → what opened it
	abandoned []string
}

type startedCmd struct {
	name, what string
	cursor     int64   // getMore's cursor
	kill       []int64 // killCursors' cursors
}

// NewCursors returns an empty tracker.
func NewCursors() *Cursors {
	return &Cursors{started: map[int64]startedCmd{}, open: map[int64]string{}}
}

// cursorCommands return a cursor the client must read to its end or kill.
var cursorCommands = map[string]bool{"find": true, "aggregate": true, "getMore": true, "listCollections": true, "listIndexes": true}

// Monitor returns the command monitor to give the client; next, if not
// nil, sees every event too.
func (c *Cursors) Monitor(next *event.CommandMonitor) *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			c.started1(e)
			if next != nil && next.Started != nil {
				next.Started(ctx, e)
			}
		},
		Succeeded: func(ctx context.Context, e *event.CommandSucceededEvent) {
			c.succeeded(e)
			if next != nil && next.Succeeded != nil {
				next.Succeeded(ctx, e)
			}
		},
		Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
			c.failed(e)
			if next != nil && next.Failed != nil {
				next.Failed(ctx, e)
			}
		},
	}
}

func (c *Cursors) started1(e *event.CommandStartedEvent) {
	if !cursorCommands[e.CommandName] && e.CommandName != "killCursors" {
		return
	}
	s := startedCmd{name: e.CommandName, what: describe(e.CommandName, e.Command)}
	switch e.CommandName {
	case "getMore":
		s.cursor, _ = e.Command.Lookup("getMore").AsInt64OK()
	case "killCursors":
		arr, _ := e.Command.Lookup("cursors").ArrayOK()
		vals, _ := arr.Values()
		for _, v := range vals {
			if id, ok := v.AsInt64OK(); ok {
				s.kill = append(s.kill, id)
			}
		}
	}
	c.mu.Lock()
	c.started[e.RequestID] = s
	c.mu.Unlock()
}

func (c *Cursors) succeeded(e *event.CommandSucceededEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.started[e.RequestID]
	if !ok {
		return
	}
	delete(c.started, e.RequestID)
	switch s.name {
	case "killCursors":
		for _, id := range s.kill {
			delete(c.open, id)
		}
		return
	case "getMore":
		s.what = c.open[s.cursor]
		delete(c.open, s.cursor)
	}
	id, _ := e.Reply.Lookup("cursor", "id").AsInt64OK()
	if id != 0 {
		c.open[id] = s.what
	}
}

func (c *Cursors) failed(e *event.CommandFailedEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.started[e.RequestID]
	if !ok {
		return
	}
	delete(c.started, e.RequestID)
	if !unanswered(e.Failure) {
		// The server answered with an error: it opened no cursor, and a
		// getMore that fails ends its cursor there.
		if s.name == "getMore" {
			delete(c.open, s.cursor)
		}
		return
	}
	switch s.name {
	case "killCursors":
		// The cursors stay open: the server never heard.
	case "getMore":
		// Still open on the server, with a batch nobody read.
	default:
		c.abandoned = append(c.abandoned, s.what)
	}
}

// unanswered reports a failure where the client gave up on the reply: the
// server may still have run the command.
func unanswered(err error) bool {
	var ne net.Error
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne)
}

// Open returns what opened each cursor still open, sorted.
func (c *Cursors) Open() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.open))
	for _, w := range c.open {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// Abandoned returns the cursor-returning commands whose reply was never read.
func (c *Cursors) Abandoned() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.abandoned)
}

// describe names a command by what it read: the command, the collection
// and the filter's or pipeline's top-level keys, so a report says which
// query of the service left its cursor open.
func describe(name string, cmd bson.Raw) string {
	coll, _ := cmd.Lookup(name).StringValueOK()
	var shape []string
	switch name {
	case "find":
		if f, ok := cmd.Lookup("filter").DocumentOK(); ok {
			els, _ := f.Elements()
			for _, el := range els {
				shape = append(shape, el.Key())
			}
		}
		if b, ok := cmd.Lookup("batchSize").AsInt64OK(); ok {
			shape = append(shape, fmt.Sprintf("batchSize=%d", b))
		}
		if l, ok := cmd.Lookup("limit").AsInt64OK(); ok {
			shape = append(shape, fmt.Sprintf("limit=%d", l))
		}
	case "aggregate":
		if p, ok := cmd.Lookup("pipeline").ArrayOK(); ok {
			vals, _ := p.Values()
			for _, v := range vals {
				if st, ok := v.DocumentOK(); ok {
					els, _ := st.Elements()
					if len(els) > 0 {
						shape = append(shape, els[0].Key())
					}
				}
			}
		}
	}
	return fmt.Sprintf("%s %s %v", name, coll, shape)
}
