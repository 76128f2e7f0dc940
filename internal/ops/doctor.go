package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Check levels.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Check is one line of the doctor's table.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok | warn | fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// DoctorReport is `doctor --json`.
type DoctorReport struct {
	SchemaVersion int       `json:"schemaVersion"`
	Kind          string    `json:"kind"` // "doctor"
	At            time.Time `json:"at"`
	Database      string    `json:"database"`
	Checks        []Check   `json:"checks"`
	OK            int       `json:"ok"`
	Warnings      int       `json:"warnings"`
	Failures      int       `json:"failures"`
}

func (r *DoctorReport) add(checks ...Check) {
	for _, c := range checks {
		r.Checks = append(r.Checks, c)
		*cmp.Or(map[string]*int{OK: &r.OK, Warn: &r.Warnings}[c.Status], &r.Failures)++
	}
}

// DoctorConfig is what the doctor checks the server against.
type DoctorConfig struct {
	Colls         Collections
	Rules         *scoring.Rules
	Replicas      int // the fleet's size; one more is counted for a rollout's surge pod
	PoolSize      int // one replica's maxPoolSize
	PerReplica    int // connections one replica may open to one server: pool + monitoring
	ClaimWindow   int
	LeaseDuration time.Duration
}

// Doctor runs every check against the configured server, changing nothing:
// reads, explains and a change stream opened and closed at once.
func Doctor(ctx context.Context, cfg DoctorConfig) *DoctorReport {
	r := &DoctorReport{SchemaVersion: SchemaVersion, Kind: "doctor", At: time.Now(), Database: cfg.Colls.DB.Name()}
	start := time.Now()
	err := cfg.Colls.DB.Client().Ping(ctx, nil)
	rtt := time.Since(start)
	var info servertraits.Info // what hello and buildInfo say, read as the service reads them
	if err == nil {
		info, err = servertraits.Ask(ctx, cfg.Colls.DB.Client().Database("admin"))
	} else {
		err = fmt.Errorf("ping: %w", err)
	}
	if err != nil {
		r.add(Check{Name: "reachable", Status: Fail, Detail: err.Error(),
			Fix: "check MONGODB_URI (host, credentials, TLS), the network path from here (DNS, firewall, Atlas IP access list)"})
		return r
	}
	r.add(Check{Name: "reachable", Status: OK, Detail: fmt.Sprintf("ping answered in %.1f ms", float64(rtt.Microseconds())/1000)})
	queue := cfg.Colls.Queue.Name()
	streams := Check{Name: "change streams", Status: OK, Detail: "a change stream on " + queue + " opens: new entries wake the consumer at once"}
	if !consumer.DetectChangeStreams(ctx, cfg.Colls.Queue) {
		streams.Status, streams.Detail = Warn, "a change stream on "+queue+" does not open: the consumer polls every POLL_INTERVAL instead (up to that much extra latency)"
		streams.Fix = "a replica set or sharded cluster, and the changeStream and find actions on the queue"
	}
	r.add(versionCheck(info), topologyCheck(info), streams, clockCheck(ctx, cfg), connectionsCheck(ctx, cfg))
	names, err := cfg.Colls.DB.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		r.add(Check{Name: "collections", Status: Fail, Detail: fmt.Sprintf("listing the collections of %s: %v", cfg.Colls.DB.Name(), err),
			Fix: "grant listCollections on the database (readWrite includes it)"})
		return r
	}
	ix := &indexCache{db: cfg.Colls.DB, exists: map[string]bool{}, byColl: map[string][]indexInfo{}}
	for _, n := range names {
		ix.exists[n] = true
	}
	specs := map[string][]string{consumer.IDIndex: {"_id:1"}} // the keys of each index, by name
	for _, spec := range consumer.IndexSpecs(cfg.Colls.Collections) {
		r.add(indexCheck(ctx, spec, ix))
		specs[spec.Name] = keyList(spec.Model.Keys)
	}
	for _, old := range consumer.RetiredIndexes(cfg.Colls.Collections) {
		r.add(retiredIndexCheck(ctx, old, ix)...)
	}
	// Each hot query (consumer.DoctorQueries) explained (queryPlanner: runs
	// nothing) with the hint production sends: the winning plan must read the
	// index meant for it, covered where it is meant to be.
	for _, q := range consumer.DoctorQueries(cfg.Colls.Collections, cfg.ClaimWindow, time.Now()) {
		c := Check{Name: "plan: " + q.Name, Status: Warn, Detail: q.Coll.Name() + " does not exist yet: nothing to explain"}
		if ix.exists[q.Coll.Name()] {
			c.Status, c.Detail, c.Fix = explainQuery(ctx, cfg, q, specs[q.Index], info.FerretDB != "")
		}
		r.add(c)
	}
	for _, comp := range cfg.Rules.Components {
		r.add(sourceCheck(ctx, cfg, ix, comp))
	}
	r.add(privilegeChecks(ctx, cfg)...)
	return r
}

