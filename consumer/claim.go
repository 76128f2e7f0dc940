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

// AbsorbLimit caps the entries held for claimed users across rounds, so a
// firehose user costs bounded memory; the rest wait for its next refresh.
const AbsorbLimit = 100_000

// work is one user's refresh: its lease and the entries it acknowledges.
type work struct {
	lease   lease
	entries []Entry
}

type claimResult struct {
	works       []work
	malformed   []malformed
	windowFull  bool // cut at CLAIM_WINDOW: more claimable users may wait behind it
	paged       bool // nobody claimable: the next round reads behind this window
	picked, won int  // users the round tried to lease, and leases it got
}

// contended says most of a round's picks went to other replicas. Rounds of
// fewer than 4 picks, where one lost race is half of them, never count.
func (r *claimResult) contended() bool {
	return r.picked >= 4 && 2*r.won < r.picked
}

// Bounds, so a round's commands and memory do not grow with the fleet.
const (
	maxSkipUsers       = 1000            // users remembered as blocked and left out of the window
	heldElsewhereSkip  = 2 * time.Second // short: its holder usually releases it within a refresh
	malformedScanLimit = 64              // malformed entries one scan returns
)

// validUsername keeps a producer's 8 MiB username on the server (the exact
// 256-byte rule is parseEntry's); \z, not $: PCRE's $ also matches before a final newline.
const validUsername = `^[\s\S]{1,256}\z`

// claimer takes work from the queue in a fixed number of round trips per
// round, whatever the number of users, replicas or backoffs: (1) the oldest
// CLAIM_WINDOW entries with a plausible username, minus the users held or
// known blocked (windowIndex, covered); (2) the live leases of the window's
// users, by _id; (3) up to room claimable users, spread across replicas,
// leased in one insert (two more round trips for takeovers); (4) every entry
// of the users won (absorbIndex, covered); (5) at most once per
// PollInterval, the malformed entries at the head. Entries are read after the
// lease: a refresh begins after every entry it acknowledges was read. Used
// by the claim loop alone: nothing is locked.
type claimer struct {
	queue      *mongo.Collection
	leases     *leaseStore
	window     int
	lease      time.Duration
	serverTime clock.Nower   // lease times are the server's
	scanEvery  time.Duration // malformed-entry scans at most this often

	skip                     map[string]time.Time // users known blocked, until when
	resume                   *position            // read the window from here, not the head
	lastScan                 time.Time
	windowHints, absorbHints *hints       // the window's and malformed scan's; absorb's
	byUser                   *atomic.Bool // set on a mongos: deletes name each entry's user (deleteStatements)
	traits                   *servertraits.Traits
	// filter: usernames are length-filtered on the server (validUsername); nil until asked.
	// FerretDB compiles a regex per document (~0.5 ms): there readBounded clips them.
	filter *bool
}

// position is a place in queueOrder.
type position struct {
	createdAt time.Time
	id        bson.RawValue
}

// round claims up to room users and absorbs at most absorbLimit entries.
// exclude holds the users this consumer works on, whatever their leases say
// (one that expired during an outage must not be won twice by its holder).
func (c *claimer) round(ctx context.Context, room, absorbLimit int, exclude []string) (*claimResult, error) {
	if err := c.detect(ctx); err != nil {
		return nil, err
	}
	now := c.serverTime.Now()
	window, err := c.readWindow(ctx, now, exclude)
	if err != nil {
		return nil, err
	}
	users, bad, last := distinctUsers(window)
	res := &claimResult{windowFull: len(window) >= c.window, malformed: bad}
	more, err := c.scanMalformed(ctx, now, res.windowFull, last)
	if res.malformed = append(res.malformed, more...); err != nil {
		return res, err
	}
	blocked, err := c.leases.blockedAmong(ctx, users, now)
	if err != nil {
		return res, err
	}
	candidates := c.remember(users, blocked, now)
	// Past this window only when it was full of users nobody may claim (more
	// than the skip list holds): otherwise the oldest entry is claimed next.
	res.paged = len(candidates) == 0 && res.windowFull && last != nil
	c.resume = nil
	if res.paged {
		c.resume = last
	}
	picks := spread(candidates, room, c.leases.owner)
	if len(picks) == 0 {
		return res, nil
	}
	won, err := c.leases.acquire(ctx, picks, bson.NewObjectID().Hex(), c.serverTime.Now(), c.leaseFor(ctx))
	res.picked, res.won = len(picks), len(won)
	if err != nil || len(won) == 0 {
		return res, err
	}
	works, bad, err := c.absorb(ctx, won, absorbLimit)
	if err != nil {
		// Hand the users back rather than make everyone wait out the lease.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimCleanup)
		_, _ = c.leases.release(rctx, won)
		cancel()
		return res, fmt.Errorf("absorbing entries of %d claimed users: %w", len(won), err)
	}
	res.works = works
	res.malformed = append(res.malformed, bad...)
	return res, nil
}

