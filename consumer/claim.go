package consumer

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// AbsorbLimit caps the entries this process holds for the users it claimed,
// across claim rounds, so a firehose user with millions of pending entries
// costs bounded memory. The oldest are absorbed first; the rest wait for the
// user's next refresh.
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
	// paged means the window held nobody claimable and the next round reads
	// the entries behind it instead of the head again.
	paged bool
	// picked and won count the users the round tried to lease and the
	// leases it got: the rest went to other replicas racing for the same
	// users (see contended).
	picked, won int
}

// contended says that most of a round's picks went to other replicas: the
// fleet claims faster than the queue's head feeds it, and every replica
// paying full rounds to lose them is the cost that grows with the fleet.
func (r *claimResult) contended() bool {
	return r.picked >= minContendedPicks && 2*r.won < r.picked
}

// minContendedPicks keeps rounds of a few picks, where one lost race is
// half of them, from counting as contended.
const minContendedPicks = 4

// Claim-round bounds. Each caps a list the round sends or keeps, so a
// round's commands and memory are bounded whatever the fleet size (N), the
// users each replica holds (H) or the users backing off (B).
const (
	// maxSkipUsers caps the users a replica remembers as blocked (held by
	// another replica, or backing off) and leaves out of its window: at
	// most 1,000 names of at most 256 bytes, 256 KiB, usually ~20 KiB.
	maxSkipUsers = 1000
	// heldElsewhereSkip is how long a user seen held by another replica is
	// left out of the window. Short: the holder usually releases it within
	// a refresh, and a remembered user is one this replica will not claim.
	heldElsewhereSkip = 2 * time.Second
	// malformedScanLimit caps the malformed entries one scan returns.
	malformedScanLimit = 64
)

// validUsername matches the usernames a claim window may carry: strings of
// 1 to 256 characters. It filters on the server, so a producer's 8 MiB
// username never crosses the wire in a window (a 256-character string is at
// most 1 KiB; the exact 256-byte rule is parseEntry's). \z, not $: PCRE's $
// also matches before a trailing newline.
const validUsername = `^[\s\S]{1,256}\z`

// claimer takes work from the queue in a fixed number of round trips per
// round, whatever the number of users, replicas or backoffs:
//
//  1. read the oldest CLAIM_WINDOW entries with a plausible username, minus
//     the users this replica holds or knows are blocked (index
//     {createdAt, _id, username}, covered);
//  2. read the live leases of the users in that window only (by _id);
//  3. pick up to `room` claimable users, spread across replicas, and claim
//     them (one insert, plus two round trips only when some of them had a
//     lease document);
//  4. absorb: read every pending entry of the users won (index {username,
//     createdAt, _id}, covered), so one refresh acknowledges a firehose
//     user's whole backlog;
//  5. at most once per PollInterval, find malformed entries at the head
//     (their usernames are never read, see validUsername).
//
// Entries are claimed at step 4, after the lease: the refresh that follows
// begins after every entry it will acknowledge was read, and entries arriving
// later are not in the batch.
//
// A claimer is used by one goroutine (the claim loop): its memory of blocked
// users and of the page it reads is not locked.
type claimer struct {
	queue      *mongo.Collection
	leases     *leaseStore
	window     int
	lease      time.Duration
	serverTime clock.Nower   // lease times are the server's
	scanEvery  time.Duration // malformed-entry scans at most this often

	skip     map[string]time.Time // users known blocked, until when
	resume   *position            // read the window from here, not the head
	lastScan time.Time
	// windowHints are the window's and the malformed scan's index;
	// absorbHints absorb's, then the one it used before 0.3.0 (see hints).
	windowHints, absorbHints *hints
	// byUser is set once the server turns out to be a mongos: deletes of
	// queue entries then name each entry's user (deleteStatements).
	byUser *atomic.Bool
	traits *servertraits.Traits
	// filter says whether usernames are length-filtered on the server
	// (validUsername); nil until the server has been asked. FerretDB
	// compiles a regex once per document it tests (~0.5 ms for this one),
	// so there the window carries every username and they are bounded
	// while reading instead (readBounded).
	filter *bool
}

