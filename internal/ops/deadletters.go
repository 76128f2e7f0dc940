package ops

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
)

// Filter selects dead letters. The zero Filter selects all of them.
type Filter struct {
	Reasons []string  `json:"reasons,omitempty"` // deadLetter.reason is one of these
	User    string    `json:"user,omitempty"`    // username equals this
	Since   time.Time `json:"since,omitzero"`    // deadLetter.at at or after
	Until   time.Time `json:"until,omitzero"`    // deadLetter.at before
}

// BSON is the filter as a query document.
func (f Filter) BSON() bson.D {
	q := bson.D{}
	if len(f.Reasons) > 0 {
		q = append(q, bson.E{Key: "deadLetter.reason", Value: bson.D{{Key: "$in", Value: f.Reasons}}})
	}
	if f.User != "" {
		q = append(q, bson.E{Key: "username", Value: f.User})
	}
	at := bson.D{}
	if !f.Since.IsZero() {
		at = append(at, bson.E{Key: "$gte", Value: f.Since})
	}
	if !f.Until.IsZero() {
		at = append(at, bson.E{Key: "$lt", Value: f.Until})
	}
	if len(at) > 0 {
		q = append(q, bson.E{Key: "deadLetter.at", Value: at})
	}
	return q
}

// Empty reports whether the filter selects every dead letter.
func (f Filter) Empty() bool { return len(f.BSON()) == 0 }

// CountDeadLetters counts the dead letters matching f, exactly up to upTo.
func CountDeadLetters(ctx context.Context, dead *mongo.Collection, f Filter, upTo int64) (int64, bool, error) {
	n, exact, err := countUpTo(ctx, dead, f.BSON(), upTo)
	if err != nil {
		return 0, false, fmt.Errorf("counting dead letters (%s): %w", f, err)
	}
	return n, exact, nil
}

// String describes the filter for a prompt or a summary line.
func (f Filter) String() string {
	var parts []string
	if len(f.Reasons) > 0 {
		parts = append(parts, "reason "+strings.Join(f.Reasons, " or "))
	}
	if f.User != "" {
		parts = append(parts, fmt.Sprintf("user %q", f.User))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "dead-lettered since "+stamp(f.Since))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "dead-lettered before "+stamp(f.Until))
	}
	if len(parts) == 0 {
		return "all dead letters"
	}
	return strings.Join(parts, ", ")
}

// ParseTime reads a --since or --until value: an RFC 3339 time
// (2026-03-01T12:00:00Z), a date (2026-03-01, midnight UTC), or a duration
// meaning that long before now (90m, 24h).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration means that long ago and must not be negative", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-03-01T12:00:00Z), a date (2026-03-01) or a duration ago (24h)", s)
}

// DeadLetterRow is one dead letter as `deadletters list` shows it: the
// deadLetter subdocument and the fields that identify the entry, never the
// whole document.
type DeadLetterRow struct {
	ID         string     `json:"id"`       // ObjectId hex, a string as is, else Extended JSON
	Username   *string    `json:"username"` // null when not a string
	UserNote   string     `json:"usernameNote,omitempty"`
	CreatedAt  *time.Time `json:"createdAt"`
	Reason     string     `json:"reason"`
	At         time.Time  `json:"at"`
	Attempts   int        `json:"attempts"`
	Error      string     `json:"error"`
	OriginalID string     `json:"originalId,omitempty"` // a renamed copy's original _id
}

// DeadLetterList is `deadletters list --json`.
type DeadLetterList struct {
	SchemaVersion int             `json:"schemaVersion"`
	Kind          string          `json:"kind"` // "deadletters.list"
	Filter        Filter          `json:"filter"`
	Matching      int64           `json:"matching"`
	MatchingExact bool            `json:"matchingExact"`
	Limit         int             `json:"limit"`
	DeadLetters   []DeadLetterRow `json:"deadLetters"`
}

// storedDeadLetter is what the operator commands read of a dead letter:
// the fields that identify the entry and the deadLetter subdocument.
type storedDeadLetter struct {
	ID         bson.RawValue           `bson:"_id"`
	Username   bson.RawValue           `bson:"username"`
	CreatedAt  bson.RawValue           `bson:"createdAt"`
	DeadLetter consumer.DeadLetterInfo `bson:"deadLetter"`
}

