package consumer

import (
	"bytes"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// distinctUsers lists the users of the window in order of their oldest
// entry, each once: a window of 500 entries with 20 users costs 20 refreshes,
// not 500. It also returns the malformed entries and the window's last
// position (nil for an empty window or one ending in an undated entry).
func distinctUsers(window []rawEntry) (users []string, bad []malformed, last *position) {
	seen := make(map[string]struct{}, len(window))
	for _, r := range window {
		e, m := parseEntry(r)
		if m != nil {
			bad = append(bad, *m)
			continue
		}
		if _, dup := seen[e.Username]; dup {
			continue
		}
		seen[e.Username] = struct{}{}
		users = append(users, e.Username)
	}
	if n := len(window); n > 0 && window[n-1].CreatedAt.Type == bson.TypeDateTime {
		last = &position{createdAt: window[n-1].CreatedAt.Time(), id: window[n-1].ID}
	}
	return users, bad, last
}

// before reports whether r comes after p in (createdAt, _id) order. Entries
// with the same createdAt are ordered by _id as MongoDB orders them only
// when both _ids are of one type; others are re-read, which is harmless.
func (p *position) before(r rawEntry) bool {
	if r.CreatedAt.Type != bson.TypeDateTime {
		return true
	}
	t := r.CreatedAt.Time()
	if !t.Equal(p.createdAt) {
		return t.After(p.createdAt)
	}
	if a, ok := p.id.ObjectIDOK(); ok {
		if b, ok := r.ID.ObjectIDOK(); ok {
			return bytes.Compare(b[:], a[:]) > 0
		}
	}
	return !bytes.Equal(p.id.Value, r.ID.Value)
}

// groupByUser coalesces absorbed entries into one batch per user. Entries of
// users not in want (which the query should never return) are ignored.
func groupByUser(raw []rawEntry, want map[string]struct{}) (byUser map[string][]Entry, bad []malformed) {
	byUser = make(map[string][]Entry, len(want))
	for _, r := range raw {
		e, m := parseEntry(r)
		if m != nil {
			bad = append(bad, *m)
			continue
		}
		if _, ok := want[e.Username]; !ok {
			continue
		}
		byUser[e.Username] = append(byUser[e.Username], e)
	}
	return byUser, bad
}
