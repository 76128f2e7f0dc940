package ops

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/queuestate"
)

// StatusOptions bound what `status` reads. Zero values take the defaults.
type StatusOptions struct {
	Top        int           // users listed: top users, backoffs (default 10)
	Window     int           // documents read for windowed figures (default 10,000)
	ExactLimit int64         // counts are exact up to this, estimated past it (default 100,000)
	LeaseLimit int           // live leases read at most (default 10,000)
	Sample     time.Duration // gap between the two samples of the rates; 0 skips them
	// Wait waits between the two samples (default: sleep Sample); tests change the queue there.
	Wait func(ctx context.Context) error
}

// Status is what `status` reports; its JSON form is the `--json` output
// (kind "status", documented in docs/operator-commands.md).
type Status struct {
	SchemaVersion int       `json:"schemaVersion"`
	Kind          string    `json:"kind"`
	At            time.Time `json:"at"` // the server's clock
	Database      string    `json:"database"`
	Queue         struct {
		Collection       string     `json:"collection"`
		Depth            int64      `json:"depth"`
		DepthExact       bool       `json:"depthExact"`
		OldestCreatedAt  *time.Time `json:"oldestCreatedAt"` // null when empty
		OldestAgeSeconds float64    `json:"oldestAgeSeconds"`
		// Entries still pending whose createdAt lies in the last minute (a lower
		// bound of the minute's arrivals: those already acknowledged are gone).
		PendingLastMinute      int64 `json:"pendingLastMinute"`
		PendingLastMinuteExact bool  `json:"pendingLastMinuteExact"`
	} `json:"queue"`
	// The users with the most entries among the oldest Read entries.
	TopUsers struct {
		Read       int         `json:"read"`       // entries read (the window)
		WholeQueue bool        `json:"wholeQueue"` // the window held every entry
		Malformed  int         `json:"malformed"`  // entries in the window with no usable username
		Users      []UserEntry `json:"users"`
	} `json:"topUsers"`
	Leases struct {
		Held      int           `json:"held"`
		Truncated bool          `json:"truncated"` // more than LeaseLimit: counts are a lower bound
		Owners    []OwnerLeases `json:"owners"`
	} `json:"leases"`
	Backoffs struct {
		Count      int64     `json:"count"`
		CountExact bool      `json:"countExact"`
		Users      []Backoff `json:"users"` // the Top soonest to retry
	} `json:"backoffs"`
	DeadLetters struct {
		Collection string         `json:"collection"`
		Count      int64          `json:"count"`
		CountExact bool           `json:"countExact"`
		OldestAt   *time.Time     `json:"oldestAt"` // deadLetter.at, over the whole collection
		NewestAt   *time.Time     `json:"newestAt"`
		Read       int            `json:"read"`            // the newest Read dead letters give byReason
		WholeSet   bool           `json:"wholeCollection"` // …and that was all of them
		ByReason   []ReasonStatus `json:"byReason"`
	} `json:"deadLetters"`
	Rates *Rates `json:"rates"` // null when not sampled
}

type UserEntry struct {
	Username        string     `json:"username"`
	Entries         int        `json:"entries"`
	OldestCreatedAt time.Time  `json:"oldestCreatedAt"`
	State           string     `json:"state"`           // claimable | held | backing_off
	Owner           string     `json:"owner,omitempty"` // the replica holding it
	Until           *time.Time `json:"until,omitempty"` // lease end or next attempt
}

type OwnerLeases struct {
	Owner           string     `json:"owner"`
	Held            int        `json:"held"`
	OldestClaimedAt *time.Time `json:"oldestClaimedAt"`
	NextExpiry      time.Time  `json:"nextExpiry"`
}

type Backoff struct {
	Username      string    `json:"username"`
	NextAttemptAt time.Time `json:"nextAttemptAt"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"lastError"`
}

