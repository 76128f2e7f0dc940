package mongotest

import (
	"context"
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Commands records the commands a client sends and their replies.
type Commands struct {
	// OnStarted, if set, sees each command as it starts, on the goroutine
	// that sends it: a test may hold it there (a hung server) until ctx, the
	// command's, ends. Set it before the client is used.
	OnStarted func(ctx context.Context, c Command)

	mu      sync.Mutex
	cmds    []Command
	pending map[int64]int // request id → index in cmds, until answered
}

// Command is one command sent, and its reply once answered.
type Command struct {
	Name       string
	Collection string   // the command's own collection; "" for database commands
	Body       bson.Raw // the command as sent (a copy)
	Reply      bson.Raw // the reply (a copy); nil until answered, and for a failure
	Failed     bool     // the command failed (an error reply or none)
}

// Monitor returns the command monitor to give the client; next, if not nil, sees every event too.
func (r *Commands) Monitor(next *event.CommandMonitor) *event.CommandMonitor {
	return Chain(&event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			c := Command{Name: e.CommandName, Body: slices.Clone(e.Command)}
			c.Collection, _ = e.Command.Lookup(e.CommandName).StringValueOK()
			r.mu.Lock()
			if r.pending == nil {
				r.pending = map[int64]int{}
			}
			r.pending[e.RequestID] = len(r.cmds)
			r.cmds = append(r.cmds, c)
			r.mu.Unlock()
			if r.OnStarted != nil {
				r.OnStarted(ctx, c)
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			r.answered(e.RequestID, slices.Clone(e.Reply), false)
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) { r.answered(e.RequestID, nil, true) },
	}, next)
}

// Chain returns m, followed by next's functions when next is not nil.
func Chain(m, next *event.CommandMonitor) *event.CommandMonitor {
	if next == nil {
		return m
	}
	return &event.CommandMonitor{
		Started:   both(m.Started, next.Started),
		Succeeded: both(m.Succeeded, next.Succeeded),
		Failed:    both(m.Failed, next.Failed),
	}
}

// both calls f, then g unless g is nil.
func both[E any](f, g func(context.Context, E)) func(context.Context, E) {
	if g == nil {
		return f
	}
	return func(ctx context.Context, e E) {
		f(ctx, e)
		g(ctx, e)
	}
}

func (r *Commands) answered(id int64, reply bson.Raw, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.pending[id]
	if !ok {
		return // sent before the last Take or Reset
	}
	delete(r.pending, id)
	r.cmds[i].Reply, r.cmds[i].Failed = reply, failed
}

// All returns the commands recorded since the last Take or Reset.
func (r *Commands) All() []Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cmds)
}

// Take returns the commands recorded since the last Take or Reset and starts again.
func (r *Commands) Take() []Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.cmds
	r.cmds, r.pending = nil, map[int64]int{}
	return out
}

func (r *Commands) Reset() { r.Take() }

// Count is how many commands since the last Take or Reset are named name, on coll ("" for any).
func (r *Commands) Count(name, coll string) int {
	return len(slices.DeleteFunc(r.All(), func(c Command) bool {
		return c.Name != name || coll != "" && c.Collection != coll
	}))
}

func ByName(cmds []Command) map[string]int {
	n := map[string]int{}
	for _, c := range cmds {
		n[c.Name]++
	}
	return n
}