// sourceCheck checks a scoring rule's source collection: present, and
// indexed as every refresh queries it (Component.IndexKeys: userField, the
// fields its filter pins to one value, then timeField with a window).
func sourceCheck(ctx context.Context, cfg DoctorConfig, ix *indexCache, comp scoring.Component) Check {
	c := Check{Name: fmt.Sprintf("source %s (%s)", comp.Collection, comp.Name), Status: Fail}
	indexes, err := ix.list(ctx, comp.Collection)
	switch {
	case !ix.exists[comp.Collection]:
		c.Detail = "collection does not exist: every user scores 0 on " + comp.Name
		c.Fix = "check the collection name in the rules file (" + cfg.Rules.Source + ") and MONGODB_DATABASE"
		return c
	case err != nil:
		c.Detail = err.Error()
		return c
	}
	if c.Status, c.Detail, c.Fix = sourceVerdict(comp, indexes); c.Status == Fail {
		return c
	}
	// The collection's default collation (FerretDB has none).
	found, err := cfg.Colls.DB.ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: comp.Collection}})
	if err != nil || len(found) == 0 {
		return c
	}
	if locale, _ := found[0].Options.Lookup("collation", "locale").StringValueOK(); locale != "" && locale != "simple" {
		c.Status, c.Detail, c.Fix = collationVerdict(comp, indexes, locale, c.Status, c.Detail, c.Fix)
	}
	return c
}

// WriteDoctor prints the report as a table, each fix under its check.
func WriteDoctor(w io.Writer, r *DoctorReport) error {
	return table(w, func(p func(string, ...any)) {
		p("scorerefresh doctor: database %s\n\n", r.Database)
		p("STATUS\tCHECK\tDETAIL\n")
		for _, c := range r.Checks {
			p("%s\t%s\t%s\n", c.Status, c.Name, c.Detail)
			if c.Fix != "" && c.Status != OK {
				p("\t\tfix: %s\n", c.Fix)
			}
		}
		p("\n%d ok, %d warnings, %d failures\n", r.OK, r.Warnings, r.Failures)
	})
}

func versionCheck(info servertraits.Info) Check {
	if info.FerretDB != "" {
		return Check{Name: "server version", Status: Warn,
			Detail: fmt.Sprintf("FerretDB, version %s (reports MongoDB %s): the embedded or development server, which lacks change streams, TTL and partial indexes and query plans", info.FerretDB, info.Version),
			Fix:    "fine for the demo and tests; production runs on MongoDB 6.0 or later"}
	}
	if major, _ := strconv.Atoi(strings.SplitN(info.Version, ".", 2)[0]); major >= 6 {
		return Check{Name: "server version", Status: OK, Detail: "MongoDB " + info.Version}
	}
	return Check{Name: "server version", Status: Warn, Detail: fmt.Sprintf("MongoDB %s: older than 6.0, the oldest version this service is built and tested for", info.Version),
		Fix: "upgrade the server to 6.0 or later"}
}

func topologyCheck(h servertraits.Info) Check {
	c := Check{Name: "topology"}
	switch {
	case h.Sharded:
		c.Status, c.Detail = OK, "sharded cluster (through mongos): change streams available"
	case h.SetName != "" && !h.WritablePrimary:
		c.Status, c.Detail = Fail, fmt.Sprintf("replica set %s, but connected to a member that is not the primary (primary: %s): writes fail", h.SetName, h.Primary)
		c.Fix = "let MONGODB_URI name the replica set (replicaSet=…, or mongodb+srv://) instead of one member with directConnection=true"
	case h.SetName != "":
		c.Status, c.Detail = OK, fmt.Sprintf("replica set %s, primary %s: change streams available", h.SetName, h.Primary)
	default:
		c.Status, c.Detail = Warn, "standalone server: no change streams (the consumer polls every POLL_INTERVAL) and no retryable writes"
		c.Fix = "run MongoDB as a replica set (a single-node set will do) or use Atlas"
	}
	return c
}

