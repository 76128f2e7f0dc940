package consumer

import (
	"bytes"
	"fmt"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// distinctUsers lists the window's users by oldest entry, each once, its
// malformed entries, and its last position (nil if empty or undated).
func distinctUsers(window []rawEntry) (users []string, bad []malformed, last *position) {
	seen := make(map[string]bool, len(window))
	for _, r := range window {
		e, m := parseEntry(r)
		switch {
		case m != nil:
			bad = append(bad, *m)
		case !seen[e.Username]:
			seen[e.Username] = true
			users = append(users, e.Username)
		}
	}
	if n := len(window); n > 0 && window[n-1].CreatedAt.Type == bson.TypeDateTime {
		last = &position{createdAt: window[n-1].CreatedAt.Time(), id: window[n-1].ID}
	}
	return users, bad, last
}

// before reports whether r comes after p in (createdAt, _id) order; at one
// createdAt only ObjectIds are ordered as MongoDB does, others re-read (harmless).
func (p *position) before(r rawEntry) bool {
	if r.CreatedAt.Type != bson.TypeDateTime {
		return true
	}
	t := r.CreatedAt.Time()
	if !t.Equal(p.createdAt) {
		return t.After(p.createdAt)
	}
	a, okA := p.id.ObjectIDOK()
	if b, okB := r.ID.ObjectIDOK(); okA && okB {
		return bytes.Compare(b[:], a[:]) > 0
	}
	return !bytes.Equal(p.id.Value, r.ID.Value)
}

// groupByUser coalesces absorbed entries into one batch per user.
func groupByUser(raw []rawEntry) (byUser map[string][]Entry, bad []malformed) {
	byUser = map[string][]Entry{}
	for _, r := range raw {
		if e, m := parseEntry(r); m != nil {
			bad = append(bad, *m)
		} else {
			byUser[e.Username] = append(byUser[e.Username], e)
		}
	}
	return byUser, bad
}

// MaxUsernameBytes is the longest username the contract (docs/contract.md) accepts.
const MaxUsernameBytes = 256

// Entry is a queue entry as the pipeline needs it: which user, since when.
type Entry struct {
	ID        any // the raw _id value, whatever type the producer chose
	Username  string
	CreatedAt time.Time
}

// rawEntry is the projection the claim queries read.
type rawEntry struct {
	ID        bson.RawValue `bson:"_id"`
	Username  bson.RawValue `bson:"username"`
	CreatedAt bson.RawValue `bson:"createdAt"`
}

// malformed is an entry that can never be processed, and why (for the dead letter).
type malformed struct {
	ID     any
	Detail string
}

// parseEntry applies the contract's (docs/contract.md) rules. What it
// rejects is dead-lettered, never retried: no refresh can make it valid.
func parseEntry(r rawEntry) (Entry, *malformed) {
	if r.ID.Type == 0 {
		return Entry{}, &malformed{Detail: "entry has no _id"}
	}
	bad := func(format string, args ...any) (Entry, *malformed) {
		return Entry{}, &malformed{ID: r.ID, Detail: fmt.Sprintf(format, args...)}
	}
	user, ok := r.Username.StringValueOK()
	switch {
	case r.Username.Type == 0:
		return bad("username is missing")
	case !ok:
		return bad("username is a %s, not a string", r.Username.Type)
	case user == "":
		return bad("username is empty")
	case len(user) > MaxUsernameBytes:
		return bad("username is %d bytes, more than %d", len(user), MaxUsernameBytes)
	case !utf8.ValidString(user):
		return bad("username is not valid UTF-8")
	}
	// The RawValue encodes back to the identical BSON: filters on it match.
	e := Entry{ID: r.ID, Username: user}
	oid, isOID := r.ID.ObjectIDOK()
	switch t := r.CreatedAt.Type; {
	case t == bson.TypeDateTime:
		e.CreatedAt = r.CreatedAt.Time()
	case t != 0 && t != bson.TypeNull:
		return bad("createdAt is a %s, not a date", t)
	case !isOID:
		return bad("createdAt is missing and _id is not an ObjectId")
	default:
		e.CreatedAt = oid.Timestamp()
	}
	return e, nil
}
