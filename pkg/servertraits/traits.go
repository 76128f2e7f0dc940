// Package servertraits is the one place that knows which server the service talks to: MongoDB
// (a replica set, or sharded through mongos) or FerretDB 1.24, the embedded server. Every
// workaround for what a server lacks is a named method here; code elsewhere never asks "is this
// FerretDB". Until the server has answered, every method reports MongoDB's behaviour.
package servertraits

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Info is what the server said about itself.
type Info struct {
	Version  string // buildInfo's version (FerretDB reports the MongoDB version it emulates)
	FerretDB string // FerretDB's own version ("unknown" where it names none); empty on MongoDB
	Backend  string // FerretDB's storage ("SQLite", "PostgreSQL") from its startup warnings
	Sharded  bool   // a mongos (hello's msg is "isdbgrid")
	// hello's, for the doctor; empty on a standalone and a mongos.
	SetName         string
	Primary         string
	WritablePrimary bool
}

// Traits holds what the server said and what it turned out to lack. Use New or Fixed.
type Traits struct {
	mu    sync.Mutex
	known bool
	fixed bool // Fixed: never asked, never changed by a probe
	info  Info
	flags sync.Map // what the server refused: Feature → *atomic.Bool
}

// New returns traits not yet probed (MongoDB's behaviour until Probe succeeds).
func New() *Traits { return &Traits{} }

// Fixed returns traits known to be info, which Probe and Reprobe leave as
// they are: for tests of what the service sends to a server of that kind.
func Fixed(info Info) *Traits { return &Traits{known: true, fixed: true, info: info} }

// Probe asks the server what it is unless it has answered; a failure leaves it unknown.
func (t *Traits) Probe(ctx context.Context, db *mongo.Database) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.known {
		return nil
	}
	info, err := Ask(ctx, db)
	if err == nil {
		t.info, t.known = info, true
	}
	return err
}

// Reprobe asks the server again and reports whether it runs other software
// than before (another version, FerretDB, a mongos; after a reconnect or an
// upgrade): then every feature learnt refused is forgotten, to be tried again.
func (t *Traits) Reprobe(ctx context.Context, db *mongo.Database) (changed bool, err error) {
	if t.fixed {
		return false, nil
	}
	info, err := Ask(ctx, db)
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.info
	changed = t.known && (o.Version != info.Version || o.FerretDB != info.FerretDB || o.Sharded != info.Sharded)
	t.info, t.known = info, true
	if changed { // every flag cleared in place: their holders see the change
		t.flags.Range(func(_, b any) bool {
			b.(*atomic.Bool).Store(false)
			return true
		})
	}
	return changed, nil
}

// Ask sends buildInfo and hello (no privilege needed) and reads the replies.
func Ask(ctx context.Context, db *mongo.Database) (Info, error) {
	var replies [2]bson.Raw
	for i, cmd := range []string{"buildInfo", "hello"} {
		raw, err := db.RunCommand(ctx, bson.D{{Key: cmd, Value: 1}}).Raw()
		if err != nil {
			return Info{}, fmt.Errorf("asking the server what it is (%s): %w", cmd, err)
		}
		replies[i] = raw
	}
	info, err := Parse(replies[0], replies[1])
	if err == nil && info.FerretDB != "" {
		// FerretDB names its storage only in its startup warnings
		// ("Powered by FerretDB v1.24.2 and SQLite 3.46.0.").
		var log struct {
			Lines []string `bson:"log"`
		}
		if db.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "getLog", Value: "startupWarnings"}}).Decode(&log) == nil {
			info.Backend = ParseBackend(log.Lines)
		}
	}
	return info, err
}

// ParseBackend reads FerretDB's storage from its startup warnings.
func ParseBackend(lines []string) string {
	for _, l := range lines {
		if _, rest, ok := strings.Cut(l, "Powered by FerretDB "); ok {
			if _, backend, ok := strings.Cut(rest, " and "); ok {
				name, _, _ := strings.Cut(backend, " ")
				return strings.TrimSuffix(name, ".")
			}
		}
	}
	return ""
}