type ReasonStatus struct {
	Reason   string    `json:"reason"`
	Count    int       `json:"count"`
	OldestAt time.Time `json:"oldestAt"`
	NewestAt time.Time `json:"newestAt"`
}

type statusRead func(ctx context.Context, colls Collections, now time.Time, opts StatusOptions, s *Status) error

// GatherStatus reads everything `status` reports in a fixed number of
// bounded round trips (16, and 10 more and the wait when opts.Sample is set).
func GatherStatus(ctx context.Context, colls Collections, opts StatusOptions) (*Status, error) {
	opts.Top = cmp.Or(opts.Top, 10)
	opts.Window = cmp.Or(opts.Window, 10_000)
	opts.ExactLimit = cmp.Or(opts.ExactLimit, 100_000)
	opts.LeaseLimit = cmp.Or(opts.LeaseLimit, 10_000)
	if opts.Wait == nil {
		opts.Wait = func(ctx context.Context) error { return clock.Sleep(ctx, clock.Real{}, opts.Sample) }
	}
	now, _, _, err := ServerTime(ctx, colls.DB)
	if err != nil {
		return nil, err
	}
	s := &Status{SchemaVersion: SchemaVersion, Kind: "status", At: now, Database: colls.DB.Name()}
	for _, read := range []statusRead{queueStatus, topUsers, heldLeases, backoffs, deadLetterStatus, sampleRates} {
		if err := read(ctx, colls, now, opts, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func queueStatus(ctx context.Context, colls Collections, now time.Time, opts StatusOptions, s *Status) error {
	q := &s.Queue
	q.Collection = colls.Queue.Name()
	var err error
	if q.Depth, q.DepthExact, err = depth(ctx, colls.Queue, opts.ExactLimit); err != nil {
		return err
	}
	// Dated as the service's SLI sampler dates it, at the same bounded cost.
	oldest, err := queuestate.New(colls.Queue, nil).Oldest(ctx)
	if err != nil {
		return err
	}
	if !oldest.IsZero() {
		q.OldestCreatedAt = &oldest
		q.OldestAgeSeconds = max(0, now.Sub(oldest).Seconds())
	}
	recent := bson.D{{Key: "createdAt", Value: bson.D{{Key: "$gte", Value: now.Add(-time.Minute)}}}}
	if q.PendingLastMinute, q.PendingLastMinuteExact, err = countUpTo(ctx, colls.Queue, recent, opts.ExactLimit); err != nil {
		return fmt.Errorf("counting entries of the last minute: %w", err)
	}
	return nil
}

// topUsers reads the oldest opts.Window entries (the claim window's index,
// in one reply), ranks their users and reads the top ones' leases.
func topUsers(ctx context.Context, colls Collections, now time.Time, opts StatusOptions, s *Status) error {
	window, err := findAll[stored](ctx, colls.Queue, bson.D{}, options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(int64(opts.Window)).SetBatchSize(int32(opts.Window)).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}), fmt.Sprintf("reading the oldest %d entries", opts.Window))
	if err != nil {
		return err
	}
	t := &s.TopUsers
	t.Read, t.WholeQueue = len(window), len(window) < opts.Window || int64(len(window)) >= s.Queue.Depth
	byUser := map[string]UserEntry{}
	for _, e := range window {
		name, ok := e.Username.StringValueOK()
		if !ok || name == "" {
			t.Malformed++
			continue
		}
		created, dated := e.CreatedAt.TimeOK() // else its ObjectId's time, without a createdAt
		if oid, ok := e.ID.ObjectIDOK(); ok && (e.CreatedAt.Type == 0 || e.CreatedAt.Type == bson.TypeNull) {
			created, dated = oid.Timestamp(), true
		}
		u := cmp.Or(byUser[name], UserEntry{Username: name, State: consumer.LeaseClaimable})
		u.Entries++
		if dated && (u.OldestCreatedAt.IsZero() || created.Before(u.OldestCreatedAt)) {
			u.OldestCreatedAt = created
		}
		byUser[name] = u
	}
	// Most entries first, the oldest entry first among equals.
	t.Users = slices.SortedFunc(maps.Values(byUser), func(a, b UserEntry) int {
		return cmp.Or(cmp.Compare(b.Entries, a.Entries), a.OldestCreatedAt.Compare(b.OldestCreatedAt), cmp.Compare(a.Username, b.Username))
	})
	t.Users = t.Users[:min(len(t.Users), opts.Top)]
	if len(t.Users) == 0 {
		return nil
	}
	// Their lease states, in one round trip by _id.
	names, index := make(bson.A, len(t.Users)), map[string]int{}
	for i, u := range t.Users {
		names[i], index[u.Username] = u.Username, i
	}
	docs, err := findAll[consumer.LeaseDoc](ctx, colls.Claims, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: names}}}},
		options.Find().SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "owner", Value: 1}, {Key: "leaseUntil", Value: 1}}),
		"reading the top users' leases")
	if err != nil {
		return err
	}
	for _, d := range docs {
		name, ok := d.User()
		if i, listed := index[name]; ok && listed {
			u := &t.Users[i]
			if u.State = d.State(now); u.State != consumer.LeaseClaimable {
				until, _ := d.Until()
				u.Until = &until
				u.Owner = map[bool]string{true: d.OwnerName()}[u.State == consumer.LeaseHeld]
			}
		}
	}
	return nil
}