// position is a place in the queue's (createdAt, _id) order.
type position struct {
	createdAt time.Time
	id        bson.RawValue
}

// round claims up to room users and absorbs at most absorbLimit entries.
// exclude holds the users this consumer is already working on, whatever the
// database says about their leases (one that expired during an outage must
// not be won a second time by its holder).
func (c *claimer) round(ctx context.Context, room, absorbLimit int, exclude []string) (*claimResult, error) {
	if err := c.detect(ctx); err != nil {
		return nil, err
	}
	now := c.serverTime.Now()
	window, err := c.readWindow(ctx, now, exclude)
	if err != nil {
		return nil, err
	}
	res := &claimResult{windowFull: len(window) >= c.window}
	users, bad, last := distinctUsers(window)
	res.malformed = bad
	more, err := c.scanMalformed(ctx, now, res.windowFull, last)
	if err != nil {
		return res, err
	}
	res.malformed = append(res.malformed, more...)
	blocked, err := c.leases.blockedAmong(ctx, users, now)
	if err != nil {
		return res, err
	}
	candidates := c.remember(users, blocked, now)
	c.page(res, len(candidates) == 0, last)
	picks := spread(candidates, room, c.leases.owner)
	if len(picks) == 0 {
		return res, nil
	}
	token := bson.NewObjectID().Hex()
	won, err := c.leases.acquire(ctx, picks, token, c.serverTime.Now(), c.leaseFor(ctx))
	res.picked, res.won = len(picks), len(won)
	if err != nil || len(won) == 0 {
		return res, err
	}
	works, bad, err := c.absorb(ctx, won, absorbLimit)
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

// leaseFor is how long the leases a round writes last: LeaseDuration, or,
// when the round may run longer than that (a deadline stretched after
// rounds that timed out), its remaining time plus a third of a lease.
// Leases are renewed only once the round has returned; one that expired
// during a slow absorb would be taken over by another replica, and both
// would refresh the user.
func (c *claimer) leaseFor(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > c.lease {
		return time.Until(dl) + c.lease/3
	}
	return c.lease
}

// readWindow reads the oldest entries of users that may be claimable.
func (c *claimer) readWindow(ctx context.Context, now time.Time, exclude []string) ([]rawEntry, error) {
	nin := slices.Clone(exclude)
	for u, until := range c.skip {
		if until.After(now) {
			nin = append(nin, u)
		} else {
			delete(c.skip, u)
		}
	}
	filter := windowFilter(nin, *c.filter, c.resume)
	opts := options.Find().
		SetSort(queueOrder).
		SetLimit(int64(c.window)).
		SetBatchSize(int32(c.window) + 1). // the whole window in one reply; +1 so the server closes the cursor (no getMore)
		SetProjection(entryProjection)
	window, err := c.find(ctx, c.windowHints, filter, opts)
	if err != nil && !*c.filter && isTooLarge(err) {
		// Usernames of megabytes at the head: read them one reply each,
		// for this round only (the next finds them dead-lettered).
		window, err = c.readBounded(ctx, filter, opts.SetBatchSize(1))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the oldest %d claimable entries: %w", c.window, err)
	}
	if c.resume != nil {
		// Only the last page's own entry can come back here (the filter
		// keeps _ids of other BSON types at its time, and those are kept:
		// read again, which is harmless).
		window = slices.DeleteFunc(window, func(r rawEntry) bool { return !c.resume.before(r) })
	}
	return window, nil
}

// windowFilter is the claim window's filter: usernames of plausible length
// (where the server filters them cheaply), minus nin, from resume on.
//
// It is an $or of ranges of createdAt, the window index's leading field,
// each carrying the username conditions. MongoDB's planner assigns
// predicates to an index only when one of them fills the index's first
// field (plan_enumerator.cpp, enumerateOneIndex); with none, a hinted
// index is scanned whole ("Hinted index could not provide a bounded scan,
// reverting to whole index scan", query_planner.cpp) under a FETCH that
// holds the whole filter (planner_access.cpp, scanWholeIndex), so
// username, the index's third field, was checked on a document per key.
// With a range of createdAt in every branch, each branch scans its range
// and checks the username conditions on the keys, and the branches are
// merged in the sort's order. The username conditions are written into
// every branch rather than once beside the $or: the planner moves outside
// predicates into an $or's branches only in some releases, and a $nin
// only in recent ones; one left outside is checked on documents.
func windowFilter(nin []string, lengthFilter bool, resume *position) bson.D {
	var userCond bson.D
	if lengthFilter {
		userCond = bson.D{{Key: "$regex", Value: validUsername}}
	}
	if len(nin) > 0 {
		userCond = append(userCond, bson.E{Key: "$nin", Value: nin})
	}
	var branches []bson.D
	if resume == nil {
		branches = everyCreatedAt()
	} else {
		// Behind (t, id) in the index's order, as two ranges of it: later
		// times, and the same time with a later _id. (Entries without a
		// date, or with one of another type, are not behind a page: the
		// page starts after a date.) $not $lte rather than $gt keeps _ids
		// of other BSON types, which the client-side check sorts out.
		// Without the tie-break, more than a window of entries stamped with
		// one time (a producer that dates a batch once) were read again by
		// every page, for good.
		branches = []bson.D{
			{{Key: "createdAt", Value: bson.D{{Key: "$gt", Value: resume.createdAt}}}},
			{{Key: "createdAt", Value: resume.createdAt}, {Key: "_id", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$lte", Value: resume.id}}}}}},
		}
	}
	or := make(bson.A, len(branches))
	for i, b := range branches {
		if len(userCond) > 0 {
			b = append(b, bson.E{Key: "username", Value: userCond})
		}
		or[i] = b
	}
	return bson.D{{Key: "$or", Value: or}}
}

// nonDateTypes are the $type aliases of every createdAt a producer may
// write that is neither a date nor null, except arrays (matched by their
// elements, and an empty one by everyCreatedAt's null branch: $type
// "array" bounds nothing). "number" takes in int, long, double and
// decimal. The deprecated types (undefined, symbol, DBPointer, JavaScript)
// and MinKey/MaxKey are left out: the embedded server refuses their
// aliases, and no driver encodes a time as one of them.
var nonDateTypes = bson.A{"number", "string", "object", "binData", "objectId", "bool", "timestamp", "regex"}

// everyCreatedAt is every value of createdAt, as ranges of the window's
// index (its leading field), in three branches: every date, which the
// index answers alone; no date at all (missing, null, or an empty array:
// all keyed null or undefined), which the contract allows for entries with
// an ObjectId _id; and the other types a hostile producer may write, which
// the window still reads so that they are dead-lettered. The last two are
// checked on the document (MongoDB cannot tell missing from null on a key,
// nor a type's values from an array's), which costs a read only for the
// entries they hold. The bounds are written as dates: the embedded
// server's decoder refuses MinKey and MaxKey.
func everyCreatedAt() []bson.D {
	return []bson.D{
		{{Key: "createdAt", Value: bson.D{{Key: "$gte", Value: bson.DateTime(math.MinInt64)}, {Key: "$lte", Value: bson.DateTime(math.MaxInt64)}}}},
		{{Key: "createdAt", Value: bson.D{{Key: "$in", Value: bson.A{nil, bson.A{}}}}}},
		{{Key: "createdAt", Value: bson.D{{Key: "$type", Value: nonDateTypes}}}},
	}
}

// malformedFilter matches the entries windowFilter's regex keeps out, no
// later than bound when it is set.
func malformedFilter(bound *time.Time) bson.D {
	filter := bson.D{{Key: "username", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$regex", Value: validUsername}}}}}}
	if bound != nil {
		// $not $gt keeps entries with no date at all (they sort first).
		filter = append(filter, bson.E{Key: "createdAt", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: *bound}}}}})
	}
	return filter
}

// find reads queue entries hinting the first index of h the server has not
// refused (see hints). The window hints its covered index: with a regex and
// a $nin on username the planner could otherwise pick absorb's index and
// sort in memory.
func (c *claimer) find(ctx context.Context, h *hints, filter bson.D, opts *options.FindOptionsBuilder) ([]rawEntry, error) {
	out, err := c.readBounded(ctx, filter, opts.SetHint(h.hint()))
	for h.refused(err) {
		out, err = c.readBounded(ctx, filter, opts.SetHint(h.hint()))
	}
	return out, err
}

// readBounded reads a window keeping at most MaxUsernameBytes+1 of each
// username: the entry is malformed either way, and a producer's 8 MiB
// username must not be held for the whole round, nor for each entry.
func (c *claimer) readBounded(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) ([]rawEntry, error) {
	cur, err := c.queue.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	var out []rawEntry
	for cur.Next(ctx) {
		var r rawEntry
		if err := cur.Decode(&r); err != nil {
			return nil, err
		}
		// Decode copies the document; its values alias that copy, so
		// clip the username before keeping the entry.
		if r.Username.Type == bson.TypeString && len(r.Username.Value) > MaxUsernameBytes+5 {
			r.Username = clippedString(r.Username)
		}
		out = append(out, r)
	}
	return out, cur.Err()
}

// detect asks the server once what it is (see servertraits): whether it
// length-filters usernames cheaply (see claimer.filter) and whether it is a
// mongos. A server that does not answer is asked again next round.
func (c *claimer) detect(ctx context.Context) error {
	if c.filter != nil {
		return nil
	}
	if err := c.traits.Probe(ctx, c.queue.Database()); err != nil {
		return err
	}
	c.byUser.Store(c.traits.Sharded())
	filter := c.traits.FiltersUsernamesCheaply()
	c.filter = &filter
	return nil
}

// isTooLarge reports a reply over the wire protocol's size limit.
func isTooLarge(err error) bool {
	return err != nil && strings.Contains(err.Error(), "too large")
}

// queueOrder is the (createdAt, _id) order the claim queries read entries
// in; entryProjection is what they read of each (rawEntry).
var (
	queueOrder      = bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}
	entryProjection = bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}
)

