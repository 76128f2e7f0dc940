package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// deadLetter is one queue entry to move out of the queue, and why.
type deadLetter struct {
	ID       any
	User     string // the entry's username; "" for a malformed entry
	Reason   string // malformed | max_attempts: the metric label and deadLetter.reason
	Detail   string // what exactly was wrong, for the operator reading the document
	Attempts int
}

// deadLetterer moves entries to the dead-letter collection in three round
// trips per batch, whatever its size: read the originals, insert copies with a
// deadLetter subdocument, delete the originals. The copy keeps the original
// _id, so running a batch twice (after a crash or an unknown outcome) inserts
// nothing twice and loses nothing: the delete only runs after the insert.
type deadLetterer struct {
	queue  *mongo.Collection
	dead   *mongo.Collection
	byUser *atomic.Bool // name each entry's user in its delete (deleteStatements)
}

// move returns how many entries were dead-lettered by this call, per reason
// (entries already moved or acknowledged by someone else are not counted).
func (d *deadLetterer) move(ctx context.Context, batch []deadLetter, now time.Time) (map[string]int, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	ids := make(bson.A, len(batch))
	var users []string
	if d.byUser.Load() {
		users = make([]string, len(batch))
	}
	for i, b := range batch {
		ids[i] = b.ID
		if users != nil {
			users[i] = b.User
		}
	}
	var originals []bson.Raw
	for _, chunk := range chunks(ids, maxInIDs) {
		cur, err := d.queue.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: chunk}}}},
			options.Find().SetBatchSize(int32(len(chunk))+1)) // +1: a batch filled exactly leaves the cursor open
		if err != nil {
			return nil, fmt.Errorf("reading %d entries to dead-letter: %w", len(batch), err)
		}
		var part []bson.Raw
		if err := cur.All(ctx, &part); err != nil {
			return nil, fmt.Errorf("reading %d entries to dead-letter: %w", len(batch), err)
		}
		originals = append(originals, part...)
	}
	if len(originals) == 0 {
		return nil, nil
	}
	byID := make(map[string]deadLetter, len(batch))
	for _, b := range batch {
		byID[idKey(b.ID)] = b
	}
	docs := make([]any, 0, len(originals))
	reasons := make([]string, 0, len(originals))
	for _, o := range originals {
		b := byID[idKey(o.Lookup("_id"))]
		doc, err := withDeadLetter(o, b, now)
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
		reasons = append(reasons, b.Reason)
	}
	counts := map[string]int{}
	inserted := make([]bool, len(docs))
	for i := range inserted {
		inserted[i] = true
	}
	if _, err := d.dead.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
			return nil, fmt.Errorf("inserting %d dead letters: %w", len(docs), err)
		}
		var dups []int
		for _, we := range bwe.WriteErrors {
			if !mongo.IsDuplicateKeyError(we) {
				return nil, fmt.Errorf("inserting %d dead letters: %w", len(docs), err)
			}
			dups = append(dups, we.Index)
		}
		moved, err := d.keepDistinct(ctx, originals, docs, dups)
		if err != nil {
			return nil, err
		}
		for _, i := range dups {
			inserted[i] = !moved[i]
		}
	}
	for i, ok := range inserted {
		if ok {
			counts[reasons[i]]++
		}
	}
	if _, err := d.queue.BulkWrite(ctx, deleteStatements(ids, users...), options.BulkWrite().SetOrdered(false)); err != nil {
		return counts, fmt.Errorf("deleting %d dead-lettered entries from the queue: %w", len(ids), err)
	}
	return counts, nil
}

// keepDistinct sorts out duplicate keys on the dead-letter insert. Usually
// the copy is there because an earlier run of this batch inserted it (moved).
// But a producer may reuse an _id, or an operator may re-enqueue a dead letter
// unchanged by _id: then the stored dead letter is a different document, and
// this one is inserted under a fresh _id with deadLetter.originalId, rather
// than deleted from the queue with no copy anywhere.
func (d *deadLetterer) keepDistinct(ctx context.Context, originals []bson.Raw, docs []any, dups []int) (map[int]bool, error) {
	ids := make(bson.A, len(dups))
	for i, di := range dups {
		ids[i] = originals[di].Lookup("_id")
	}
	cur, err := d.dead.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, fmt.Errorf("reading existing dead letters: %w", err)
	}
	var existing []bson.Raw
	if err := cur.All(ctx, &existing); err != nil {
		return nil, fmt.Errorf("reading existing dead letters: %w", err)
	}
	stored := make(map[string]bson.Raw, len(existing))
	for _, e := range existing {
		stored[idKey(e.Lookup("_id"))] = e
	}
	moved := make(map[int]bool, len(dups))
	var renamed []any
	for _, di := range dups {
		orig := originals[di]
		if same(stored[idKey(orig.Lookup("_id"))], orig) {
			moved[di] = true
			continue
		}
		doc, err := renamedDeadLetter(docs[di].(bson.Raw))
		if err != nil {
			return nil, err
		}
		renamed = append(renamed, doc)
	}
	if len(renamed) > 0 {
		if _, err := d.dead.InsertMany(ctx, renamed); err != nil {
			return nil, fmt.Errorf("inserting %d dead letters under fresh _ids: %w", len(renamed), err)
		}
	}
	return moved, nil
}

// same reports whether a stored dead letter holds exactly the original's
// fields, ignoring the deadLetter subdocument.
func same(stored, orig bson.Raw) bool {
	if stored == nil {
		return false
	}
	strip := func(r bson.Raw) []byte {
		elems, _ := r.Elements()
		var b []byte
		for _, e := range elems {
			if e.Key() != "deadLetter" {
				b = append(b, e...)
			}
		}
		return b
	}
	return string(strip(stored)) == string(strip(orig))
}

// renamedDeadLetter gives a dead letter a fresh _id and records the original
// in deadLetter.originalId.
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

// withDeadLetter appends {deadLetter: {reason, at, attempts, error}} to the
// original document, every original field kept as it was.
func withDeadLetter(orig bson.Raw, b deadLetter, now time.Time) (bson.Raw, error) {
	elems, err := orig.Elements()
	if err != nil {
		return nil, fmt.Errorf("reading entry to dead-letter: %w", err)
	}
	doc := bson.D{}
	for _, e := range elems {
		if e.Key() == "deadLetter" {
			continue // a replayed dead letter gets a fresh verdict
		}
		doc = append(doc, bson.E{Key: e.Key(), Value: e.Value()})
	}
	doc = append(doc, bson.E{Key: "deadLetter", Value: bson.D{
		{Key: "reason", Value: b.Reason},
		{Key: "at", Value: now},
		{Key: "attempts", Value: int32(b.Attempts)},
		{Key: "error", Value: b.Detail},
	}})
	raw, err := bson.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding dead letter: %w", err)
	}
	return raw, nil
}

// idKey makes any _id usable as a map key by its BSON type and bytes.
func idKey(v any) string {
	switch x := v.(type) {
	case bson.RawValue:
		return string(rune(x.Type)) + string(x.Value)
	default:
		t, data, err := bson.MarshalValue(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(rune(t)) + string(data)
	}
}