// WriteStatus prints s for a human.
func WriteStatus(w io.Writer, s *Status) error {
	return table(w, func(p func(string, ...any)) {
		p("scorerefresh status: database %s, %s (server clock)\n\n", s.Database, stamp(s.At))
		q := s.Queue
		p("queue %s\n", q.Collection)
		p("  depth                %s\n", count(q.Depth, q.DepthExact))
		if q.OldestCreatedAt == nil {
			p("  oldest entry         none (empty)\n")
		} else {
			p("  oldest entry         %s (age %s)\n", stamp(*q.OldestCreatedAt), (time.Duration(q.OldestAgeSeconds) * time.Second).Round(time.Second))
		}
		p("  pending, last minute %s (still waiting, createdAt within the last minute)\n\n", count(q.PendingLastMinute, q.PendingLastMinuteExact))
		writeUsers(p, s)
		d := s.DeadLetters
		p("\ndead letters %s: %s", d.Collection, count(d.Count, d.CountExact))
		if d.OldestAt != nil {
			p(", oldest %s, newest %s", stamp(*d.OldestAt), stamp(*d.NewestAt))
		}
		p("\n")
		if len(d.ByReason) > 0 {
			p("  by reason (%s):\n", map[bool]string{true: "all of them", false: fmt.Sprintf("the newest %d only", d.Read)}[d.WholeSet])
			p("  REASON\tCOUNT\tOLDEST\tNEWEST\n")
			for _, r := range d.ByReason {
				p("  %s\t%d\t%s\t%s\n", r.Reason, r.Count, stamp(r.OldestAt), stamp(r.NewestAt))
			}
		}
		if r := s.Rates; r == nil {
			p("\nrates: not sampled (--sample 0)\n")
		} else {
			p("\nrates over %.1fs (lower bounds: entries enqueued and acknowledged between the two samples are in neither):\n", r.SampleSeconds)
			p("  arrivals       %7.1f/s (%d)\n", r.ArrivalsPerSecond, r.Arrived)
			p("  acknowledged   %7.1f/s (%d, removals %d minus dead letters)\n", r.AckedPerSecond, r.Acked, r.Removed)
			p("  dead-lettered  %7.1f/s (%d)\n", r.DeadLetteredPerSecond, r.DeadLettered)
			if !r.Exact {
				p("  (from estimated counts: the collections are past --exact-limit)\n")
			}
		}
	})
}

