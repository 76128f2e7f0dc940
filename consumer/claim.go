package consumer

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// AbsorbLimit caps the entries one claim round reads for the users it won, so a
// firehose user with millions of pending entries costs bounded memory. The
// oldest are absorbed first; the rest wait for the user's next refresh.
const AbsorbLimit = 100_000

// work is one user's refresh: the lease that entitles this consumer to it and
// the entries that refresh will acknowledge.
type work struct {
	lease   lease
	entries []Entry
}

// claimResult is what one claim round produced.
type claimResult struct {
	works     []work
	malformed []malformed
	// windowFull means the window was cut at CLAIM_WINDOW, so more claimable
	// users may be waiting behind it: claim again as soon as there is room.
	windowFull bool
}

// claimer takes work from the queue in a fixed number of round trips per
// round, whatever the number of users:
//
//  1. read the users nobody may claim (live leases, backoffs);
//  2. read the oldest CLAIM_WINDOW entries of everyone else (index
//     {createdAt, _id, username}, covered);
//  3. pick up to `room` distinct users from it and claim them (one insert,
//     plus two round trips only when some of them had a lease document);
//  4. absorb: read every pending entry of the users won (index {username,
//     createdAt}), so one refresh acknowledges a firehose user's whole backlog.
//
// Entries are claimed at step 4, after the lease: the refresh that follows
// began after every entry it will acknowledge was read, and entries arriving
// later are not in the batch (SPEC section 2).
type claimer struct {
	queue  *mongo.Collection
	leases *leaseStore
	window int
	lease  time.Duration
	clock  Clock
}

// runOnce claims up to room users. exclude holds the users this consumer is
// already working on, whatever the database says about their leases (one
// that expired during an outage must not be won a second time by its holder).
func (c *claimer) runOnce(ctx context.Context, room int, exclude map[string]struct{}) (*claimResult, error) {
	now := c.clock.Now()
	blocked, err := c.leases.blocked(ctx, now)
	if err != nil {
		return nil, err
	}
	for u := range exclude {
		blocked = append(blocked, u)
	}
	cur, err := c.queue.Find(ctx,
		bson.D{{Key: "username", Value: bson.D{{Key: "$nin", Value: blocked}}}},
		options.Find().
			SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
			SetLimit(int64(c.window)).
			SetBatchSize(int32(c.window)). // the whole window in one reply, no getMore
			SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("reading the oldest %d claimable entries: %w", c.window, err)
	}
	var window []rawEntry
	if err := cur.All(ctx, &window); err != nil {
		return nil, fmt.Errorf("reading the oldest %d claimable entries: %w", c.window, err)
	}
	res := &claimResult{windowFull: len(window) >= c.window}
	users, bad := pickUsers(window, room)
	res.malformed = bad
	if len(users) == 0 {
		return res, nil
	}
	token := bson.NewObjectID().Hex()
	won, err := c.leases.acquire(ctx, users, token, c.clock.Now(), c.lease)
	if err != nil {
		return res, err
	}
	if len(won) == 0 {
		return res, nil
	}
	works, bad, err := c.absorb(ctx, won)
	if err != nil {
		// Without the entries there is nothing to refresh: hand the users
		// back now rather than make everyone wait out the lease. If this
		// fails too, the leases simply expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _ = c.leases.release(rctx, won)
		cancel()
		return res, fmt.Errorf("absorbing entries of %d claimed users: %w", len(won), err)
	}
	res.works = works
	res.malformed = append(res.malformed, bad...)
	return res, nil
}

// absorb reads the pending entries of the users won, oldest first.
func (c *claimer) absorb(ctx context.Context, won []lease) ([]work, []malformed, error) {
	names := make([]string, len(won))
	want := make(map[string]struct{}, len(won))
	for i, l := range won {
		names[i] = l.User
		want[l.User] = struct{}{}
	}
	cur, err := c.queue.Find(ctx,
		bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: names}}}},
		options.Find().
			SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
			SetLimit(AbsorbLimit).
			SetBatchSize(AbsorbLimit). // one reply unless it passes 16 MiB
			SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}))
	if err != nil {
		return nil, nil, err
	}
	var raw []rawEntry
	if err := cur.All(ctx, &raw); err != nil {
		return nil, nil, err
	}
	byUser, bad := groupByUser(raw, want)
	works := make([]work, len(won))
	for i, l := range won {
		works[i] = work{lease: l, entries: byUser[l.User]}
	}
	return works, bad, nil
}
