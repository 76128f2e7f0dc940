// Package backlog generates synthetic queue backlogs for the bench, the demo
// and `backlog generate`, so a shape means the same thing in all three.
package backlog

import (
	"cmp"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Shape is the distribution of users over a backlog.
type Shape string

// The shapes. User 0 is the hot user where a shape has one.
const (
	// Firehose: a share Spec.Hot of the entries belongs to user 0 (a bulk
	// import, a bot), the rest to users at random: coalescing does the work.
	Firehose Shape = "firehose"
	// Diverse: every entry's user is drawn uniformly, so the claim window
	// holds as many distinct users as it can: the metastable wedge's trigger.
	Diverse Shape = "diverse"
	// Zipf: users drawn from a Zipf law (s=1.1), as real activity is: a few hot, a long tail.
	Zipf Shape = "zipf"
	// Mixed: 40% user 0, 30% Zipf, 30% uniform: a firehose and a diverse tail at once.
	Mixed Shape = "mixed"
	// Distinct: the users in a random order without repeats, starting over
	// once every user had an entry: n entries of n users are n refreshes.
	Distinct Shape = "distinct"
)

// FirehoseShare is the hot user's share of `backlog generate --shape firehose`.
const FirehoseShare = 0.9

// Spec is a backlog: how many entries, over how many users, in what shape,
// enqueued evenly over Span up to End (the newest entry's time).
type Spec struct {
	Shape          Shape
	Entries, Users int
	Hot            float64       // Firehose only: user 0's share of the entries
	Span           time.Duration // default 10 minutes
	End            time.Time     // default now
}

// Entry is one generated queue entry: its user's number and enqueue time.
type Entry struct {
	User int
	At   time.Time
}

// Generator yields a Spec's entries oldest first, from a random source the
// caller may keep drawing from between entries (replay jitters the times).
type Generator struct {
	pick  func() int
	start time.Time
	step  time.Duration
	i     int
}

func New(s Spec, rnd *rand.Rand) *Generator {
	end := cmp.Or(s.End, time.Now())
	step := cmp.Or(s.Span, 10*time.Minute) / time.Duration(max(s.Entries, 1))
	return &Generator{pick: Picker(s.Shape, rnd, max(s.Users, 1), s.Hot), step: step, start: end.Add(-step * time.Duration(max(s.Entries-1, 0)))}
}

// Step is the time between two entries.
func (g *Generator) Step() time.Duration { return g.step }

func (g *Generator) Next() Entry {
	g.i++
	return Entry{User: g.pick(), At: g.start.Add(time.Duration(g.i-1) * g.step)}
}

func Generate(s Spec, rnd *rand.Rand) []Entry {
	g := New(s, rnd)
	out := make([]Entry, s.Entries)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// Picker returns a function drawing the number of the next entry's user in
// [0, users) for shape; hot is Firehose's share of user 0.
func Picker(shape Shape, rnd *rand.Rand, users int, hot float64) func() int {
	uniform := func() int { return rnd.IntN(users) }
	zipf := uniform
	if users > 1 {
		z := rand.NewZipf(rnd, 1.1, 1, uint64(users-1))
		zipf = func() int { return int(z.Uint64()) }
	}
	// pick draws f in [0, 1): user 0 below p0, zipf's below pz, else uniform's.
	pick := func(p0, pz float64) func() int {
		return func() int {
			switch f := rnd.Float64(); {
			case f < p0:
				return 0
			case f < pz:
				return zipf()
			}
			return uniform()
		}
	}
	switch shape {
	case Firehose:
		return pick(hot, hot)
	case Zipf:
		return zipf
	case Mixed:
		return pick(0.4, 0.7)
	case Distinct:
		perm, i := rnd.Perm(users), -1
		return func() int { i++; return perm[i%users] }
	}
	return uniform
}

// Activity is user_activity documents {username, points, at} for entries, as
// the demo's rules and the example scorers read them: one for a user's first
// entry and one later entry in 20 (the embedded server scans the collection
// per query). want is each user's expected score, count×perDoc + the points.
func Activity(entries []Entry, name func(int) string, rnd *rand.Rand, perDoc float64) (docs []any, want map[string]float64) {
	want = map[string]float64{}
	for _, e := range entries {
		u := name(e.User)
		if _, seen := want[u]; !seen || rnd.IntN(20) == 0 {
			points := float64(1 + rnd.IntN(10))
			docs = append(docs, bson.D{{Key: "username", Value: u}, {Key: "points", Value: points}, {Key: "at", Value: e.At}})
			want[u] += points + perDoc
		}
	}
	return docs, want
}

// QueueDocs is entries as producers enqueue them, tagged with source.
func QueueDocs(entries []Entry, name func(int) string, source string) []any {
	docs := make([]any, len(entries))
	for i, e := range entries {
		docs[i] = bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(e.At)}, {Key: "username", Value: name(e.User)},
			{Key: "createdAt", Value: e.At}, {Key: "source", Value: source}}
	}
	return docs
}