func writeUsers(p func(string, ...any), s *Status) {
	t := s.TopUsers
	p("top users among the oldest %d entries (%s)\n", t.Read, map[bool]string{true: "the whole queue", false: "a window: the queue holds more; --window reads more"}[t.WholeQueue])
	p("  USER\tENTRIES\tOLDEST\tSTATE\n")
	for _, u := range t.Users {
		state := u.State
		switch {
		case u.State == consumer.LeaseHeld:
			state = fmt.Sprintf("held by %s until %s", u.Owner, stamp(*u.Until))
		case u.Until != nil:
			state = fmt.Sprintf("backing off until %s", stamp(*u.Until))
		}
		p("  %s\t%d\t%s\t%s\n", clip(u.Username, 40), u.Entries, stamp(u.OldestCreatedAt), state)
	}
	if t.Malformed > 0 {
		p("  %d entries in the window have no usable username (the consumer dead-letters them as malformed)\n", t.Malformed)
	}
	l := s.Leases
	p("\nleases held: %d%s\n", l.Held, map[bool]string{true: " (at least: only the first --lease-limit were read)"}[l.Truncated])
	if len(l.Owners) > 0 {
		p("  OWNER (REPLICA)\tHELD\tOLDEST CLAIM\tNEXT EXPIRY\n")
		for _, o := range l.Owners {
			p("  %s\t%d\t%s\t%s\n", o.Owner, o.Held, stamp(*cmp.Or(o.OldestClaimedAt, new(time.Time))), stamp(o.NextExpiry))
		}
	}
	b := s.Backoffs
	p("users backing off: %s\n", count(b.Count, b.CountExact))
	if len(b.Users) > 0 {
		p("  USER\tNEXT ATTEMPT\tATTEMPTS\tLAST ERROR\n")
		for _, u := range b.Users {
			p("  %s\t%s\t%d\t%s\n", clip(u.Username, 40), stamp(u.NextAttemptAt), u.Attempts, clip(u.LastError, 80))
		}
	}
}

// table renders write's lines, their tab-separated cells aligned as columns
// (a line without a tab ends a table), and writes them to w at once.
func table(w io.Writer, write func(p func(format string, args ...any))) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	write(func(format string, args ...any) { fmt.Fprintf(tw, format, args...) })
	tw.Flush()
	_, err := w.Write(b.Bytes())
	return err
}

func count(n int64, exact bool) string {
	return fmt.Sprintf(map[bool]string{true: "%d", false: "~%d (estimated)"}[exact], n)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// clip shortens s for a table cell and keeps it on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// heldLeases reads up to opts.LeaseLimit live, held leases (the leaseUntil
// index) and groups them per owner.
func heldLeases(ctx context.Context, colls Collections, now time.Time, opts StatusOptions, st *Status) error {
	limit := opts.LeaseLimit
	docs, err := findAll[consumer.LeaseDoc](ctx, colls.Claims, consumer.HeldFilter(now),
		options.Find().SetLimit(int64(limit)+1).SetBatchSize(int32(min(limit+1, 100_000))).
			SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "owner", Value: 1}, {Key: "leaseUntil", Value: 1}, {Key: "claimedAt", Value: 1}}),
		"reading held leases")
	if err != nil {
		return err
	}
	s := &st.Leases
	s.Truncated = len(docs) > limit
	byOwner := map[string]OwnerLeases{}
	for _, d := range docs[:min(len(docs), limit)] {
		if _, ok := d.User(); ok && d.State(now) == consumer.LeaseHeld {
			s.Held++
			until, _ := d.Until()
			o := cmp.Or(byOwner[d.OwnerName()], OwnerLeases{Owner: d.OwnerName(), NextExpiry: until})
			o.Held++
			if until.Before(o.NextExpiry) {
				o.NextExpiry = until
			}
			if at := d.ClaimedAtTime(); !at.IsZero() && (o.OldestClaimedAt == nil || at.Before(*o.OldestClaimedAt)) {
				o.OldestClaimedAt = &at
			}
			byOwner[d.OwnerName()] = o
		}
	}
	s.Owners = slices.AppendSeq(make([]OwnerLeases, 0, len(byOwner)), maps.Values(byOwner))
	slices.SortFunc(s.Owners, func(a, b OwnerLeases) int { return cmp.Or(cmp.Compare(b.Held, a.Held), cmp.Compare(a.Owner, b.Owner)) })
	return nil
}

