// Package servertraits is the one place that knows which server the service
// talks to: MongoDB (a replica set, or a sharded cluster through mongos) or
// FerretDB 1.24, which the embedded server runs. Every workaround for what a
// server lacks is a named method here; code elsewhere never tests "is this
// FerretDB" itself. Until the server has answered (buildInfo and hello),
// every method reports MongoDB's behaviour: production is MongoDB.
package servertraits

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Info is what the server said about itself.
type Info struct {
	Version  string // buildInfo's version (FerretDB reports the MongoDB version it emulates)
	FerretDB string // FerretDB's own version ("unknown" where it names none); empty on MongoDB
	Backend  string // FerretDB's storage ("SQLite", "PostgreSQL") from its startup warnings
	Sharded  bool   // a mongos (hello's msg is "isdbgrid")
	// A replica set's name, its primary and whether the member answering is
	// it (hello), for the doctor; empty on a standalone and a mongos.
	SetName         string
	Primary         string
	WritablePrimary bool
}

// Traits holds what the server said, once it has, and what it turned out
// to lack (see Feature). Use New or Fixed.
type Traits struct {
	mu    sync.Mutex
	known bool
	fixed bool // Fixed: never asked, never changed by a probe
	info  Info
	learnt
}

// New returns traits not yet probed (MongoDB's behaviour until Probe succeeds).
func New() *Traits { return &Traits{} }

// Fixed returns traits known to be info, for tests of what the service sends
// to a server of that kind: Probe and Reprobe leave them as they are.
func Fixed(info Info) *Traits { return &Traits{known: true, fixed: true, info: info} }

// Probe asks the server what it is unless it has answered; a failure leaves
// the traits unknown.
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

// Reprobe asks the server again and reports whether it turned out to run
// other software than before (another version, FerretDB, a mongos), as
// after a reconnect or an upgrade under a running fleet: then every feature
// learnt refused is forgotten, so the next use tries it again.
func (t *Traits) Reprobe(ctx context.Context, db *mongo.Database) (changed bool, err error) {
	if t.fixed { // set only by Fixed, never changed
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
	if changed {
		t.forget()
	}
	return changed, nil
}

// Ask sends buildInfo and hello, which need no privilege on any database,
// and reads what the server says about itself.
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

// Parse reads the replies to buildInfo and hello; a hello field of another
// type is an error, not a panic.
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

// ParseBuildInfo reads the version and, on FerretDB, its own version. A field
// of another type reads as absent, except ferretdbVersion, whose presence
// alone says FerretDB ("unknown").
func ParseBuildInfo(raw bson.Raw) (version, ferret string) {
	version, _ = raw.Lookup("version").StringValueOK()
	if v, err := raw.LookupErr("ferretdbVersion"); err == nil {
		ferret, _ = v.StringValueOK()
		if ferret == "" {
			ferret = "unknown"
		}
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

// Sharded reports a sharded cluster: statements that name an entry's user
// (the shard key) go to one shard instead of every shard.
func (t *Traits) Sharded() bool { return t.Info().Sharded }

// FiltersUsernamesCheaply reports a server that evaluates the claim window's
// username regex on index keys (MongoDB). FerretDB decodes every document
// for it, so there the window filters usernames itself.
func (t *Traits) FiltersUsernamesCheaply() bool { return !t.ferret() }

// SingleUpdatesHoldConnections reports FerretDB 1.24: each multi: false
// statement of an update command holds one of the SQLite backend's 100
// connections until the whole command returns, and each matched document
// needs one more for its write: 100 such statements in a command deadlock
// the server, as do a fleet's concurrent commands of a few dozen each.
// multi: true statements free it at once (see UpdateByID).
func (t *Traits) SingleUpdatesHoldConnections() bool { return t.ferret() }

// PushesInDown reports a server that answers {field: {$in: [...]}} from an
// index (MongoDB). On FerretDB an $in over a batch of users decodes the whole
// collection in Go, so per-user queries are faster there wherever latency is
// not what binds (see the consumer's batch size).
func (t *Traits) PushesInDown() bool { return !t.ferret() }

// BackendUnknown reports a FerretDB that has not yet named its storage,
// which it does only once it has opened a database: ask again.
func (t *Traits) BackendUnknown() bool {
	info := t.Info()
	return t.Known() && info.FerretDB != "" && info.Backend == ""
}

// PushesEqualityDown reports a server that answers {field: value} from its
// storage rather than by decoding every document: MongoDB and FerretDB on
// PostgreSQL. FerretDB on SQLite pushes only {_id: x} down, so a per-user
// query there decodes the whole collection, once per user.
func (t *Traits) PushesEqualityDown() bool {
	info := t.Info()
	return info.FerretDB == "" || info.Backend != "SQLite"
}

// CheapUpserts reports a server whose upserts cost no more than updates.
// FerretDB turns an upsert that matches nothing into a scan plus an insert:
// batched score writes insert the first scores instead.
func (t *Traits) CheapUpserts() bool { return !t.ferret() }

// BoundsReplies reports a server that cuts a cursor's reply at 16 MiB
// (MongoDB). FerretDB 1.24 fails past the wire limit instead, so documents
// of unknown size are read one reply each there.
func (t *Traits) BoundsReplies() bool { return !t.ferret() }

// ExplainsPlans reports a server whose explain shows the plan it chose
// (MongoDB); FerretDB's shows none the doctor can read.
func (t *Traits) ExplainsPlans() bool { return !t.ferret() }

// EvaluatesElemMatch reports a server that evaluates $elemMatch as
// documented (MongoDB). FerretDB 1.24 lets different elements satisfy each
// of several conditions, matches nothing with conditions on fields of
// document elements, and refuses it over $and, $or, $nor, $ne or $not: the
// service refuses rules using it at boot (MisreadOperators).
func (t *Traits) EvaluatesElemMatch() bool { return !t.ferret() }

// MisreadOperators lists the query operators the server answers wrongly.
func (t *Traits) MisreadOperators() []string {
	if t.EvaluatesElemMatch() {
		return nil
	}
	return []string{"$elemMatch"}
}

// UpdateByID returns the write model for one statement of a bulk update
// whose filter pins _id: updateOne on MongoDB (retryable), and updateMany,
// which matches the same document and frees its connection at once, where
// SingleUpdatesHoldConnections.
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