// leaseFor is LeaseDuration or, when the round's stretched deadline is
// further, its remaining time plus a third of a lease: renewal starts after
// the round, and a lease expiring in a slow absorb would be taken over.
func (c *claimer) leaseFor(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > c.lease {
		return time.Until(dl) + c.lease/3
	}
	return c.lease
}

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
		SetBatchSize(int32(c.window) + 1). // one reply; +1 so the server closes the cursor
		SetProjection(entryProjection)
	window, err := c.find(ctx, c.windowHints, filter, opts)
	if err != nil && !*c.filter && strings.Contains(err.Error(), "too large") {
		// Usernames of megabytes at the head: one reply each, this round.
		window, err = c.readBounded(ctx, filter, opts.SetBatchSize(1))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the oldest %d claimable entries: %w", c.window, err)
	}
	if c.resume != nil {
		// Drop the page's last entry (other _id types at its time are re-read, harmlessly).
		window = slices.DeleteFunc(window, func(r rawEntry) bool { return !c.resume.before(r) })
	}
	return window, nil
}

// windowFilter is the claim window's filter: usernames of plausible length
// (where the server filters them cheaply), minus nin, from resume on. Each
// createdAt range of its $or carries the username conditions: MongoDB assigns
// predicates to an index only when one fills its first field
// (plan_enumerator.cpp), else scans a hinted index whole under a FETCH; only
// some releases move outside predicates into an $or's branches.
func windowFilter(nin []string, lengthFilter bool, resume *position) bson.D {
	var userCond bson.D
	if lengthFilter {
		userCond = bson.D{{Key: "$regex", Value: validUsername}}
	}
	if len(nin) > 0 {
		userCond = append(userCond, bson.E{Key: "$nin", Value: nin})
	}
	// Every createdAt in ranges of the window's index: every date (answered by the
	// index alone; the embedded server refuses MinKey/MaxKey bounds), none (allowed
	// with an ObjectId _id), other types (dead-lettered): a document read for those only.
	branches := []bson.D{
		{{Key: "createdAt", Value: bson.D{{Key: "$gte", Value: bson.DateTime(math.MinInt64)}, {Key: "$lte", Value: bson.DateTime(math.MaxInt64)}}}},
		{{Key: "createdAt", Value: bson.D{{Key: "$in", Value: bson.A{nil, bson.A{}}}}}},
		{{Key: "createdAt", Value: bson.D{{Key: "$type", Value: nonDateTypes}}}},
	}
	if resume != nil {
		// Behind (t, id) in index order: one time's entries are not re-read by every
		// page; $not $lte, not $gt, keeps other _id types (position.before sorts them out).
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

// nonDateTypes are the $type aliases of every createdAt neither a date, null
// nor an array (matched by its elements, an empty one by the null branch);
// the embedded server refuses those of deprecated types and MinKey/MaxKey.
var nonDateTypes = bson.A{"number", "string", "object", "binData", "objectId", "bool", "timestamp", "regex"}

// malformedFilter matches the entries windowFilter's regex keeps out, no later than bound if set.
func malformedFilter(bound *time.Time) bson.D {
	filter := bson.D{{Key: "username", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$regex", Value: validUsername}}}}}}
	if bound != nil {
		// $not $gt keeps entries with no date at all (they sort first).
		filter = append(filter, bson.E{Key: "createdAt", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: *bound}}}}})
	}
	return filter
}

// find reads entries hinting h's first index not refused (unhinted, the
// window's regex and $nin could get absorb's index and an in-memory sort).
func (c *claimer) find(ctx context.Context, h *hints, filter bson.D, opts *options.FindOptionsBuilder) ([]rawEntry, error) {
	out, err := c.readBounded(ctx, filter, opts.SetHint(h.hint()))
	for h.refused(err) {
		out, err = c.readBounded(ctx, filter, opts.SetHint(h.hint()))
	}
	return out, err
}

// readBounded reads entries keeping at most MaxUsernameBytes+1 bytes of a
// username: an 8 MiB one is malformed either way, and must not be held.
func (c *claimer) readBounded(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) ([]rawEntry, error) {
	cur, err := c.queue.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	defer cur.Close(context.WithoutCancel(ctx)) // one reply per entry: a cut-short read leaves a cursor to kill
	var out []rawEntry
	for cur.Next(ctx) {
		var r rawEntry
		if err := cur.Decode(&r); err != nil {
			return nil, err
		}
		// Clip (values alias a copy) to a length parseEntry still rejects.
		if r.Username.Type == bson.TypeString && len(r.Username.Value) > MaxUsernameBytes+5 {
			t, data, _ := bson.MarshalValue(r.Username.StringValue()[:MaxUsernameBytes+1])
			r.Username = bson.RawValue{Type: t, Value: data}
		}
		out = append(out, r)
	}
	return out, cur.Err()
}