// windowIndex is the queue index the claim window is read from.
var windowIndex = bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}}

// absorbIndex is the queue index absorb reads the users' entries from.
// With _id in it, each user's keys are in absorb's sort order: MongoDB
// merges the users' scans instead of sorting, stops at the limit, and
// reads no document (the projection is in the index).
var absorbIndex = bson.D{{Key: "username", Value: 1}, {Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}

// legacyAbsorbIndex is absorb's index before 0.3.0, which 0.2.0 still
// hints. It is built no more, but absorb falls back to it while the new
// one is being built on a queue upgraded in place; it is dropped one
// release later (docs/compatibility.md).
var legacyAbsorbIndex = bson.D{{Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}

// scanMalformed finds entries whose username the window's filter keeps out
// (missing, not a string, empty, longer than 256 characters), reading only
// their _id and createdAt. It runs at most once per scanEvery; with a full
// window it looks no further back than the window's end, so its cost is
// bounded by the head of the queue, not its depth.
func (c *claimer) scanMalformed(ctx context.Context, now time.Time, windowFull bool, last *position) ([]malformed, error) {
	if !*c.filter || now.Sub(c.lastScan) < c.scanEvery {
		return nil, nil // without the filter, the window carries them
	}
	c.lastScan = now
	var bound *time.Time
	if windowFull && last != nil {
		bound = &last.createdAt
	}
	// Hinted: nothing in this filter bounds an index scan except createdAt,
	// so only the window's index returns the head in order without a sort.
	docs, err := c.find(ctx, c.windowHints, malformedFilter(bound), options.Find().
		SetSort(queueOrder).
		SetLimit(malformedScanLimit).
		SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("looking for malformed entries: %w", err)
	}
	bad := make([]malformed, len(docs))
	for i, d := range docs {
		bad[i] = malformed{ID: d.ID, Detail: "username is missing, not a string, empty or longer than 256 bytes"}
	}
	return bad, nil
}

// remember notes the blocked users of the window, so the next rounds leave
// them out of it, and returns the claimable ones in window order.
func (c *claimer) remember(users []string, blocked map[string]blockedLease, now time.Time) []string {
	candidates := make([]string, 0, len(users))
	for _, u := range users {
		b, ok := blocked[u]
		if !ok {
			candidates = append(candidates, u)
			continue
		}
		until := b.until
		if short := now.Add(heldElsewhereSkip); b.held && short.Before(until) {
			until = short
		}
		if _, known := c.skip[u]; known || len(c.skip) < maxSkipUsers {
			c.skip[u] = until
		}
	}
	return candidates
}

// page decides where the next window starts: behind this one when it was
// full of users nobody may claim (a backlog of held or backing-off users
// longer than the skip list), otherwise at the head, so the oldest entry is
// always the next one claimed.
func (c *claimer) page(res *claimResult, nothingClaimable bool, last *position) {
	if nothingClaimable && res.windowFull && last != nil {
		c.resume = last
		res.paged = true
		return
	}
	c.resume = nil
}

// spread picks up to room of the candidates (in window order, oldest first).
// Every replica reads the same head, so picking its first users would make
// them all race for the same leases and most inserts lose. Instead the
// oldest half of the picks is taken in order (so no user waits behind the
// hash for long: the oldest entry is always among the next picks) and the
// other half, from the next 1.5·room candidates, by the smallest hash of
// (replica, user): replicas pick partly different users, and what is
// claimed stays within the oldest 2·room claimable users.
func spread(candidates []string, room int, owner string) []string {
	if room <= 0 {
		return nil
	}
	if len(candidates) <= room {
		return candidates
	}
	oldest := (room + 1) / 2
	picks := slices.Clone(candidates[:oldest])
	pool := slices.Clone(candidates[oldest:min(len(candidates), 2*room)])
	key := func(u string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(owner))
		h.Write([]byte{0})
		h.Write([]byte(u))
		return h.Sum64()
	}
	slices.SortFunc(pool, func(a, b string) int { return cmp.Compare(key(a), key(b)) })
	return append(picks, pool[:room-oldest]...)
}

// absorb reads the pending entries of the users won, oldest first.
func (c *claimer) absorb(ctx context.Context, won []lease, limit int) ([]work, []malformed, error) {
	names := make([]string, len(won))
	want := make(map[string]struct{}, len(won))
	for i, l := range won {
		names[i] = l.User
		want[l.User] = struct{}{}
	}
	limit = max(limit, len(won)) // at least one entry per user won
	// Hinted: the window's index also returns entries in this order, and a
	// planner that picks it (it wins the trial when the users won sit at
	// the head) walks the whole queue whenever their entries number fewer
	// than the limit. This index reads only the users' own entries.
	raw, err := c.find(ctx, c.absorbHints,
		bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: names}}}},
		options.Find().
			SetSort(queueOrder).
			SetLimit(int64(limit)).
			SetBatchSize(int32(limit)). // one reply unless it passes 16 MiB
			SetProjection(entryProjection))
	if err != nil {
		return nil, nil, err
	}
	byUser, bad := groupByUser(raw, want)
	works := make([]work, len(won))
	for i, l := range won {
		works[i] = work{lease: l, entries: byUser[l.User]}
	}
	return works, bad, nil
}
