package planner

// SequentialWindow is the batch the consumer scorerefresh replaced read per
// poll: the oldest 200 entries.
const SequentialWindow = 200

// Sequential is what a one-at-a-time consumer would do with the same
// backlog, for comparison: it reads the oldest SequentialWindow entries,
// refreshes their distinct users one after another, then deletes the
// window. Its rate falls as the window holds more distinct users, which is
// how it wedges: a diverse backlog slows it down, so the backlog stays
// diverse. scorerefresh's rate does not depend on that, up to its
// concurrency.
type Sequential struct {
	WindowUsers      float64 `json:"windowUsers"`      // distinct users per window, on average
	EntriesPerSecond float64 `json:"entriesPerSecond"` // its drain rate on this backlog
	// KeepsUp says whether it would keep up with the load (false with no
	// load: it drains eventually).
	KeepsUp bool `json:"keepsUp"`
}

func sequential(b *Backlog, c Config, s Server, load float64) *Sequential {
	if len(b.Entries) == 0 {
		return nil
	}
	q := &Sequential{WindowUsers: windowUsers(b, SequentialWindow)}
	lat := s.Latency(1, 1)
	perWindow := q.WindowUsers*float64(c.RoundTrips())*lat + 2*lat // read the window, delete it
	q.EntriesPerSecond = min(float64(SequentialWindow), float64(len(b.Entries))) / perWindow
	q.KeepsUp = load > 0 && q.EntriesPerSecond > load
	return q
}
