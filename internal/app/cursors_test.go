package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// cursors follows, from the driver's command events, every server cursor a
// client opens, and reports those neither read to their end nor killed (the
// embedded server keeps a SQLite connection for each, MongoDB ten minutes).
type cursors struct {
	mu      sync.Mutex
	started map[int64]startedCmd // by request id
	open    map[int64]string     // cursor id → what opened it
}

type startedCmd struct {
	name, what string
	cursor     int64   // getMore's cursor
	kill       []int64 // killCursors' cursors
}

func newCursors() *cursors {
	return &cursors{started: map[int64]startedCmd{}, open: map[int64]string{}}
}

// cursorCommands return a cursor the client must read to its end or kill.
var cursorCommands = map[string]bool{"find": true, "aggregate": true, "getMore": true, "listCollections": true, "listIndexes": true}

// Monitor returns the command monitor to give the client; next, if not
// nil, sees every event too.
func (c *cursors) Monitor(next *event.CommandMonitor) *event.CommandMonitor {
	return mongotest.Chain(&event.CommandMonitor{Started: c.started1, Succeeded: c.succeeded, Failed: c.failed}, next)
}

func (c *cursors) started1(_ context.Context, e *event.CommandStartedEvent) {
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

func (c *cursors) succeeded(_ context.Context, e *event.CommandSucceededEvent) {
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
	if id, _ := e.Reply.Lookup("cursor", "id").AsInt64OK(); id != 0 {
		c.open[id] = s.what
	}
}

// failed ends a getMore's cursor when the server answered with an error; a
// reply the client gave up on (context, network) leaves every cursor open.
func (c *cursors) failed(_ context.Context, e *event.CommandFailedEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.started[e.RequestID]
	if !ok {
		return
	}
	delete(c.started, e.RequestID)
	var ne net.Error
	unanswered := errors.Is(e.Failure, context.Canceled) || errors.Is(e.Failure, context.DeadlineExceeded) || errors.As(e.Failure, &ne)
	if s.name == "getMore" && !unanswered {
		delete(c.open, s.cursor)
	}
}

// Open returns what opened each cursor still open, sorted.
func (c *cursors) Open() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Values(c.open))
}

// describe names a command by its collection and the filter's or pipeline's
// top-level keys, so a report says which query left its cursor open.
func describe(name string, cmd bson.Raw) string {
	coll, _ := cmd.Lookup(name).StringValueOK()
	var shape []string
	switch name {
	case "find":
		f, _ := cmd.Lookup("filter").DocumentOK()
		els, _ := f.Elements()
		for _, el := range els {
			shape = append(shape, el.Key())
		}
		for _, opt := range []string{"batchSize", "limit"} {
			if n, ok := cmd.Lookup(opt).AsInt64OK(); ok {
				shape = append(shape, fmt.Sprintf("%s=%d", opt, n))
			}
		}
	case "aggregate":
		p, _ := cmd.Lookup("pipeline").ArrayOK()
		vals, _ := p.Values()
		for _, v := range vals {
			st, _ := v.DocumentOK()
			if els, _ := st.Elements(); len(els) > 0 {
				shape = append(shape, els[0].Key())
			}
		}
	}
	return fmt.Sprintf("%s %s %v", name, coll, shape)
}
