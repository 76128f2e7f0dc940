package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// indexInfo is one existing index as listIndexes describes it.
type indexInfo struct {
	Name    string
	Keys    []string // "field:1", "field:-1", "field:hashed", in order
	TTL     bool
	Partial bool
}

// indexCache lists each collection's indexes once.
type indexCache struct {
	db     *mongo.Database
	exists map[string]bool
	byColl map[string][]indexInfo
}

func newIndexCache(db *mongo.Database, names []string) *indexCache {
	ix := &indexCache{db: db, exists: map[string]bool{}, byColl: map[string][]indexInfo{}}
	for _, n := range names {
		ix.exists[n] = true
	}
	return ix
}

func (ix *indexCache) list(ctx context.Context, coll string) ([]indexInfo, error) {
	if got, ok := ix.byColl[coll]; ok || !ix.exists[coll] {
		return got, nil
	}
	cur, err := ix.db.Collection(coll).Indexes().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the indexes of %s: %w", coll, err)
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("listing the indexes of %s: %w", coll, err)
	}
	var out []indexInfo
	for _, d := range docs {
		info := indexInfo{Keys: keyList(d.Lookup("key"))}
		info.Name, _ = d.Lookup("name").StringValueOK()
		_, ttlErr := d.LookupErr("expireAfterSeconds")
		_, partialErr := d.LookupErr("partialFilterExpression")
		info.TTL, info.Partial = ttlErr == nil, partialErr == nil
		out = append(out, info)
	}
	ix.byColl[coll] = out
	return out, nil
}

// keyList normalises a key pattern: 1, 1.0 and 1L are all "1".
func keyList(v any) []string {
	var elems []bson.RawElement
	switch k := v.(type) {
	case bson.RawValue:
		elems, _ = k.Document().Elements()
	case bson.D:
		raw, _ := bson.Marshal(k)
		elems, _ = bson.Raw(raw).Elements()
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		dir := e.Value().String()
		if f, ok := e.Value().AsFloat64OK(); ok {
			dir = map[bool]string{true: "1", false: "-1"}[f > 0]
		} else if s, ok := e.Value().StringValueOK(); ok {
			dir = s
		}
		out[i] = e.Key() + ":" + dir
	}
	return out
}

func findIndex(indexes []indexInfo, keys []string) (indexInfo, bool) {
	for _, i := range indexes {
		if slices.Equal(i.Keys, keys) {
			return i, true
		}
	}
	return indexInfo{}, false
}

// indexChecks checks every index the service builds (consumer.IndexSpecs).
func indexChecks(ctx context.Context, cfg DoctorConfig, ix *indexCache) []Check {
	var checks []Check
	for _, spec := range consumer.IndexSpecs(cfg.Colls.consumer()) {
		checks = append(checks, indexCheck(ctx, spec, ix))
	}
	for _, old := range consumer.RetiredIndexes(cfg.Colls.consumer()) {
		if c, ok := retiredIndexCheck(ctx, old, ix); ok {
			checks = append(checks, c)
		}
	}
	return checks
}

// retiredIndexCheck warns of an index an earlier release built and this one
// does not use: it costs every insert an index update. Absent, there is
// nothing to say.
func retiredIndexCheck(ctx context.Context, old consumer.RetiredIndex, ix *indexCache) (Check, bool) {
	coll := old.Coll.Name()
	if !ix.exists[coll] {
		return Check{}, false
	}
	keys := keyList(old.Keys)
	indexes, err := ix.list(ctx, coll)
	if err != nil {
		return Check{}, false // indexCheck already failed on listing this collection
	}
	found, ok := findIndex(indexes, keys)
	if !ok {
		return Check{}, false
	}
	c := Check{Name: "index " + coll + " {" + strings.Join(keys, ", ") + "}", Status: Warn}
	newKeys := "{" + strings.Join(keyList(old.ReplacedBy), ", ") + "}"
	if _, built := findIndex(indexes, keyList(old.ReplacedBy)); !built {
		// The replacement's own check fails; until it is built, this one
		// is what the query falls back to.
		c.Detail = fmt.Sprintf("%s, left from %s, is what %s falls back to while %s is missing: do not drop it yet", found.Name, old.LastUsedBy, old.Serves, newKeys)
		c.Fix = "build " + newKeys + " first (see its check)"
		return c, true
	}
	c.Detail = fmt.Sprintf("%s is left from %s: this release's %s uses %s; every insert still updates both", found.Name, old.LastUsedBy, old.Serves, newKeys)
	c.Fix = fmt.Sprintf("once no %s replica runs and no rollback to it is planned, in mongosh: db.getCollection(%q).dropIndex(%q)", old.LastUsedBy, coll, found.Name)
	return c, true
}