// detect asks the server once whether it length-filters usernames cheaply
// and is a mongos (again next round if it does not answer).
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

// The claim queries' order and projection (rawEntry), and their indexes.
var (
	queueOrder      = bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}
	entryProjection = bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}
	windowIndex     = bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}}
	// absorbIndex: with _id, each user's keys are in absorb's order: MongoDB
	// merges the users' scans, stops at the limit, reads no document.
	absorbIndex = bson.D{{Key: "username", Value: 1}, {Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}
	// legacyAbsorbIndex is 0.2.0's: a fallback while the new one builds on
	// a queue upgraded in place (docs/compatibility.md).
	legacyAbsorbIndex = bson.D{{Key: "username", Value: 1}, {Key: "createdAt", Value: 1}}
)

// scanMalformed finds entries the window's filter keeps out, by _id, at most
// once per scanEvery and after a full window no further than its end.
func (c *claimer) scanMalformed(ctx context.Context, now time.Time, windowFull bool, last *position) ([]malformed, error) {
	if !*c.filter || now.Sub(c.lastScan) < c.scanEvery {
		return nil, nil // without the filter, the window carries them
	}
	c.lastScan = now
	var bound *time.Time
	if windowFull && last != nil {
		bound = &last.createdAt
	}
	// Hinted: only the window's index returns the head in order unsorted.
	docs, err := c.find(ctx, c.windowHints, malformedFilter(bound), options.Find().
		SetSort(queueOrder).
		SetLimit(malformedScanLimit).
		SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("looking for malformed entries: %w", err)
	}
	return mapped(docs, func(d rawEntry) malformed {
		return malformed{ID: d.ID, Detail: "username is missing, not a string, empty or longer than 256 bytes"}
	}), nil
}

// remember notes the window's blocked users for the next rounds to leave
// out, and returns the claimable ones in window order.
func (c *claimer) remember(users []string, blocked map[string]LeaseDoc, now time.Time) []string {
	candidates := make([]string, 0, len(users))
	for _, u := range users {
		d, ok := blocked[u]
		if !ok {
			candidates = append(candidates, u)
			continue
		}
		until, _ := d.Until()
		if short := now.Add(heldElsewhereSkip); d.State(now) == LeaseHeld && short.Before(until) {
			until = short
		}
		if _, known := c.skip[u]; known || len(c.skip) < maxSkipUsers {
			c.skip[u] = until
		}
	}
	return candidates
}

// spread picks up to room candidates. Every replica reads the same head, and
// taking the first would make all race for the same leases: the oldest half is
// taken in order, the rest from the next 1.5·room by the smallest hash of (replica, user).
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
		h.Write([]byte(owner + "\x00" + u))
		return h.Sum64()
	}
	slices.SortFunc(pool, func(a, b string) int { return cmp.Compare(key(a), key(b)) })
	return append(picks, pool[:room-oldest]...)
}

// absorb reads the pending entries of the users won, oldest first.
func (c *claimer) absorb(ctx context.Context, won []lease, limit int) ([]work, []malformed, error) {
	names := mapped(won, func(l lease) string { return l.User })
	limit = max(limit, len(won)) // at least one entry per user won
	// Hinted: the window's index, winning the trial when the users sit at the
	// head, walks the whole queue when they have fewer entries than limit.
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
	byUser, bad := groupByUser(raw)
	return mapped(won, func(l lease) work { return work{lease: l, entries: byUser[l.User]} }), bad, nil
}

// hintRetry is how long a query goes without a refused index before asking
// for it again (an index still building at start is used once ready).
const hintRetry = 5 * time.Minute

// hints are the indexes one query hints, in order of preference, by name
// (EnsureIndexes names none): MongoDB refuses a key pattern two indexes match
// (an operator's with another collation or partial filter). A hint naming no
// index (missing, failed, building) is refused too: the next is hinted, then none.
type hints struct {
	indexes []bson.D
	skip    int // leading indexes refused; len(indexes): hint none
	retryAt time.Time
	now     func() time.Time
}

func newHints(indexes ...bson.D) *hints {
	return &hints{indexes: indexes, now: time.Now}
}

// hint is the preferred index's name, nil when all were refused.
func (h *hints) hint() any {
	if h.skip > 0 && !h.now().Before(h.retryAt) {
		h.skip = 0
	}
	if h.skip < len(h.indexes) {
		return servertraits.IndexName(h.indexes[h.skip])
	}
	return nil
}

// refused reports whether err refuses the hint just sent, and moves on to
// the next index: the caller runs the query again.
func (h *hints) refused(err error) bool {
	if h.skip >= len(h.indexes) || !servertraits.RefusesHint(err) {
		return false
	}
	h.skip++
	h.retryAt = h.now().Add(hintRetry)
	return true
}