// Parse reads the replies to buildInfo and hello; a hello field of another type errs, not panics.
func Parse(buildInfo, hello bson.Raw) (Info, error) {
	var h struct {
		SetName           string `bson:"setName"`
		Msg               string `bson:"msg"`
		IsWritablePrimary bool   `bson:"isWritablePrimary"`
		Primary           string `bson:"primary"`
	}
	if err := bson.Unmarshal(hello, &h); err != nil {
		return Info{}, fmt.Errorf("reading hello: %w", err)
	}
	info := Info{Sharded: h.Msg == "isdbgrid", SetName: h.SetName, Primary: h.Primary, WritablePrimary: h.IsWritablePrimary}
	info.Version, info.FerretDB = ParseBuildInfo(buildInfo)
	return info, nil
}

// ParseBuildInfo reads the version and, on FerretDB, its own; a field of
// another type reads as absent, but ferretdbVersion's presence says FerretDB.
func ParseBuildInfo(raw bson.Raw) (version, ferret string) {
	version, _ = raw.Lookup("version").StringValueOK()
	if v, err := raw.LookupErr("ferretdbVersion"); err == nil {
		s, _ := v.StringValueOK()
		ferret = cmp.Or(s, "unknown")
	}
	return version, ferret
}

func (t *Traits) Known() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.known
}

// Info returns what the server said (the zero Info before it has).
func (t *Traits) Info() Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.info
}

func (t *Traits) ferret() bool { return t.Info().FerretDB != "" }

// Sharded reports a sharded cluster: statements naming an entry's user (the shard key) go to one shard.
func (t *Traits) Sharded() bool { return t.Info().Sharded }

// FiltersUsernamesCheaply reports a server that evaluates the claim window's username regex on
// index keys (MongoDB). FerretDB decodes every document for it: there the window filters itself.
func (t *Traits) FiltersUsernamesCheaply() bool { return !t.ferret() }

// SingleUpdatesHoldConnections reports FerretDB 1.24: each multi: false statement of an update
// command holds one of the SQLite backend's 100 connections until the whole command returns, and
// each matched document needs one more for its write: 100 such statements in a command deadlock
// the server, as do a fleet's concurrent commands of a few dozen each. multi: true statements
// free it at once (see UpdateByID).
func (t *Traits) SingleUpdatesHoldConnections() bool { return t.ferret() }

// PushesInDown reports a server that answers {field: {$in: [...]}} from an index (MongoDB).
// FerretDB decodes the whole collection for it: per-user queries are faster there unless latency
// binds (the consumer's batch size).
func (t *Traits) PushesInDown() bool { return !t.ferret() }

// BackendUnknown reports a FerretDB that has not yet named its storage,
// which it does only once it has opened a database: ask again.
func (t *Traits) BackendUnknown() bool {
	info := t.Info()
	return t.Known() && info.FerretDB != "" && info.Backend == ""
}

// PushesEqualityDown reports a server that answers {field: value} from its
// storage (MongoDB, FerretDB on PostgreSQL). FerretDB on SQLite pushes only
// {_id: x} down: a per-user query decodes the whole collection.
func (t *Traits) PushesEqualityDown() bool {
	info := t.Info() // one snapshot: a Reprobe between two reads could mix servers
	return info.FerretDB == "" || info.Backend != "SQLite"
}

// CheapUpserts reports a server whose upserts cost no more than updates. FerretDB turns one
// matching nothing into a scan plus an insert: batched score writes insert first scores instead.
func (t *Traits) CheapUpserts() bool { return !t.ferret() }

// BoundsReplies reports a server that cuts a cursor's reply at 16 MiB (MongoDB). FerretDB 1.24
// fails past it: documents of unknown size are read one reply each there.
func (t *Traits) BoundsReplies() bool { return !t.ferret() }

// ExplainsPlans reports a server whose explain shows the plan it chose (MongoDB, not FerretDB).
func (t *Traits) ExplainsPlans() bool { return !t.ferret() }

// EvaluatesElemMatch reports a server that evaluates $elemMatch as documented (MongoDB). FerretDB
// 1.24 lets different elements satisfy each condition, matches nothing on fields of document
// elements, and refuses it over $and, $or, $nor, $ne or $not (see MisreadOperators).
func (t *Traits) EvaluatesElemMatch() bool { return !t.ferret() }

// MisreadOperators lists the query operators the server answers wrongly.
func (t *Traits) MisreadOperators() []string {
	if t.EvaluatesElemMatch() {
		return nil
	}
	return []string{"$elemMatch"}
}

