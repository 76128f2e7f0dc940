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
)

// heldLeases reads up to limit live, held leases (the leaseUntil index) and
// groups them per owner.
func heldLeases(ctx context.Context, claims *mongo.Collection, now time.Time, limit int) (LeaseStatus, error) {
	docs, err := findAll[consumer.LeaseDoc](ctx, claims, consumer.HeldFilter(now),
		options.Find().SetLimit(int64(limit)+1).SetBatchSize(int32(min(limit+1, 100_000))).
			SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "owner", Value: 1}, {Key: "leaseUntil", Value: 1}, {Key: "claimedAt", Value: 1}}),
		"reading held leases")
	if err != nil {
		return LeaseStatus{}, err
	}
	s := LeaseStatus{Truncated: len(docs) > limit}
	byOwner := map[string]*OwnerLeases{}
	for _, d := range docs[:min(len(docs), limit)] {
		if _, ok := d.User(); !ok || d.State(now) != consumer.LeaseHeld {
			continue
		}
		s.Held++
		until, _ := d.Until()
		o := byOwner[d.OwnerName()]
		if o == nil {
			o = &OwnerLeases{Owner: d.OwnerName(), NextExpiry: until}
			byOwner[d.OwnerName()] = o
		}
		o.Held++
		if until.Before(o.NextExpiry) {
			o.NextExpiry = until
		}
		if at := d.ClaimedAtTime(); !at.IsZero() && (o.OldestClaimedAt == nil || at.Before(*o.OldestClaimedAt)) {
			o.OldestClaimedAt = &at
		}
	}
	s.Owners = make([]OwnerLeases, 0, len(byOwner))
	for _, o := range byOwner {
		s.Owners = append(s.Owners, *o)
	}
	slices.SortFunc(s.Owners, func(a, b OwnerLeases) int { return cmp.Or(cmp.Compare(b.Held, a.Held), cmp.Compare(a.Owner, b.Owner)) })
	return s, nil
}

// backoffs counts the users backing off (up to the exact limit) and lists
// the opts.Top whose next attempt comes first.
func backoffs(ctx context.Context, claims *mongo.Collection, now time.Time, opts StatusOptions) (BackoffStatus, error) {
	filter := consumer.BackingOffFilter(now)
	var s BackoffStatus
	var err error
	if s.Count, s.CountExact, err = countUpTo(ctx, claims, filter, opts.ExactLimit); err != nil {
		return s, fmt.Errorf("counting users backing off: %w", err)
	}
	docs, err := findAll[consumer.LeaseDoc](ctx, claims, filter, options.Find().SetSort(bson.D{{Key: "leaseUntil", Value: 1}}).SetLimit(int64(opts.Top)).
		SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "leaseUntil", Value: 1}, {Key: "attempts", Value: 1}, {Key: "lastError", Value: 1}}), "reading users backing off")
	if err != nil {
		return s, err
	}
	s.Users = []Backoff{}
	for _, d := range docs {
		if u, ok := d.User(); ok && d.State(now) == consumer.LeaseBackingOff {
			until, _ := d.Until()
			attempts, _ := d.Count()
			s.Users = append(s.Users, Backoff{Username: u, NextAttemptAt: until, Attempts: attempts, LastError: d.LastErrorText()})
		}
	}
	return s, nil
}

// annotateLeases fills in the lease state of the listed users, in one round
// trip by _id.
func annotateLeases(ctx context.Context, claims *mongo.Collection, users []UserEntry, now time.Time) error {
	if len(users) == 0 {
		return nil
	}
	names, index := make(bson.A, len(users)), map[string]int{}
	for i, u := range users {
		names[i], index[u.Username] = u.Username, i
	}
	docs, err := findAll[consumer.LeaseDoc](ctx, claims, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: names}}}},
		options.Find().SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "owner", Value: 1}, {Key: "leaseUntil", Value: 1}}),
		"reading the top users' leases")
	if err != nil {
		return err
	}
	for _, d := range docs {
		name, ok := d.User()
		i, listed := index[name]
		if !ok || !listed {
			continue
		}
		u := &users[i]
		if u.State = d.State(now); u.State != consumer.LeaseClaimable {
			until, _ := d.Until()
			u.Until = &until
			if u.State == consumer.LeaseHeld {
				u.Owner = d.OwnerName()
			}
		}
	}
	return nil
}
