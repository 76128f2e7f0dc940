package replay

import (
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// BookkeepingFields are the top-level queue-entry fields a consumer (this
// one in an older version, or another implementation) may have written into
// an entry to claim it, count its attempts or back it off; producers never
// write them (docs/contract.md). Replay strips them, and every field whose
// name starts with BookkeepingPrefix (processing, processingBy, ...), so
// every entry is pending again.
var BookkeepingFields = []string{
	"claimToken", "claimedBy", "claimedAt", "claimOwner",
	"leaseUntil", "lockedUntil", "lockedBy",
	"attempts", "notBefore", "nextAttemptAt", "lastError",
	"deadLetter",
}

const BookkeepingPrefix = "processing"

// QueueEntry reads an entry's user and enqueue time as the consumer does
// (docs/contract.md): createdAt, else the ObjectId's timestamp. Either is
// zero when the entry lacks it (the consumer dead-letters it).
func QueueEntry(raw bson.Raw) (user string, createdAt time.Time) {
	user, _ = raw.Lookup("username").StringValueOK()
	if v := raw.Lookup("createdAt"); v.Type == bson.TypeDateTime {
		return user, v.Time()
	}
	if oid, ok := raw.Lookup("_id").ObjectIDOK(); ok {
		createdAt = oid.Timestamp()
	}
	return user, createdAt
}

// prepareEntry returns the entry as it is inserted: without bookkeeping
// fields (each removal counted in stripped), and with its enqueue time
// changed to retimed when that is not zero. An entry whose time came from
// its ObjectId gets an explicit createdAt, since an _id cannot move.
func prepareEntry(raw bson.Raw, retimed time.Time, stripped map[string]int) (bson.D, error) {
	var doc bson.D
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	doc = slices.DeleteFunc(doc, func(el bson.E) bool {
		drop := slices.Contains(BookkeepingFields, el.Key) || strings.HasPrefix(el.Key, BookkeepingPrefix)
		if drop {
			stripped[el.Key]++
		}
		return drop
	})
	if _, created := QueueEntry(raw); retimed.IsZero() || created.IsZero() {
		return doc, nil // an untimed entry is malformed: the consumer dead-letters it as it is
	}
	at := bson.NewDateTimeFromTime(retimed)
	if raw.Lookup("createdAt").Type != bson.TypeDateTime {
		return append(doc, bson.E{Key: "createdAt", Value: at}), nil
	}
	for i := range doc {
		if doc[i].Key == "createdAt" {
			doc[i].Value = at
		}
	}
	return doc, nil
}

// shiftFields moves the named top-level date fields of a source document by
// shift, so that windowed components (docs/contract.md) count what they
// counted when the snapshot was taken.
func shiftFields(raw bson.Raw, fields []string, shift time.Duration) (any, error) {
	if shift == 0 || len(fields) == 0 {
		return raw, nil
	}
	var doc bson.D
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	for i, el := range doc {
		if dt, ok := el.Value.(bson.DateTime); ok && slices.Contains(fields, el.Key) {
			doc[i].Value = bson.NewDateTimeFromTime(dt.Time().Add(shift))
		}
	}
	return doc, nil
}
