package consumer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// deadLetter is one entry to move out of the queue, and why.
type deadLetter struct {
	ID       any
	User     string // the entry's username; "" for a malformed entry
	Reason   string // malformed | max_attempts: the metric label and deadLetter.reason
	Detail   string // what exactly was wrong, for the operator reading the document
	Attempts int
}

// Size bounds: entries may be as large as the server allows, so no command
// or reply may grow with them (MongoDB refuses a document over 16 MiB and a
// message over 48 MB; the driver drops a connection whose reply passes 48 MB).
const (
	maxDeadLetterBytes = 16<<20 - 64<<10 // largest copy stored whole: room for deadLetter.originalId
	insertBatchBytes   = 16 << 20        // copies in one insert command
	maxInBytes         = 4 << 20         // _ids in one $in
	keptStringBytes    = 1 << 10         // a reduced copy keeps this much of each string field,
	maxReducedBytes    = 1 << 20         // and this much of all
)

// deadLane moves the users out of attempts (from the acker) and the
// malformed entries claim rounds find, in batches on its own goroutine, so
// moving them never delays an acknowledgement. One flush:
//
//	dead letters      3 (read originals, insert copies, delete), only if any
//	                  (a read per entry on FerretDB, see deadLetterer.read)
//	release leases    1 deleteMany of the dead-lettered users
//	back off          1 bulk update of users whose dead letter failed, only if any
type deadLane struct {
	settler   // mu also guards:
	letters   *deadLetterer
	deadRetry map[string]deadRetry // by IDKey: malformed entries whose dead letter failed
}

func (d *deadLane) addMalformed(ms []malformed) {
	if len(ms) == 0 {
		return
	}
	now := d.serverTime.Now()
	d.mu.Lock()
	if d.malformed == nil {
		d.malformed = map[string]malformed{}
	}
	for _, m := range ms {
		k := IDKey(m.ID)
		if r, ok := d.deadRetry[k]; ok && now.Before(r.notBefore) {
			continue // its dead letter failed recently: it waits its turn
		}
		d.malformed[k] = m
	}
	d.mu.Unlock()
	d.kick.notify()
}

func (d *deadLane) newFlush(batch []outcome, bad map[string]malformed) *flushRun {
	r := &flushRun{}
	var dead []deadLetter
	for _, m := range bad {
		dead = append(dead, deadLetter{ID: m.ID, Reason: metrics.ReasonMalformed, Detail: m.Detail})
	}
	for _, o := range batch {
		l := o.work.lease
		r.settled, r.release = append(r.settled, l), append(r.release, l)
		for _, e := range o.work.entries {
			dead = append(dead, deadLetter{ID: e.ID, User: e.Username, Reason: metrics.ReasonMaxAttempts, Detail: o.err.Error(), Attempts: l.Attempts + 1})
		}
	}
	r.first = func(ctx context.Context) error { return d.deadLetters(ctx, r, &dead) }
	return r
}

// deadLetters moves a flush's dead letters (exhausted users' leases go once
// theirs are). An entry that fails is counted, logged and postponed alone,
// still queued: a malformed one until a claim round after its backoff
// (noteDeadLetters), an exhausted user until its backoff ends. Only a move
// cut short by shutdown returns an error, leaving the rest to the final flush.
func (c *deadLane) deadLetters(ctx context.Context, r *flushRun, dead *[]deadLetter) error {
	counts, failed, err := c.letters.move(ctx, *dead, c.serverTime.Now())
	for reason, n := range counts {
		c.metrics.EntriesDeadLettered.WithLabelValues(reason).Add(float64(n))
	}
	if err != nil && ctx.Err() != nil {
		*dead = failed // the others are done and counted
		return err
	}
	c.noteDeadLetters(*dead, failed)
	if err != nil {
		c.metrics.AckFlushErrors.Inc()
		c.log.Error("dead letters failed; postponed, the entries stay in the queue",
			"op", "dead letter", "failed", len(failed), "entries", len(*dead), "err", err)
		users := map[string]bool{}
		for _, b := range failed {
			users[b.User] = true // ("" for a malformed entry, which has no lease)
		}
		if r.backedOff { // (a final flush finishing a move cut short)
			r.retries, r.backedOff = nil, false
		}
		now := c.serverTime.Now()
		r.release = slices.DeleteFunc(r.release, func(l lease) bool {
			if users[l.User] {
				r.retries = append(r.retries, retry{lease: l, notBefore: now.Add(c.retryDelay.Delay(l.Attempts)), err: "dead-lettering failed; postponed"})
			}
			return users[l.User]
		})
	}
	*dead = nil
	return nil
}

