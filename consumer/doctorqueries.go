package consumer

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DoctorQuery is a HotQuery as the pipeline sends it: with the hints it
// sends and whether its plan is meant to be covered. The doctor explains
// each with the hint production sends, so that it judges the plan
// production runs, not one the planner would pick unhinted.
type DoctorQuery struct {
	HotQuery // Command carries no hint: add Hints[i] to it
	// Hints are the indexes the pipeline hints, in the order it falls back
	// through them when the server refuses one (see hints); after the last
	// it runs unhinted. Nil: the pipeline never hints this query.
	Hints []bson.D
	// Covered: docs/query-plans.md promises the index alone answers it (no
	// document is read).
	Covered bool
}

// DoctorQueries returns HotQueries with the hints the pipeline sends: the
// window's list (newHints(windowIndex) in New) for the window, its paged
// form and the malformed scan; absorb's list (newHints(absorbIndex,
// legacyAbsorbIndex)); the lease read's idIndex (blockedAmong). The ack
// delete is never hinted.
func DoctorQueries(colls Collections, claimWindow int, now time.Time) []DoctorQuery {
	hot := HotQueries(colls, claimWindow, now)
	out := make([]DoctorQuery, 0, len(hot))
	for _, q := range hot {
		d := DoctorQuery{HotQuery: q}
		d.Command = withoutHint(q.Command)
		switch q.Name {
		case QueryClaimWindow, QueryWindowPaged:
			d.Hints, d.Covered = []bson.D{windowIndex}, true
		case QueryMalformed:
			d.Hints = []bson.D{windowIndex}
		case QueryAbsorb:
			d.Hints, d.Covered = []bson.D{absorbIndex, legacyAbsorbIndex}, true
		case QueryLeaseRead:
			d.Hints = []bson.D{idIndex}
		}
		out = append(out, d)
	}
	return out
}

// withoutHint copies cmd without its hint, so that the caller's hint is
// the only one.
func withoutHint(cmd bson.D) bson.D {
	out := make(bson.D, 0, len(cmd))
	for _, e := range cmd {
		if e.Key != "hint" {
			out = append(out, e)
		}
	}
	return out
}
