package ops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

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
	// Wait waits between the two samples; default: sleep Sample (tests
	// change the queue here instead).
	Wait func(ctx context.Context) error
}

// Status is what `status` reports; its JSON form is the `--json` output
// (kind "status", documented in docs/operator-commands.md).
type Status struct {
	SchemaVersion int              `json:"schemaVersion"`
	Kind          string           `json:"kind"`
	At            time.Time        `json:"at"` // the server's clock
	Database      string           `json:"database"`
	Queue         QueueStatus      `json:"queue"`
	TopUsers      TopUsers         `json:"topUsers"`
	Leases        LeaseStatus      `json:"leases"`
	Backoffs      BackoffStatus    `json:"backoffs"`
	DeadLetters   DeadLetterStatus `json:"deadLetters"`
	Rates         *Rates           `json:"rates"` // null when not sampled
}

// QueueStatus is the queue's size and age.
type QueueStatus struct {
	Collection       string     `json:"collection"`
	Depth            int64      `json:"depth"`
	DepthExact       bool       `json:"depthExact"`
	OldestCreatedAt  *time.Time `json:"oldestCreatedAt"` // null when empty
	OldestAgeSeconds float64    `json:"oldestAgeSeconds"`
	// Entries still pending whose createdAt lies in the last minute (a lower
	// bound of the minute's arrivals: those already acknowledged are gone).
	PendingLastMinute      int64 `json:"pendingLastMinute"`
	PendingLastMinuteExact bool  `json:"pendingLastMinuteExact"`
}

// TopUsers are the users with the most entries among the oldest Read entries.
type TopUsers struct {
	Read       int         `json:"read"`       // entries read (the window)
	WholeQueue bool        `json:"wholeQueue"` // the window held every entry
	Malformed  int         `json:"malformed"`  // entries in the window with no usable username
	Users      []UserEntry `json:"users"`
}

// UserEntry is one user's entries in the window and its lease state.
type UserEntry struct {
	Username        string     `json:"username"`
	Entries         int        `json:"entries"`
	OldestCreatedAt time.Time  `json:"oldestCreatedAt"`
	State           string     `json:"state"`           // claimable | held | backing_off
	Owner           string     `json:"owner,omitempty"` // the replica holding it
	Until           *time.Time `json:"until,omitempty"` // lease end or next attempt
}

// LeaseStatus counts the leases held now, per replica.
type LeaseStatus struct {
	Held      int           `json:"held"`
	Truncated bool          `json:"truncated"` // more than LeaseLimit: counts are a lower bound
	Owners    []OwnerLeases `json:"owners"`
}

// OwnerLeases is one replica's leases.
type OwnerLeases struct {
	Owner           string     `json:"owner"`
	Held            int        `json:"held"`
	OldestClaimedAt *time.Time `json:"oldestClaimedAt"`
	NextExpiry      time.Time  `json:"nextExpiry"`
}

// BackoffStatus is the users waiting out a backoff after a failed refresh.
type BackoffStatus struct {
	Count      int64     `json:"count"`
	CountExact bool      `json:"countExact"`
	Users      []Backoff `json:"users"` // the Top soonest to retry
}

// Backoff is one user backing off.
type Backoff struct {
	Username      string    `json:"username"`
	NextAttemptAt time.Time `json:"nextAttemptAt"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"lastError"`
}

// DeadLetterStatus is the dead-letter collection by reason and age.
type DeadLetterStatus struct {
	Collection string         `json:"collection"`
	Count      int64          `json:"count"`
	CountExact bool           `json:"countExact"`
	OldestAt   *time.Time     `json:"oldestAt"` // deadLetter.at, over the whole collection
	NewestAt   *time.Time     `json:"newestAt"`
	Read       int            `json:"read"`            // the newest Read dead letters give byReason
	WholeSet   bool           `json:"wholeCollection"` // …and that was all of them
	ByReason   []ReasonStatus `json:"byReason"`
}