// ListDeadLetters returns the newest limit dead letters matching f, and how
// many match in all (exact up to exactLimit).
func ListDeadLetters(ctx context.Context, dead *mongo.Collection, f Filter, limit int, exactLimit int64) (*DeadLetterList, error) {
	l := &DeadLetterList{SchemaVersion: SchemaVersion, Kind: "deadletters.list", Filter: f, Limit: limit, DeadLetters: []DeadLetterRow{}}
	var err error
	if l.Matching, l.MatchingExact, err = CountDeadLetters(ctx, dead, f, exactLimit); err != nil {
		return nil, err
	}
	docs, err := findAll[storedDeadLetter](ctx, dead, f.BSON(), options.Find().SetSort(bson.D{{Key: "deadLetter.at", Value: -1}}).
		SetLimit(int64(limit)).SetBatchSize(int32(limit)).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "username", Value: 1}, {Key: "createdAt", Value: 1}, {Key: "deadLetter", Value: 1}}), fmt.Sprintf("reading %d dead letters (%s)", limit, f))
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		r := DeadLetterRow{
			ID: idString(d.ID), Reason: d.DeadLetter.Reason, At: d.DeadLetter.At,
			Attempts: int(d.DeadLetter.Attempts), Error: clip(d.DeadLetter.Error, 1024), OriginalID: idString(d.DeadLetter.OriginalID),
		}
		if u, ok := d.Username.StringValueOK(); ok {
			u = clip(u, 300)
			r.Username = &u
		} else if d.Username.Type == 0 {
			r.UserNote = "missing"
		} else {
			r.UserNote = fmt.Sprintf("%s: %s", d.Username.Type, clip(d.Username.String(), 100))
		}
		if d.CreatedAt.Type == bson.TypeDateTime {
			t := d.CreatedAt.Time()
			r.CreatedAt = &t
		}
		l.DeadLetters = append(l.DeadLetters, r)
	}
	return l, nil
}

// IDCandidates are the _id values an operator's argument may mean: an
// ObjectId given as hex also matches the string, Extended JSON ({"$oid":
// …}, 42, "x") is taken as that value, anything else is a string.
func IDCandidates(arg string) (bson.A, error) {
	if oid, err := bson.ObjectIDFromHex(arg); err == nil {
		return bson.A{oid, arg}, nil
	}
	if strings.HasPrefix(arg, "{") || strings.HasPrefix(arg, `"`) || numeric.MatchString(arg) {
		var holder struct {
			V bson.RawValue `bson:"v"`
		}
		if err := bson.UnmarshalExtJSON([]byte(`{"v":`+arg+`}`), false, &holder); err != nil {
			return nil, fmt.Errorf("reading %s as an Extended JSON value: %w", arg, err)
		}
		if numeric.MatchString(arg) {
			return bson.A{holder.V, arg}, nil // "42" may be a string _id too
		}
		return bson.A{holder.V}, nil
	}
	return bson.A{arg}, nil
}

var numeric = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// ShowDeadLetters returns the whole documents whose _id, or whose original
// _id (a renamed copy), is one of ids.
func ShowDeadLetters(ctx context.Context, dead *mongo.Collection, ids bson.A) ([]bson.Raw, error) {
	in := bson.D{{Key: "$in", Value: ids}}
	return findAll[bson.Raw](ctx, dead, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "_id", Value: in}}, bson.D{{Key: "deadLetter.originalId", Value: in}},
	}}}, options.Find().SetLimit(100), fmt.Sprintf("reading dead letter %v", ids))
}

// WriteExtJSON prints documents as indented relaxed Extended JSON, the
// format mongosh and mongoexport show.
func WriteExtJSON(w io.Writer, docs []bson.Raw) error {
	for _, d := range docs {
		b, err := bson.MarshalExtJSONIndent(d, false, false, "", "  ")
		if err != nil {
			return fmt.Errorf("rendering a dead letter as Extended JSON: %w", err)
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}

// Purge deletes the dead letters matching f, at most limit (0: all), in
// batches: one read of batch _ids, one delete command of them. progress is
// called after each batch with the running total.
func Purge(ctx context.Context, dead *mongo.Collection, f Filter, limit int64, batch int, progress func(deleted int64)) (int64, error) {
	var deleted int64
	for limit == 0 || deleted < limit {
		n := int64(batch)
		if limit > 0 {
			n = min(n, limit-deleted)
		}
		docs, err := findAll[storedDeadLetter](ctx, dead, f.BSON(), options.Find().SetLimit(n).SetBatchSize(int32(n)).SetProjection(bson.D{{Key: "_id", Value: 1}}),
			fmt.Sprintf("reading %d dead letter ids", n))
		if err != nil {
			return deleted, err
		}
		ids := make(bson.A, len(docs))
		for i, d := range docs {
			ids[i] = d.ID
		}
		if len(ids) == 0 {
			return deleted, nil
		}
		gone, err := deleteByID(ctx, dead, ids)
		deleted += gone
		if err != nil {
			return deleted, fmt.Errorf("deleting %d dead letters: %w", len(ids), err)
		}
		if progress != nil {
			progress(deleted)
		}
		if int64(len(ids)) < n {
			return deleted, nil
		}
	}
	return deleted, nil
}

// deleteByID deletes coll's documents with these _ids in one command, a
// statement per _id: plain _id equality is an index lookup on every server
// (FerretDB pushes down nothing else). It returns how many it deleted, on
// an error too.
func deleteByID(ctx context.Context, coll *mongo.Collection, ids bson.A) (int64, error) {
	models := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		models[i] = mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: id}})
	}
	res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if res == nil {
		return 0, err
	}
	return res.DeletedCount, err
}