// clockCheck compares this host's clock with the server's: replicas judge
// lease expiries by their own clocks, so clocks a good part of LEASE_DURATION
// apart take live leases early (a duplicate refresh) or hold backoffs long.
func clockCheck(ctx context.Context, cfg DoctorConfig) Check {
	server, local, rtt, err := ServerTime(ctx, cfg.Colls.DB)
	if err != nil {
		return Check{Name: "clock", Status: Warn, Detail: err.Error()}
	}
	status, detail, fix := clockVerdict(server.Sub(local), rtt, cfg.LeaseDuration)
	return Check{Name: "clock", Status: status, Detail: detail, Fix: fix}
}

func clockVerdict(skew, rtt, lease time.Duration) (status, detail, fix string) {
	// hello.localTime has millisecond precision and was read somewhere in the
	// round trip: that much of the difference is measurement.
	slack := rtt/2 + time.Millisecond
	off := max(0, skew.Abs()-slack)
	detail = fmt.Sprintf("this host's clock is %s %s the server's (±%s)", skew.Abs().Round(time.Millisecond), map[bool]string{true: "behind", false: "ahead of"}[skew > 0], slack.Round(time.Millisecond))
	switch {
	case off < 2*time.Second:
		return OK, detail, ""
	case off < lease/2:
		return Warn, detail + fmt.Sprintf("; replicas use their own clocks for leases (LEASE_DURATION %s)", lease), "synchronise the clocks (NTP: chrony or systemd-timesyncd) on the replicas' hosts"
	}
	return Fail, detail + fmt.Sprintf(": at least half of LEASE_DURATION (%s), so live leases may be taken over early and backoffs held too long", lease),
		"synchronise the clocks (NTP: chrony or systemd-timesyncd) on the replicas' hosts before deploying"
}

// connectionsCheck compares what the fleet may open with what the server
// reports (serverStatus.connections), where it is visible.
func connectionsCheck(ctx context.Context, cfg DoctorConfig) Check {
	c := Check{Name: "connections"}
	need := (cfg.Replicas + 1) * cfg.PerReplica
	raw, err := cfg.Colls.DB.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Raw()
	current, available, ok := parseConnections(raw)
	var ce mongo.CommandError
	switch {
	case errors.As(err, &ce) && ce.HasErrorCode(13): // Unauthorized
		c.Status, c.Detail = Warn, fmt.Sprintf("the fleet may open %d; the server's figures are not visible to this user (serverStatus)", need)
		c.Fix = "check the limit in the provider's console (Atlas publishes it per tier), or grant clusterMonitor to see it here"
	case err != nil:
		c.Status, c.Detail = Warn, fmt.Sprintf("the fleet may open %d; serverStatus failed: %v", need, err)
	case !ok:
		c.Status, c.Detail = Warn, fmt.Sprintf("the fleet may open %d; this server does not report its connections", need)
	default:
		c.Status, c.Detail, c.Fix = connectionVerdict(need, cfg, current, available)
	}
	return c
}

// parseConnections reads serverStatus.connections: ok is false when either
// figure is missing or not a number.
func parseConnections(raw bson.Raw) (current, available int64, ok bool) {
	current, okC := raw.Lookup("connections", "current").AsInt64OK()
	available, okA := raw.Lookup("connections", "available").AsInt64OK()
	return current, available, okC && okA
}

func connectionVerdict(need int, cfg DoctorConfig, current, available int64) (status, detail, fix string) {
	limit := current + available
	detail = fmt.Sprintf("the fleet may open %d: (%d replicas + 1 during a rollout) × (pool %d + 2 monitoring); the server allows %d (%d in use, %d free)",
		need, cfg.Replicas, cfg.PoolSize, limit, current, available)
	fix = "lower REFRESH_CONCURRENCY or the replica count, or raise the server's connection limit (a larger tier)"
	switch {
	case int64(need) > limit:
		return Fail, detail, fix
	case int64(need) > available:
		return Warn, detail + "; more than are free now (if the fleet already runs, its connections are among those in use)", fix
	}
	return OK, detail, ""
}