func indexCheck(ctx context.Context, spec consumer.IndexSpec, ix *indexCache) Check {
	coll := spec.Coll.Name()
	keys := keyList(spec.Model.Keys)
	c := Check{Name: "index " + coll + " {" + strings.Join(keys, ", ") + "}"}
	if !ix.exists[coll] {
		c.Status, c.Detail = Warn, coll+" does not exist yet"
		c.Fix = "`scorerefresh run` creates the collection's indexes when it starts"
		return c
	}
	indexes, err := ix.list(ctx, coll)
	if err != nil {
		c.Status, c.Detail, c.Fix = Fail, err.Error(), "grant listIndexes on the database (readWrite includes it)"
		return c
	}
	want := indexOptions(spec.Model)
	found, ok := findIndex(indexes, keys)
	switch {
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

func indexOptions(m mongo.IndexModel) options.IndexOptions {
	var o options.IndexOptions
	if m.Options != nil {
		for _, set := range m.Options.List() {
			_ = set(&o)
		}
	}
	return o
}

func keysJS(keys []string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		name, dir, _ := strings.Cut(k, ":")
		if dir != "1" && dir != "-1" {
			dir = fmt.Sprintf("%q", dir)
		}
		parts[i] = fmt.Sprintf("%q: %s", name, dir)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// sourceChecks checks each scoring rule's source collection: present, and
// indexed on its userField (then its timeField when the rule has a window),
// since every refresh queries it by user.
func sourceChecks(ctx context.Context, cfg DoctorConfig, ix *indexCache) []Check {
	var checks []Check
	for _, comp := range cfg.Rules.Components {
		c := Check{Name: fmt.Sprintf("source %s (%s)", comp.Collection, comp.Name)}
		if !ix.exists[comp.Collection] {
			c.Status, c.Detail = Fail, "collection does not exist: every user scores 0 on "+comp.Name
			c.Fix = "check the collection name in the rules file (" + cfg.Rules.Source + ") and MONGODB_DATABASE"
			checks = append(checks, c)
			continue
		}
		indexes, err := ix.list(ctx, comp.Collection)
		if err != nil {
			c.Status, c.Detail = Fail, err.Error()
			checks = append(checks, c)
			continue
		}
		c.Status, c.Detail, c.Fix = sourceVerdict(comp, indexes)
		checks = append(checks, c)
	}
	return checks
}

func sourceVerdict(comp scoring.Component, indexes []indexInfo) (status, detail, fix string) {
	want := []string{comp.UserField}
	if comp.Window > 0 {
		want = append(want, comp.TimeField)
	}
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
	fix = fmt.Sprintf("in mongosh: db.getCollection(%q).createIndex(%s)", comp.Collection, keysJS(appendDir(want)))
	switch {
	case best == len(want):
		return OK, fmt.Sprintf("%s serves {%s}", bestName, strings.Join(want, ", ")), ""
	case best == 1:
		return Warn, fmt.Sprintf("%s serves %s but not the %s window on %s: each refresh reads all of a user's documents", bestName, comp.UserField, time.Duration(comp.Window), comp.TimeField), fix
	}
	return Fail, fmt.Sprintf("no index starts with %s: every refresh scans the collection", comp.UserField), fix
}

func appendDir(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f + ":1"
	}
	return out
}