// backoffs counts the users backing off (up to the exact limit) and lists
// the opts.Top whose next attempt comes first.
func backoffs(ctx context.Context, colls Collections, now time.Time, opts StatusOptions, st *Status) error {
	filter, s := consumer.BackingOffFilter(now), &st.Backoffs
	var err error
	if s.Count, s.CountExact, err = countUpTo(ctx, colls.Claims, filter, opts.ExactLimit); err != nil {
		return fmt.Errorf("counting users backing off: %w", err)
	}
	docs, err := findAll[consumer.LeaseDoc](ctx, colls.Claims, filter, options.Find().SetSort(bson.D{{Key: "leaseUntil", Value: 1}}).SetLimit(int64(opts.Top)).
		SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "leaseUntil", Value: 1}, {Key: "attempts", Value: 1}, {Key: "lastError", Value: 1}}), "reading users backing off")
	if err != nil {
		return err
	}
	s.Users = []Backoff{}
	for _, d := range docs {
		if u, ok := d.User(); ok && d.State(now) == consumer.LeaseBackingOff {
			until, _ := d.Until()
			attempts, _ := d.Count()
			s.Users = append(s.Users, Backoff{Username: u, NextAttemptAt: until, Attempts: attempts, LastError: d.LastErrorText()})
		}
	}
	return nil
}

// RatesMethod says how Rates are derived, in the report itself.
const RatesMethod = "two samples Sample apart: arrived = entries with createdAt at or after the first sample still pending at the second; " +
	"removed = depth1 + arrived - depth2; deadLettered = growth of the dead letters; acked = removed - deadLettered. " +
	"Entries that arrive and are acknowledged between the samples are in neither arrived nor acked, so both are lower bounds; " +
	"entries without createdAt, or dated by a producer clock behind the server's, are not counted as arrivals"

// Rates are arrivals against acknowledgements, from two samples of the
// collections. The queue cannot tell an acknowledgement from a dead letter or
// a purge: acks are the removals less the dead letters' growth.
type Rates struct {
	SampleSeconds         float64 `json:"sampleSeconds"`
	Arrived               int64   `json:"arrived"`
	Removed               int64   `json:"removed"`
	DeadLettered          int64   `json:"deadLettered"`
	Acked                 int64   `json:"acked"`
	ArrivalsPerSecond     float64 `json:"arrivalsPerSecond"`
	AckedPerSecond        float64 `json:"ackedPerSecond"`
	DeadLetteredPerSecond float64 `json:"deadLetteredPerSecond"`
	Exact                 bool    `json:"exact"` // every count behind them was exact, not estimated
	Method                string  `json:"method"`
}