// deadRetry is when a malformed entry whose dead letter failed may be tried
// again (deadLetterBackoff), so it costs neither a round trip nor a log line
// per flush. Past maxDeadRetries remembered, others retry whenever seen.
type deadRetry struct {
	failures  int
	notBefore time.Time
}

var deadLetterBackoff = Backoff{Base: time.Second, Max: 5 * time.Minute}

const maxDeadRetries = 10_000

// noteDeadLetters backs off batch's failed malformed entries, forgets the rest.
func (c *deadLane) noteDeadLetters(batch, failed []deadLetter) {
	bad := make(map[string]bool, len(failed))
	for _, b := range failed {
		bad[IDKey(b.ID)] = true
	}
	now := c.serverTime.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range batch {
		k := IDKey(b.ID)
		r, known := c.deadRetry[k]
		switch {
		case b.User != "":
		case !bad[k]:
			delete(c.deadRetry, k)
		case known || len(c.deadRetry) < maxDeadRetries:
			r.failures++
			r.notBefore = now.Add(deadLetterBackoff.Delay(r.failures))
			c.deadRetry[k] = r
		}
	}
}

// deadLetterer moves entries to the dead-letter collection: copies with a
// deadLetter subdocument under the original _id (a batch run twice inserts
// nothing twice), then the originals deleted whose copy is stored. Every entry
// succeeds or fails on its own. Used by the lane's goroutine alone.
type deadLetterer struct {
	queue   *mongo.Collection
	dead    *mongo.Collection
	byUser  *atomic.Bool // name each entry's user in its delete (deleteStatements)
	traits  *servertraits.Traits
	maxCopy int // the largest copy stored whole; 0: maxDeadLetterBytes
}

// move dead-letters batch. It returns the entries this call stored per
// reason (too_large: stored reduced; those moved or acknowledged by someone
// else are not counted), and those it could not move, still queued, with why.
func (d *deadLetterer) move(ctx context.Context, batch []deadLetter, now time.Time) (counts map[string]int, failed []deadLetter, err error) {
	if len(batch) == 0 {
		return nil, nil, nil
	}
	m := &mover{d: d, now: now, want: make(map[string]deadLetter, len(batch)), counts: map[string]int{}}
	ids := make(bson.A, 0, len(batch))
	for _, b := range batch {
		k := IDKey(b.ID)
		if _, dup := m.want[k]; !dup {
			m.want[k] = b
			ids = append(ids, b.ID)
		}
	}
	readErr := d.read(ctx, d.queue, ids, m.add)
	if readErr == nil {
		readErr = m.insert(ctx)
	}
	if readErr != nil { // what was not read, or not written, is still in the queue
		for _, p := range m.pending {
			m.fail(p.b, readErr)
		}
		for _, b := range m.want {
			m.fail(b, fmt.Errorf("reading the entry to dead-letter: %w", readErr))
		}
	}
	if len(m.done) > 0 {
		ids := bson.A(mapped(m.done, func(b deadLetter) any { return b.ID }))
		var users []string
		if d.byUser != nil && d.byUser.Load() {
			users = mapped(m.done, func(b deadLetter) string { return b.User })
		}
		if _, err := d.queue.BulkWrite(ctx, deleteStatements(ids, users...), options.BulkWrite().SetOrdered(false)); err != nil {
			// Their copies are stored: a retry finds them and only deletes.
			err = fmt.Errorf("deleting %d dead-lettered entries from the queue: %w", len(m.done), err)
			for _, b := range m.done {
				m.fail(b, err)
			}
		}
	}
	if len(m.failed) > 0 {
		return m.counts, m.failed, fmt.Errorf("dead-lettering %d of %d entries: %w", len(m.failed), len(ids), errors.Join(m.errs...))
	}
	return m.counts, nil, nil
}

// mover is one move call's progress.
type mover struct {
	d            *deadLetterer
	now          time.Time
	want         map[string]deadLetter // by IDKey, until read
	pending      []pendingCopy
	pendingBytes int
	counts       map[string]int
	done         []deadLetter // copy stored: delete from the queue
	failed       []deadLetter
	errs         []error
}

