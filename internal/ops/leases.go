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
)

// leaseDoc is the claims collection's lease document as status reads it.
// The collection also holds documents whose _id is not a string (the
// adaptive limiter's baselines): every filter below asks for a string _id,
// and decoding skips anything else rather than fail on it.
type leaseDoc struct {
	ID         bson.RawValue `bson:"_id"`
	Token      bson.RawValue `bson:"token"`
	Owner      string        `bson:"owner"`
	LeaseUntil time.Time     `bson:"leaseUntil"`
	Attempts   int           `bson:"attempts"`
	LastError  string        `bson:"lastError"`
	ClaimedAt  time.Time     `bson:"claimedAt"`
}

func (d leaseDoc) user() (string, bool) { return d.ID.StringValueOK() }

// held: token set and leaseUntil ahead; backing off: token null and
// leaseUntil ahead; anything else is stale and claimable.
func (d leaseDoc) state(now time.Time) string {
	switch {
	case !d.LeaseUntil.After(now):
		return "claimable"
	case d.Token.Type == 0 || d.Token.Type == bson.TypeNull:
		return "backing_off"
	}
	return "held"
}

var stringID = bson.E{Key: "_id", Value: bson.D{{Key: "$type", Value: "string"}}}

func live(now time.Time) bson.E {
	return bson.E{Key: "leaseUntil", Value: bson.D{{Key: "$gt", Value: now}}}
}

// heldLeases reads up to limit live, held leases (the leaseUntil index) and
// groups them per owner.
func heldLeases(ctx context.Context, claims *mongo.Collection, now time.Time, limit int) (LeaseStatus, error) {
	cur, err := claims.Find(ctx, bson.D{live(now), {Key: "token", Value: bson.D{{Key: "$ne", Value: nil}}}, stringID},
		options.Find().SetLimit(int64(limit)+1).SetBatchSize(int32(min(limit+1, 100_000))).
			SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "owner", Value: 1}, {Key: "leaseUntil", Value: 1}, {Key: "claimedAt", Value: 1}}))
	if err != nil {
		return LeaseStatus{}, fmt.Errorf("reading held leases: %w", err)
	}
	var docs []leaseDoc
	if err := cur.All(ctx, &docs); err != nil {
		return LeaseStatus{}, fmt.Errorf("reading held leases: %w", err)
	}
	s := LeaseStatus{Truncated: len(docs) > limit}
	if s.Truncated {
		docs = docs[:limit]
	}
	s.Owners, s.Held = groupByOwner(docs, now)
	return s, nil
}

func groupByOwner(docs []leaseDoc, now time.Time) ([]OwnerLeases, int) {
	byOwner := map[string]*OwnerLeases{}
	held := 0
	for _, d := range docs {
		if _, ok := d.user(); !ok || d.state(now) != "held" {
			continue
		}
		held++
		o := byOwner[d.Owner]
		if o == nil {
			o = &OwnerLeases{Owner: d.Owner, NextExpiry: d.LeaseUntil}
			byOwner[d.Owner] = o
		}
		o.Held++
		if d.LeaseUntil.Before(o.NextExpiry) {
			o.NextExpiry = d.LeaseUntil
		}
		if !d.ClaimedAt.IsZero() && (o.OldestClaimedAt == nil || d.ClaimedAt.Before(*o.OldestClaimedAt)) {
			at := d.ClaimedAt
			o.OldestClaimedAt = &at
		}
	}
	owners := make([]OwnerLeases, 0, len(byOwner))
	for _, o := range byOwner {
		owners = append(owners, *o)
	}
	slices.SortFunc(owners, func(a, b OwnerLeases) int { return cmp.Or(cmp.Compare(b.Held, a.Held), cmp.Compare(a.Owner, b.Owner)) })
	return owners, held
}

// backoffs counts the users backing off (up to the exact limit) and lists
// the opts.Top whose next attempt comes first.
func backoffs(ctx context.Context, claims *mongo.Collection, now time.Time, opts StatusOptions) (BackoffStatus, error) {
	filter := bson.D{live(now), {Key: "token", Value: nil}, stringID}
	var s BackoffStatus
	var err error
	if s.Count, s.CountExact, err = countUpTo(ctx, claims, filter, opts.ExactLimit); err != nil {
		return s, fmt.Errorf("counting users backing off: %w", err)
	}
	cur, err := claims.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "leaseUntil", Value: 1}}).SetLimit(int64(opts.Top)).
		SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "leaseUntil", Value: 1}, {Key: "attempts", Value: 1}, {Key: "lastError", Value: 1}}))
	if err != nil {
		return s, fmt.Errorf("reading users backing off: %w", err)
	}
	var docs []leaseDoc
	if err := cur.All(ctx, &docs); err != nil {
		return s, fmt.Errorf("reading users backing off: %w", err)
	}
	s.Users = []Backoff{}
	for _, d := range docs {
		if u, ok := d.user(); ok {
			s.Users = append(s.Users, Backoff{Username: u, NextAttemptAt: d.LeaseUntil, Attempts: d.Attempts, LastError: d.LastError})
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
	names := make(bson.A, len(users))
	for i, u := range users {
		names[i] = u.Username
	}
	cur, err := claims.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: names}}}},
		options.Find().SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "owner", Value: 1}, {Key: "leaseUntil", Value: 1}}))
	if err != nil {
		return fmt.Errorf("reading the top users' leases: %w", err)
	}
	var docs []leaseDoc
	if err := cur.All(ctx, &docs); err != nil {
		return fmt.Errorf("reading the top users' leases: %w", err)
	}
	byUser := map[string]leaseDoc{}
	for _, d := range docs {
		if u, ok := d.user(); ok {
			byUser[u] = d
		}
	}
	for i := range users {
		d, ok := byUser[users[i].Username]
		if !ok {
			continue
		}
		if users[i].State = d.state(now); users[i].State != "claimable" {
			until := d.LeaseUntil
			users[i].Until = &until
			if users[i].State == "held" {
				users[i].Owner = d.Owner
			}
		}
	}
	return nil
}