// sampleRates counts the queue and the dead letters twice, opts.Wait apart
// (unless opts.Sample is 0), then the arrivals since the first count (by the
// server's clock, as producers date entries).
func sampleRates(ctx context.Context, colls Collections, _ time.Time, opts StatusOptions, s *Status) error {
	if opts.Sample <= 0 {
		return nil
	}
	since, _, _, err := ServerTime(ctx, colls.DB)
	if err != nil {
		return err
	}
	var depths [2][2]int64 // [sample][queue, dead letters]
	var at [2]time.Time    // local monotonic clock, for the elapsed time
	r := Rates{Exact: true, Method: RatesMethod}
	for i := range 2 {
		if i == 1 {
			if err := opts.Wait(ctx); err != nil {
				return fmt.Errorf("waiting between the rate samples: %w", err)
			}
		}
		at[i] = time.Now()
		for j, coll := range []*mongo.Collection{colls.Queue, colls.DeadLetter} {
			n, exact, err := depth(ctx, coll, opts.ExactLimit)
			if err != nil {
				return err
			}
			depths[i][j], r.Exact = n, r.Exact && exact
		}
	}
	arrived, exact, err := countUpTo(ctx, colls.Queue, bson.D{{Key: "createdAt", Value: bson.D{{Key: "$gte", Value: since}}}}, opts.ExactLimit)
	if err != nil {
		return fmt.Errorf("counting arrivals since the first sample: %w", err)
	}
	secs := at[1].Sub(at[0]).Seconds()
	r.SampleSeconds, r.Arrived, r.Exact = secs, arrived, r.Exact && exact
	r.Removed = max(0, depths[0][0]+arrived-depths[1][0])
	r.DeadLettered = max(0, depths[1][1]-depths[0][1])
	r.Acked = max(0, r.Removed-r.DeadLettered)
	if secs > 0 {
		r.ArrivalsPerSecond = float64(r.Arrived) / secs
		r.AckedPerSecond = float64(r.Acked) / secs
		r.DeadLetteredPerSecond = float64(r.DeadLettered) / secs
	}
	s.Rates = &r
	return nil
}

// deadLetterStatus counts the dead letters, dates the oldest and newest (the
// deadLetter.at index) and groups the newest opts.Window by reason.
func deadLetterStatus(ctx context.Context, colls Collections, _ time.Time, opts StatusOptions, st *Status) error {
	dead, s := colls.DeadLetter, &st.DeadLetters
	s.Collection = dead.Name()
	var err error
	if s.Count, s.CountExact, err = depth(ctx, dead, opts.ExactLimit); err != nil {
		return err
	}
	for i, edge := range []**time.Time{&s.OldestAt, &s.NewestAt} {
		var d stored
		err := dead.FindOne(ctx, bson.D{{Key: "deadLetter.at", Value: bson.D{{Key: "$type", Value: "date"}}}},
			options.FindOne().SetSort(bson.D{{Key: "deadLetter.at", Value: 1 - 2*i}}).SetProjection(bson.D{{Key: "deadLetter.at", Value: 1}})).Decode(&d)
		switch {
		case err == nil:
			*edge = &d.DeadLetter.At
		case !errors.Is(err, mongo.ErrNoDocuments):
			return fmt.Errorf("reading the %s dead letter: %w", []string{"oldest", "newest"}[i], err)
		}
	}
	docs, err := findAll[stored](ctx, dead, bson.D{}, options.Find().SetSort(bson.D{{Key: "deadLetter.at", Value: -1}}).
		SetLimit(int64(opts.Window)).SetBatchSize(int32(opts.Window)).
		SetProjection(bson.D{{Key: "deadLetter.reason", Value: 1}, {Key: "deadLetter.at", Value: 1}}), fmt.Sprintf("reading the newest %d dead letters", opts.Window))
	if err != nil {
		return err
	}
	s.Read, s.WholeSet = len(docs), len(docs) < opts.Window || int64(len(docs)) >= s.Count
	by := map[string]ReasonStatus{}
	for _, d := range docs {
		reason := cmp.Or(d.DeadLetter.Reason, "(none)")
		r := cmp.Or(by[reason], ReasonStatus{Reason: reason, OldestAt: d.DeadLetter.At, NewestAt: d.DeadLetter.At})
		r.Count++
		if d.DeadLetter.At.Before(r.OldestAt) {
			r.OldestAt = d.DeadLetter.At
		}
		if d.DeadLetter.At.After(r.NewestAt) {
			r.NewestAt = d.DeadLetter.At
		}
		by[reason] = r
	}
	s.ByReason = slices.AppendSeq(make([]ReasonStatus, 0, len(by)), maps.Values(by))
	slices.SortFunc(s.ByReason, func(a, b ReasonStatus) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	return nil
}