// pendingCopy is a dead letter built and not yet inserted.
type pendingCopy struct {
	b      deadLetter
	doc    bson.Raw
	reason string // the metric label: b.Reason, or too_large for a reduced copy
}

// maxErrs bounds the errors a move reports (one cause repeats per entry).
const maxErrs = 3

func (m *mover) fail(b deadLetter, err error) {
	m.failed = append(m.failed, b)
	if len(m.errs) < maxErrs {
		m.errs = append(m.errs, fmt.Errorf("entry %v: %w", prefix(fmt.Sprint(b.ID), 64), err))
	}
}

// failAll fails every copy of batch, and returns err only when MongoDB
// itself is failing (the move stops).
func (m *mover) failAll(ctx context.Context, batch []pendingCopy, doing string, err error) error {
	for _, p := range batch {
		m.fail(p.b, fmt.Errorf("%s: %w", doing, err))
	}
	if ctx.Err() != nil || transient(err) {
		return err
	}
	return nil
}

// add builds the copy of one original just read (valid during the call
// only), first inserting those gathered if it would pass insertBatchBytes.
func (m *mover) add(ctx context.Context, orig bson.Raw) error {
	k := IDKey(orig.Lookup("_id"))
	b, ok := m.want[k]
	if !ok {
		return nil
	}
	delete(m.want, k)
	doc, reason, err := deadLetterDoc(orig, b, m.now, cmp.Or(m.d.maxCopy, maxDeadLetterBytes))
	if err != nil {
		m.fail(b, err)
		return nil
	}
	if len(m.pending) > 0 && m.pendingBytes+len(doc) > insertBatchBytes {
		if err := m.insert(ctx); err != nil {
			m.fail(b, err)
			return err
		}
	}
	m.pending = append(m.pending, pendingCopy{b: b, doc: doc, reason: reason})
	m.pendingBytes += len(doc)
	return nil
}

// insert stores the pending copies in one command. It returns an error only
// when MongoDB itself is failing; a copy failing on its own is recorded.
func (m *mover) insert(ctx context.Context) error {
	batch := m.pending
	m.pending, m.pendingBytes = nil, 0
	if len(batch) == 0 {
		return nil
	}
	return m.insertCopies(ctx, batch, m.keepDistinct)
}