// ReasonStatus is one dead-letter reason.
type ReasonStatus struct {
	Reason   string    `json:"reason"`
	Count    int       `json:"count"`
	OldestAt time.Time `json:"oldestAt"`
	NewestAt time.Time `json:"newestAt"`
}

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
	if s.Queue, err = queueStatus(ctx, colls.Queue, now, opts); err != nil {
		return nil, err
	}
	if s.TopUsers, err = topUsers(ctx, colls, opts, s.Queue.Depth, now); err != nil {
		return nil, err
	}
	if s.Leases, err = heldLeases(ctx, colls.Claims, now, opts.LeaseLimit); err != nil {
		return nil, err
	}
	if s.Backoffs, err = backoffs(ctx, colls.Claims, now, opts); err != nil {
		return nil, err
	}
	if s.DeadLetters, err = deadLetterStatus(ctx, colls.DeadLetter, opts); err != nil {
		return nil, err
	}
	if opts.Sample > 0 {
		if s.Rates, err = sampleRates(ctx, colls, opts); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func queueStatus(ctx context.Context, queue *mongo.Collection, now time.Time, opts StatusOptions) (QueueStatus, error) {
	q := QueueStatus{Collection: queue.Name()}
	var err error
	if q.Depth, q.DepthExact, err = depth(ctx, queue, opts.ExactLimit); err != nil {
		return q, err
	}
	// Dated as the service's SLI sampler dates it, at the same bounded cost.
	oldest, err := queuestate.New(queue, nil).Oldest(ctx)
	if err != nil {
		return q, err
	}
	if !oldest.IsZero() {
		q.OldestCreatedAt = &oldest
		q.OldestAgeSeconds = max(0, now.Sub(oldest).Seconds())
	}
	recent := bson.D{{Key: "createdAt", Value: bson.D{{Key: "$gte", Value: now.Add(-time.Minute)}}}}
	if q.PendingLastMinute, q.PendingLastMinuteExact, err = countUpTo(ctx, queue, recent, opts.ExactLimit); err != nil {
		return q, fmt.Errorf("counting entries of the last minute: %w", err)
	}
	return q, nil
}

// windowEntry is the projection the windowed reads take of a queue entry:
// never the whole document, which a producer may have made huge.
type windowEntry struct {
	ID        bson.RawValue `bson:"_id"`
	Username  bson.RawValue `bson:"username"`
	CreatedAt bson.RawValue `bson:"createdAt"`
}

// topUsers reads the oldest opts.Window entries (the claim window's index,
// in one reply), ranks their users and reads the top ones' leases.
func topUsers(ctx context.Context, colls Collections, opts StatusOptions, depth int64, now time.Time) (TopUsers, error) {
	window, err := findAll[windowEntry](ctx, colls.Queue, bson.D{}, options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(int64(opts.Window)).SetBatchSize(int32(opts.Window)).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}), fmt.Sprintf("reading the oldest %d entries", opts.Window))
	if err != nil {
		return TopUsers{}, err
	}
	t := TopUsers{Read: len(window), WholeQueue: len(window) < opts.Window || int64(len(window)) >= depth}
	byUser := map[string]*UserEntry{}
	for _, e := range window {
		name, ok := e.Username.StringValueOK()
		if !ok || name == "" {
			t.Malformed++
			continue
		}
		created, ok := entryTime(e)
		u := byUser[name]
		if u == nil {
			u = &UserEntry{Username: name, OldestCreatedAt: created, State: consumer.LeaseClaimable}
			byUser[name] = u
		}
		u.Entries++
		if ok && (u.OldestCreatedAt.IsZero() || created.Before(u.OldestCreatedAt)) {
			u.OldestCreatedAt = created
		}
	}
	for _, u := range byUser {
		t.Users = append(t.Users, *u)
	}
	// Most entries first, the oldest entry first among equals.
	slices.SortFunc(t.Users, func(a, b UserEntry) int {
		return cmp.Or(cmp.Compare(b.Entries, a.Entries), a.OldestCreatedAt.Compare(b.OldestCreatedAt), cmp.Compare(a.Username, b.Username))
	})
	t.Users = t.Users[:min(len(t.Users), opts.Top)]
	return t, annotateLeases(ctx, colls.Claims, t.Users, now)
}

// entryTime is an entry's createdAt, or its ObjectId's time without one.
func entryTime(e windowEntry) (time.Time, bool) {
	if e.CreatedAt.Type == bson.TypeDateTime {
		return e.CreatedAt.Time(), true
	}
	if oid, ok := e.ID.ObjectIDOK(); ok && (e.CreatedAt.Type == 0 || e.CreatedAt.Type == bson.TypeNull) {
		return oid.Timestamp(), true
	}
	return time.Time{}, false
}