// indexInfo is one existing index as listIndexes describes it.
type indexInfo struct {
	Name      string
	Keys      []string // "field:1", "field:-1", "field:hashed", in order
	TTL       bool
	Collation string // the index's collation locale; "" when it has none (binary)
}

// indexCache lists each collection's indexes once.
type indexCache struct {
	db     *mongo.Database
	exists map[string]bool
	byColl map[string][]indexInfo
}

func (ix *indexCache) list(ctx context.Context, coll string) ([]indexInfo, error) {
	if got, ok := ix.byColl[coll]; ok || !ix.exists[coll] {
		return got, nil
	}
	var docs []bson.Raw
	cur, err := ix.db.Collection(coll).Indexes().List(ctx)
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, fmt.Errorf("listing the indexes of %s: %w", coll, err)
	}
	var out []indexInfo
	for _, d := range docs {
		name, _ := d.Lookup("name").StringValueOK()
		locale, _ := d.Lookup("collation", "locale").StringValueOK()
		_, ttlErr := d.LookupErr("expireAfterSeconds")
		out = append(out, indexInfo{Name: name, Keys: keyList(d.Lookup("key")), TTL: ttlErr == nil, Collation: locale})
	}
	ix.byColl[coll] = out
	return out, nil
}

// keyList normalises a key pattern (see keyPattern): 1, 1.0 and 1L are "1".
func keyList(v any) []string {
	k, _ := v.(bson.RawValue)
	if d, ok := v.(bson.D); ok {
		raw, _ := bson.Marshal(d) // nil on an error: no keys
		k = bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: raw}
	}
	keys, _ := keyPattern(k)
	return keys
}

// keyPattern reads a key pattern as listIndexes and the classic and
// slot-based plans give it (a document), or as MongoDB 8's express stages
// give it (a string such as "{ a: 1, b: -1 }"); ok is false for anything else.
func keyPattern(v bson.RawValue) (keys []string, ok bool) {
	if s, isString := v.StringValueOK(); isString {
		return keyString(s)
	}
	d, isDoc := v.DocumentOK()
	elems, err := d.Elements()
	if !isDoc || err != nil {
		return nil, false
	}
	for _, e := range elems {
		v := e.Value()
		dir := v.String()
		if f, ok := v.AsFloat64OK(); ok {
			dir = direction(f)
		} else if s, ok := v.StringValueOK(); ok {
			dir = s
		}
		keys = append(keys, e.Key()+":"+dir)
	}
	return keys, len(keys) > 0
}

// direction is an index key's order as the doctor prints it: 1 or -1.
func direction(f float64) string {
	if f > 0 {
		return "1"
	}
	return "-1"
}

// keyString parses the express stages' key pattern, which the server
// prints as a document with bare field names ("{ _id: 1 }"); quoted names
// and values are read too.
func keyString(s string) ([]string, bool) {
	body, open := strings.CutPrefix(strings.TrimSpace(s), "{")
	body, closed := strings.CutSuffix(body, "}")
	if !open || !closed || strings.TrimSpace(body) == "" {
		return nil, false
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		i := strings.LastIndex(part, ":")
		if i < 0 {
			return nil, false
		}
		name := strings.Trim(strings.TrimSpace(part[:i]), `"'`)
		dir := strings.Trim(strings.TrimSpace(part[i+1:]), `"'`)
		if name == "" || dir == "" {
			return nil, false
		}
		if f, err := strconv.ParseFloat(dir, 64); err == nil {
			dir = direction(f)
		}
		out = append(out, name+":"+dir)
	}
	return out, true
}

func findIndex(indexes []indexInfo, keys []string) (indexInfo, bool) {
	for _, i := range indexes {
		if slices.Equal(i.Keys, keys) {
			return i, true
		}
	}
	return indexInfo{}, false
}