// insertCopies inserts batch unordered; onDup sorts out duplicate keys.
func (m *mover) insertCopies(ctx context.Context, batch []pendingCopy, onDup func(context.Context, []pendingCopy) error) error {
	_, err := m.d.dead.InsertMany(ctx, mapped(batch, func(p pendingCopy) any { return p.doc }), options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if err != nil && (!errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0) {
		if ctx.Err() != nil || transient(err) || len(batch) == 1 {
			return m.failAll(ctx, batch, fmt.Sprintf("inserting %d dead letters", len(batch)), err)
		}
		// Failed as a whole, maybe for one copy: retry each alone.
		for _, p := range batch {
			if err := m.insertCopies(ctx, []pendingCopy{p}, onDup); err != nil {
				return err
			}
		}
		return nil
	}
	bad := make(map[int]bool, len(bwe.WriteErrors))
	var dups []pendingCopy
	for _, we := range bwe.WriteErrors {
		bad[we.Index] = true
		if mongo.IsDuplicateKeyError(we) {
			dups = append(dups, batch[we.Index])
		} else {
			m.fail(batch[we.Index].b, fmt.Errorf("inserting its dead letter: %w", we))
		}
	}
	for i, p := range batch {
		if !bad[i] {
			m.counts[p.reason]++
			m.done = append(m.done, p.b)
		}
	}
	if len(dups) > 0 {
		return onDup(ctx, dups)
	}
	return nil
}

// keepDistinct sorts out duplicate keys on the insert: usually an earlier run
// of this batch stored the copy, but a producer may reuse an _id, or an operator
// re-enqueue a dead letter: a differing copy goes under a fresh _id (originalId).
func (m *mover) keepDistinct(ctx context.Context, dups []pendingCopy) error {
	byKey := make(map[string]pendingCopy, len(dups))
	ids := make(bson.A, len(dups))
	for i, p := range dups {
		ids[i] = p.b.ID
		byKey[IDKey(p.b.ID)] = p
	}
	moved := make(map[string]bool, len(dups))
	err := m.d.read(ctx, m.d.dead, ids, func(_ context.Context, stored bson.Raw) error {
		k := IDKey(stored.Lookup("_id"))
		if p, ok := byKey[k]; ok && same(stored, p.doc) {
			moved[k] = true
		}
		return nil
	})
	if err != nil {
		return m.failAll(ctx, dups, "reading existing dead letters", err)
	}
	var renamed []pendingCopy
	for _, p := range dups {
		if moved[IDKey(p.b.ID)] {
			m.done = append(m.done, p.b)
			continue
		}
		doc, err := renamedDeadLetter(p.doc)
		if err != nil {
			m.fail(p.b, err)
			continue
		}
		renamed = append(renamed, pendingCopy{b: p.b, doc: doc, reason: p.reason})
	}
	if len(renamed) == 0 {
		return nil
	}
	return m.insertCopies(ctx, renamed, func(_ context.Context, dups []pendingCopy) error {
		for _, p := range dups { // a fresh ObjectId clashing: a unique index of the operator's
			m.fail(p.b, errors.New("inserting its dead letter under a fresh _id: duplicate key"))
		}
		return nil
	})
}

// read hands fn every document of coll whose _id is in ids. A server that cuts
// replies at 16 MiB (MongoDB) gets an $in per 50,000 ids through a cursor. One
// that fills a reply by count (FerretDB) could send one past the 48 MB the
// driver accepts, dropping the connection and the pool: there, or while the
// server is unknown, each document is read alone, by _id (the only filter
// FerretDB answers without a scan).
func (d *deadLetterer) read(ctx context.Context, coll *mongo.Collection, ids bson.A, fn func(context.Context, bson.Raw) error) error {
	if d.traits.Probe(ctx, d.queue.Database()) != nil || !d.traits.BoundsReplies() {
		for _, id := range ids {
			raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
			if err == nil {
				err = fn(ctx, raw)
			}
			if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
				return err
			}
		}
		return nil
	}
	for _, chunk := range idChunks(ids, maxInIDs, maxInBytes) {
		if err := d.scan(ctx, coll, chunk, fn); err != nil {
			return err
		}
	}
	return nil
}

func (d *deadLetterer) scan(ctx context.Context, coll *mongo.Collection, ids bson.A, fn func(context.Context, bson.Raw) error) error {
	// One more than the ids: a reply holding all closes the cursor.
	cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetBatchSize(int32(len(ids)+1)))
	if err != nil {
		return err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	for cur.Next(ctx) {
		if err := fn(ctx, cur.Current); err != nil {
			return err
		}
	}
	return cur.Err()
}

// idChunks splits ids into lists of at most n ids and about maxBytes.
func idChunks(ids bson.A, n, maxBytes int) []bson.A {
	var out []bson.A
	start, size := 0, 0
	for i, id := range ids {
		_, data, _ := bson.MarshalValue(id) // (an error: the query reports it)
		sz := len(data)
		if i > start && (i-start >= n || size+sz > maxBytes) {
			out = append(out, ids[start:i])
			start, size = i, 0
		}
		size += sz
	}
	return append(out, ids[start:])
}

// same reports whether a stored dead letter holds exactly the fields of
// this copy, but for the deadLetter subdocument (dated per run).
func same(stored, want bson.Raw) bool {
	a, _ := stored.Elements()
	b, _ := want.Elements()
	return bytes.Equal(bytes.Join(verdictless(a), nil), bytes.Join(verdictless(b), nil))
}

// verdictless is a document's fields but its deadLetter subdocument.
func verdictless(elems []bson.RawElement) (fields [][]byte) {
	for _, e := range elems {
		if e.Key() != "deadLetter" {
			fields = append(fields, e)
		}
	}
	return fields
}

// renamedDeadLetter gives a dead letter a fresh _id, the original in deadLetter.originalId.
func renamedDeadLetter(doc bson.Raw) (bson.Raw, error) {
	var d bson.D
	if err := bson.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("decoding dead letter: %w", err)
	}
	var orig any
	for i, e := range d {
		switch e.Key {
		case "_id":
			orig = e.Value
			d[i].Value = bson.NewObjectID()
		case "deadLetter":
			if sub, ok := e.Value.(bson.D); ok {
				d[i].Value = append(sub, bson.E{Key: "originalId", Value: orig})
			}
		}
	}
	return bson.Marshal(d)
}

