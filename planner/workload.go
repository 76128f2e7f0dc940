package planner

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"
)

// Entry is one queue entry as the model sees it. Times are seconds from the
// start of the plan.
type Entry struct {
	User    int32   `json:"user"`
	Created float64 `json:"created"` // enqueue time; negative: it was waiting already
	Arrive  float64 `json:"arrive"`  // when it is in the queue (0 for a backlog)
}

// Backlog is a queue's entries, oldest first, with users numbered from 0.
type Backlog struct {
	Users   int
	Names   []string // by number: the order BacklogBuilder.Add first saw them
	Entries []Entry
}

// BacklogBuilder collects entries from a snapshot or the queue.
type BacklogBuilder struct {
	users map[string]int32
	b     Backlog
}

// NewBacklogBuilder starts an empty backlog.
func NewBacklogBuilder() *BacklogBuilder {
	return &BacklogBuilder{users: map[string]int32{}}
}

// Add records an entry of user enqueued at created.
func (bb *BacklogBuilder) Add(user string, created time.Time) {
	id, ok := bb.users[user]
	if !ok {
		id = int32(len(bb.users))
		bb.users[user] = id
		bb.b.Names = append(bb.b.Names, user)
	}
	// Seconds since the epoch until Build knows the reference.
	bb.b.Entries = append(bb.b.Entries, Entry{User: id, Created: float64(created.UnixNano()) / 1e9})
}

// Build returns the backlog, oldest first, its ages counted from ref.
func (bb *BacklogBuilder) Build(ref time.Time) *Backlog {
	r := float64(ref.UnixNano()) / 1e9
	for i := range bb.b.Entries {
		bb.b.Entries[i].Created -= r
	}
	slices.SortStableFunc(bb.b.Entries, func(x, y Entry) int { return cmp.Compare(x.Created, y.Created) })
	bb.b.Users = len(bb.users)
	return &bb.b
}

// Counts returns each user's number of entries.
func (b *Backlog) Counts() []int {
	n := make([]int, b.Users)
	for _, e := range b.Entries {
		n[e.User]++
	}
	return n
}

// Span is the time between the oldest and the newest entry.
func (b *Backlog) Span() float64 {
	if len(b.Entries) == 0 {
		return 0
	}
	return b.Entries[len(b.Entries)-1].Created - b.Entries[0].Created
}

// The arrival profiles. Max: the backlog is in the queue at the start,
// nothing follows. Original: its entries arrive at their original spacing
// divided by Speed, each aged from its arrival (as a replay with --arrival
// original --shift-to-now stamps them). Rate: the backlog, then Rate entries
// a second for Duration seconds, their users drawn from the backlog's Mix.
const (
	ArrivalMax      = "max"
	ArrivalOriginal = "original"
	ArrivalRate     = "rate"
)

// Arrival is how entries reach the queue.
type Arrival struct {
	Mode     string  `json:"mode"`
	Speed    float64 `json:"speed,omitempty"`
	Rate     float64 `json:"rate,omitempty"`
	Duration float64 `json:"durationSeconds,omitempty"`
	Seed     uint64  `json:"seed,omitempty"`
}

// Schedule lays the backlog out in time under the profile, with the
// transient's burst, oldest first. It returns the entries and the number of
// users they name.
func (b *Backlog) Schedule(a Arrival, tr Transient) ([]Entry, int) {
	out := make([]Entry, 0, len(b.Entries))
	users := b.Users
	for _, e := range b.Entries {
		created, arrive := min(e.Created, 0), 0.0
		if a.Mode == ArrivalOriginal {
			created = (e.Created - b.Entries[0].Created) / a.Speed
			arrive = created
		}
		out = append(out, Entry{User: e.User, Created: created, Arrive: arrive})
	}
	if a.Mode == ArrivalRate {
		rnd := rand.New(rand.NewPCG(a.Seed, 0x91a7))
		unseen := NewMix(b.Counts()).New
		n := int(a.Rate * a.Duration)
		for k := 1; k <= n; k++ {
			t := float64(k) / a.Rate
			var u int32
			if rnd.Float64() < unseen {
				u = int32(users) // a user the backlog has not seen (see Mix)
				users++
			} else {
				u = b.Entries[rnd.IntN(len(b.Entries))].User
			}
			out = append(out, Entry{User: u, Created: t, Arrive: t})
		}
	}
	for range tr.Burst {
		out = append(out, Entry{User: int32(users), Created: tr.At, Arrive: tr.At})
		users++
	}
	slices.SortStableFunc(out, func(x, y Entry) int { return cmp.Compare(x.Created, y.Created) })
	return out, users
}