// retiredIndexCheck warns of an index an earlier release built and this one
// does not use: it costs every insert an index update. Absent, it says nothing.
func retiredIndexCheck(ctx context.Context, old consumer.RetiredIndex, ix *indexCache) []Check {
	coll, keys := old.Coll.Name(), keyList(old.Keys)
	indexes, err := ix.list(ctx, coll) // none when coll does not exist; an error fails indexCheck
	found, ok := findIndex(indexes, keys)
	if err != nil || !ok {
		return nil
	}
	c := Check{Name: "index " + coll + " {" + strings.Join(keys, ", ") + "}", Status: Warn}
	newKeys := "{" + strings.Join(keyList(old.ReplacedBy), ", ") + "}"
	if _, built := findIndex(indexes, keyList(old.ReplacedBy)); !built {
		c.Detail = fmt.Sprintf("%s, left from %s, is what %s falls back to while %s is missing: do not drop it yet", found.Name, old.LastUsedBy, old.Serves, newKeys)
		c.Fix = "build " + newKeys + " first (see its check)"
		return []Check{c}
	}
	c.Detail = fmt.Sprintf("%s is left from %s: this release's %s uses %s; every insert still updates both", found.Name, old.LastUsedBy, old.Serves, newKeys)
	c.Fix = fmt.Sprintf("once no %s replica runs and no rollback to it is planned, in mongosh: db.getCollection(%q).dropIndex(%q)", old.LastUsedBy, coll, found.Name)
	return []Check{c}
}

func indexCheck(ctx context.Context, spec consumer.IndexSpec, ix *indexCache) Check {
	coll, keys := spec.Coll.Name(), keyList(spec.Model.Keys)
	c := Check{Name: "index " + coll + " {" + strings.Join(keys, ", ") + "}"}
	indexes, err := ix.list(ctx, coll) // none, and no round trip, when coll does not exist
	var want options.IndexOptions
	if spec.Model.Options != nil {
		for _, set := range spec.Model.Options.List() {
			_ = set(&want)
		}
	}
	found, ok := findIndex(indexes, keys)
	switch {
	case !ix.exists[coll]:
		c.Status, c.Detail = Warn, coll+" does not exist yet"
		c.Fix = "`scorerefresh run` creates the collection's indexes when it starts"
	case err != nil:
		c.Status, c.Detail, c.Fix = Fail, err.Error(), "grant listIndexes on the database (readWrite includes it)"
	case !ok && spec.Optional:
		c.Status, c.Detail = Warn, "missing, optional (servers without partial indexes cannot build it); it serves: "+spec.Serves
	case !ok:
		c.Status, c.Detail = Fail, "missing: "+spec.Serves+" scans the collection"
		c.Fix = fmt.Sprintf("start `scorerefresh run` (it builds its indexes; its log says why one failed), or in mongosh: db.getCollection(%q).createIndex(%s)", coll, keysJS(keys))
	case want.ExpireAfterSeconds != nil && !found.TTL:
		c.Status, c.Detail = Warn, found.Name+" present without its TTL: stale lease documents are never removed (harmless, they are ignored)"
		c.Fix = "on MongoDB: drop the index and let `scorerefresh run` rebuild it with the TTL"
	default:
		c.Status, c.Detail = OK, found.Name+": "+spec.Serves
	}
	return c
}