// DeadLetterInfo is the deadLetter subdocument of a stored dead letter: why
// and when its entry left the queue (read by the operator commands).
type DeadLetterInfo struct {
	Reason   string    `bson:"reason"`
	At       time.Time `bson:"at"`
	Attempts int32     `bson:"attempts"`
	Error    string    `bson:"error"`
	// Only a reduced copy (reason too_large) has these.
	OriginalReason string        `bson:"originalReason,omitempty"`
	OriginalSize   int64         `bson:"originalSize,omitempty"`
	OmittedStrings int32         `bson:"omittedStrings,omitempty"`
	OriginalID     bson.RawValue `bson:"originalId,omitempty"` // when stored under a fresh _id (keepDistinct)
}

// deadLetterDoc builds the copy of orig to store: the original whole with a
// deadLetter subdocument, or, past limit, reduced with reason too_large.
func deadLetterDoc(orig bson.Raw, b deadLetter, now time.Time, limit int) (bson.Raw, string, error) {
	elems, err := orig.Elements()
	if err != nil {
		return nil, "", fmt.Errorf("reading entry to dead-letter: %w", err)
	}
	verdict := DeadLetterInfo{Reason: b.Reason, At: now, Attempts: int32(b.Attempts), Error: prefix(b.Detail, keptStringBytes)}
	sub, err := bson.Marshal(verdict)
	if err != nil {
		return nil, "", fmt.Errorf("encoding dead letter: %w", err)
	}
	// The original's fields byte for byte (copied, never decoded), but for
	// the verdict of a replayed dead letter.
	fields := append(verdictless(elems), bsoncore.AppendDocumentElement(nil, "deadLetter", sub))
	doc := bson.Raw(bsoncore.BuildDocumentFromElements(nil, fields...))
	if len(doc) <= limit {
		return doc, b.Reason, nil
	}
	doc, err = reducedDeadLetter(elems, b, verdict, len(orig))
	if err != nil {
		return nil, "", err
	}
	if len(doc) > limit {
		return nil, "", fmt.Errorf("the entry (%d bytes) cannot be dead-lettered even reduced: its copy would be %d bytes, more than %d", len(orig), len(doc), limit)
	}
	return doc, metrics.ReasonTooLarge, nil
}

// reducedDeadLetter keeps of an entry too large to store whole its _id,
// createdAt and the first KiB of each top-level string (1 MiB in all); its
// deadLetter says too_large, originalReason, originalSize, omittedStrings.
func reducedDeadLetter(elems []bson.RawElement, b deadLetter, verdict DeadLetterInfo, size int) (bson.Raw, error) {
	doc := bson.D{}
	kept, omitted := 0, 0
	for _, e := range elems {
		k, v := e.Key(), e.Value()
		switch {
		case k == "_id":
			doc = append(doc, bson.E{Key: k, Value: v})
		case k == "deadLetter":
		case v.Type == bson.TypeString:
			if kept >= maxReducedBytes {
				omitted++
				continue
			}
			s := prefix(v.StringValue(), keptStringBytes)
			kept += len(k) + len(s)
			doc = append(doc, bson.E{Key: k, Value: s})
		case k == "createdAt" && len(v.Value) <= keptStringBytes:
			doc = append(doc, bson.E{Key: k, Value: v})
		}
	}
	verdict.Reason, verdict.OriginalReason, verdict.OriginalSize = metrics.ReasonTooLarge, b.Reason, int64(size)
	verdict.OmittedStrings = int32(omitted)
	doc = append(doc, bson.E{Key: "deadLetter", Value: verdict})
	raw, err := bson.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding reduced dead letter: %w", err)
	}
	return raw, nil
}

// prefix is at most n bytes of s, cut on a character boundary if s is UTF-8.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > n-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// IDKey makes any _id usable as a map key by its BSON type and bytes.
func IDKey(v any) string {
	if x, ok := v.(bson.RawValue); ok {
		return string(rune(x.Type)) + string(x.Value)
	}
	t, data, err := bson.MarshalValue(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(rune(t)) + string(data)
}