// UpdateByID returns the write model for one statement of a bulk update whose filter pins _id:
// updateOne on MongoDB (retryable), and updateMany, which matches the same document and frees
// its connection at once, where SingleUpdatesHoldConnections.
func (t *Traits) UpdateByID(filter, update any, upsert bool) mongo.WriteModel {
	var up *bool // unset unless upserting: the statement carries no upsert field
	if upsert {
		up = &upsert
	}
	if t.SingleUpdatesHoldConnections() {
		return &mongo.UpdateManyModel{Filter: filter, Update: update, Upsert: up}
	}
	return &mongo.UpdateOneModel{Filter: filter, Update: update, Upsert: up}
}

// IDIndexName names the _id index every collection has (kIdIndexName in MongoDB's source).
const IDIndexName = "_id_"

// IndexName is the name the server gives an unnamed index on keys, each key and value joined by
// "_" ("createdAt_1__id_1"), the _id index excepted. Hints name their index: MongoDB refuses a
// hint by a key pattern that two indexes share (differing by collation or filter).
func IndexName(keys bson.D) string {
	if len(keys) == 1 && keys[0].Key == "_id" && fmt.Sprint(keys[0].Value) == "1" {
		return IDIndexName
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s_%v", k.Key, k.Value)
	}
	return strings.Join(parts, "_")
}

// RefusesHint reports the server refusing a hint: MongoDB's planner answers BadValue (2) "hint
// provided does not correspond to an existing index" ("bad hint" in older releases) and
// IndexNotFound (27) "Hint matched multiple indexes"; a BadValue not mentioning the hint is the
// query's own error. FerretDB ignores hints.
func RefusesHint(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(27) || se.HasErrorCodeWithMessage(2, "hint"))
}

// Overloaded reports an error saying the embedded server was too busy to answer: "not now", as a
// MongoDB timeout is, retried and never charged. The messages, which MongoDB never sends, are what
// FerretDB 1.24's SQLite backend passes on as an InternalError (code 1) under load: the writer's
// lock not granted within its busy timeout (SQLITE_BUSY), and a query cut short by its maxTimeMS
// (SQLITE_INTERRUPT, not always MaxTimeMSExpired).
func Overloaded(err error) bool {
	var se mongo.ServerError
	// With the code: a write error of a bulk write carries its own.
	return errors.As(err, &se) && slices.ContainsFunc([]string{"database is locked", "interrupted (9)"}, func(m string) bool {
		return se.HasErrorCodeWithMessage(1, m)
	})
}

// Feature names something a server may refuse as not implemented though its version promises it:
// learnt, not probed (no buildInfo or hello reply lists them). Once refused, the way round is taken.
type Feature string

// The features FerretDB 1.24 refuses: $group's $max, $min and $avg accumulators (it has $sum and
// $count; scoring takes the way round), and createIndexes' expireAfterSeconds and
// partialFilterExpression (consumer.EnsureIndexes builds TTL indexes without it, skips partial ones).
const (
	AccumulatorMax Feature = "$max accumulator"
	AccumulatorMin Feature = "$min accumulator"
	AccumulatorAvg Feature = "$avg accumulator"
	TTLIndexes     Feature = "TTL indexes"
	PartialIndexes Feature = "partial indexes"
)

// BatchedShape names the batched query of a scoring op (one aggregation over
// a batch of users), which a server may refuse while it answers per user.
func BatchedShape(op string) Feature { return Feature("batched " + op) }

// Learnt returns the flag recording that the server refused f, read without
// a lock; CompareAndSwap(false, true) tells the first to learn it.
func (t *Traits) Learnt(f Feature) *atomic.Bool {
	b, ok := t.flags.Load(f) // per rule component and recompute: allocate only the first time
	if !ok {
		b, _ = t.flags.LoadOrStore(f, new(atomic.Bool))
	}
	return b.(*atomic.Bool)
}

func (t *Traits) Lacks(f Feature) bool { return t.Learnt(f).Load() }

// Refused records that the server refused f and reports whether this is
// the first time since the last Reprobe that found other software.
func (t *Traits) Refused(f Feature) (first bool) { return t.Learnt(f).CompareAndSwap(false, true) }

// Lacking lists the features the server has refused, sorted.
func (t *Traits) Lacking() []Feature {
	var out []Feature
	t.flags.Range(func(f, b any) bool {
		if b.(*atomic.Bool).Load() {
			out = append(out, f.(Feature))
		}
		return true
	})
	slices.Sort(out)
	return out
}