// keysJS writes keys for mongosh; a field without a direction is ascending.
func keysJS(keys []string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		name, dir, found := strings.Cut(k, ":")
		if !found {
			dir = "1"
		}
		if dir != "1" && dir != "-1" {
			dir = fmt.Sprintf("%q", dir)
		}
		parts[i] = fmt.Sprintf("%q: %s", name, dir)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// collationVerdict amends a source's verdict where the collection's default
// collation is not simple: the service's queries carry the simple collation
// (usernames compared exactly), which only an index built with it serves
// (one built without inherits the collection's).
func collationVerdict(comp scoring.Component, indexes []indexInfo, locale, status, detail, fix string) (string, string, string) {
	want := comp.IndexKeys()
	for _, ix := range indexes {
		if len(ix.Keys) > 0 && strings.HasPrefix(ix.Keys[0], want[0]+":") && ix.Collation == "simple" {
			return status, detail + fmt.Sprintf("; %s has the simple collation the queries use (the collection's default is %s)", ix.Name, locale), fix
		}
	}
	return Warn, fmt.Sprintf("the collection's default collation is %s: the service's queries of it use the simple collation (usernames compared exactly), and no index on %s has it, so none serves them", locale, comp.UserField),
		fmt.Sprintf("in mongosh: db.getCollection(%q).createIndex(%s, {collation: {locale: \"simple\"}})", comp.Collection, keysJS(want))
}

func sourceVerdict(comp scoring.Component, indexes []indexInfo) (status, detail, fix string) {
	want := comp.IndexKeys()
	best, bestName := 0, ""
	for _, ix := range indexes {
		n := 0
		for n < len(want) && n < len(ix.Keys) && strings.HasPrefix(ix.Keys[n], want[n]+":") {
			n++
		}
		if n > best {
			best, bestName = n, ix.Name
		}
	}
	fix = fmt.Sprintf("in mongosh: db.getCollection(%q).createIndex(%s)", comp.Collection, keysJS(want))
	switch {
	case best == len(want):
		return OK, fmt.Sprintf("%s serves {%s}", bestName, strings.Join(want, ", ")), ""
	case best >= 1:
		return Warn, fmt.Sprintf("%s serves {%s} but not {%s}: each refresh reads more of a user's documents than it counts", bestName, strings.Join(want[:best], ", "), strings.Join(want[best:], ", ")), fix
	}
	return Fail, fmt.Sprintf("no index starts with %s: every refresh scans the collection", comp.UserField), fix
}

// plan is what an explain's winning plan says about index use.
type plan struct {
	recognized bool       // the reply has a MongoDB query plan at all
	collscan   bool       // some stage scans the collection
	fetches    bool       // some stage reads documents, not only index keys
	stages     []string   // every stage of the winning plan, outermost first; every shard's
	indexes    []string   // index names used ("_id_" for the _id fast paths)
	keys       [][]string // key patterns of the indexes read, as keyList writes them
}

// planChildren hold the stages a stage reads from: classic (inputStage,
// inputStages), the slot-based engine's queryPlan (MongoDB 7+), a sharded
// cluster's shards[].winningPlan, the branching stages. Nothing else
// (rejectedPlans, slotBasedPlan, filters that hold a "stage") is the winning plan.
var planChildren = []string{"queryPlan", "inputStage", "inputStages", "shards", "winningPlan",
	"thenStage", "elseStage", "outerStage", "innerStage"}

// readPlan walks queryPlanner.winningPlan with accessors that report a type
// mismatch instead of panicking (MongoDB 8's express stages: keyPattern a string).
func readPlan(explain bson.Raw) plan {
	var p plan
	p.walk(explain.Lookup("queryPlanner", "winningPlan"), 0)
	return p
}

func (p *plan) walk(v bson.RawValue, depth int) {
	for _, doc := range childDocs(v) {
		if depth > 64 { // a real plan is a few stages deep
			return
		}
		p.stage(doc)
		for _, key := range planChildren {
			p.walk(doc.Lookup(key), depth+1)
		}
	}
}

func (p *plan) stage(doc bson.Raw) {
	stage, ok := doc.Lookup("stage").StringValueOK()
	if !ok {
		return
	}
	p.recognized = true
	p.stages = append(p.stages, stage)
	name, named := doc.Lookup("indexName").StringValueOK()
	switch {
	case stage == "COLLSCAN":
		p.collscan, p.fetches = true, true
	case stage == "FETCH":
		p.fetches = true
	case stage == "IDHACK" || stage == "CLUSTERED_IXSCAN" || stage == "EXPRESS_CLUSTERED_IXSCAN":
		// A clustered collection is stored in _id order and has no _id_
		// index: its CLUSTERED_ stages read it by _id directly, naming no index.
		p.indexes, p.fetches = append(p.indexes, consumer.IDIndex), true
	case strings.HasPrefix(stage, "EXPRESS_"):
		// MongoDB 8's express path (EXPRESS_IXSCAN, _UPDATE, _DELETE) serves
		// point queries from the index in indexName (keyPattern a string),
		// reading the document unless it says the projection is covered.
		covered, _ := doc.Lookup("projectionCovered").BooleanOK()
		p.fetches = p.fetches || !covered
		if !named {
			p.indexes = append(p.indexes, consumer.IDIndex)
		}
	}
	if named {
		p.indexes = append(p.indexes, name)
	}
	if keys, ok := keyPattern(doc.Lookup("keyPattern")); ok {
		p.keys = append(p.keys, keys)
	}
}

func (p plan) uses(name string, keys []string) bool {
	return name == consumer.IDIndex && slices.Contains(p.indexes, consumer.IDIndex) ||
		slices.ContainsFunc(p.keys, func(k []string) bool { return slices.Equal(k, keys) })
}

func (p plan) covered() bool {
	return p.recognized && !p.fetches && (len(p.indexes) > 0 || len(p.keys) > 0)
}

// childDocs returns v if it is a document, its documents if it is an array.
func childDocs(v bson.RawValue) []bson.Raw {
	if d, ok := v.DocumentOK(); ok {
		return []bson.Raw{d}
	}
	a, _ := v.ArrayOK()
	vals, _ := a.Values()
	var out []bson.Raw
	for _, x := range vals {
		if d, ok := x.DocumentOK(); ok {
			out = append(out, d)
		}
	}
	return out
}

// explainQuery explains q with each of its hints in turn, as the pipeline
// falls back through them when the server refuses one (an index missing or
// still being built), and unhinted after the last.
func explainQuery(ctx context.Context, cfg DoctorConfig, q consumer.DoctorQuery, want []string, ferret bool) (status, detail, fix string) {
	var refused []string
	for i := 0; ; i++ {
		cmd, hint := q.Command, "no hint"
		if i < len(q.Hints) {
			hint = "{" + strings.Join(keyList(q.Hints[i]), ", ") + "}"
			cmd = append(slices.Clone(cmd), bson.E{Key: "hint", Value: servertraits.IndexName(q.Hints[i])}) // by name, as the pipeline hints
		}
		raw, err := cfg.Colls.DB.RunCommand(ctx, bson.D{{Key: "explain", Value: cmd}, {Key: "verbosity", Value: "queryPlanner"}}).Raw()
		if i < len(q.Hints) && servertraits.RefusesHint(err) { // the error on which the pipeline moves to its next hint
			refused = append(refused, hint)
			continue
		}
		if err != nil {
			return Warn, "the server cannot explain it: " + err.Error(), ""
		}
		status, detail, fix = planVerdict(readPlan(raw), q, want, ferret)
		if len(refused) == 0 {
			return status, detail, fix
		}
		detail = fmt.Sprintf("the server refuses the hint %s (no such index, or its build is running), so the service hints %s instead: %s",
			strings.Join(refused, ", then "), hint, detail)
		if status == OK {
			status, fix = Warn, "build the missing index (see the index checks above), then run the doctor again"
		}
		return status, detail, fix
	}
}

func planVerdict(p plan, q consumer.DoctorQuery, want []string, ferret bool) (status, detail, fix string) {
	wantDesc := "{" + strings.Join(want, ", ") + "}"
	stages := " (" + strings.Join(p.stages, " ← ") + ")"
	switch {
	case !p.recognized && ferret:
		return Warn, "FerretDB's explain shows no index plan; intended: " + wantDesc, ""
	case !p.recognized:
		return Warn, "the explain output has no plan this check recognises; intended: " + wantDesc, ""
	case p.collscan:
		// Checked before the index: on a sharded cluster one shard may
		// scan while the others use the index.
		return Fail, "scans the collection instead of using " + wantDesc + stages,
			"create the index (see the index checks above), then run the doctor again"
	case p.uses(q.Index, want) && q.Covered && !p.covered():
		return Warn, "uses " + wantDesc + " but reads documents" + stages + ", where the index alone should answer it: an array username makes the index multikey",
			"see \"When a producer writes an array username\" in docs/query-plans.md: rebuild the index in a quiet period"
	case p.uses(q.Index, want) && q.Covered:
		return OK, "uses " + wantDesc + ", covered" + stages, ""
	case p.uses(q.Index, want):
		return OK, "uses " + wantDesc + stages, ""
	case len(p.indexes) == 0 && len(p.keys) == 0:
		return Warn, "the plan reads no index (an empty collection?); intended: " + wantDesc, ""
	}
	chosen := p.indexes
	if len(chosen) == 0 {
		for _, k := range p.keys {
			chosen = append(chosen, "{"+strings.Join(k, ", ")+"}")
		}
	}
	return Warn, fmt.Sprintf("the planner chose %s over %s; on an empty or small collection it may, check again once there is data", strings.Join(chosen, ", "), wantDesc),
		"if it persists with data, compare with `explain(\"executionStats\")` in mongosh"
}
