package ops

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/scoring"
)

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
		info.TTL = ttlErr == nil
		info.Collation, _ = d.Lookup("collation", "locale").StringValueOK()
		out = append(out, info)
	}
	ix.byColl[coll] = out
	return out, nil
}

// keyList normalises a key pattern: 1, 1.0 and 1L are all "1". Anything
// but a key pattern document gives nil.
func keyList(v any) []string {
	switch k := v.(type) {
	case bson.RawValue:
		keys, _ := keyPattern(k)
		return keys
	case bson.D:
		raw, err := bson.Marshal(k)
		if err != nil {
			return nil
		}
		return keyDoc(raw)
	}
	return nil
}

// keyPattern reads a key pattern as listIndexes and the classic and
// slot-based plans give it (a document), or as MongoDB 8's express stages
// give it (a string such as "{ a: 1, b: -1 }"). ok is false for anything
// else.
func keyPattern(v bson.RawValue) (keys []string, ok bool) {
	if d, isDoc := v.DocumentOK(); isDoc {
		keys = keyDoc(d)
		return keys, len(keys) > 0
	}
	if s, isString := v.StringValueOK(); isString {
		return keyString(s)
	}
	return nil, false
}

func keyDoc(d bson.Raw) []string {
	elems, err := d.Elements()
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(elems))
	for _, e := range elems {
		v := e.Value()
		dir := v.String()
		if f, ok := v.AsFloat64OK(); ok {
			dir = direction(f)
		} else if s, ok := v.StringValueOK(); ok {
			dir = s
		}
		out = append(out, e.Key()+":"+dir)
	}
	return out
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

func direction(f float64) string {
	if f > 0 {
		return "1"
	}
	return "-1"
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
	keys := keyList(old.Keys)
	indexes, err := ix.list(ctx, coll) // none when coll does not exist
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
	var want options.IndexOptions
	if spec.Model.Options != nil {
		for _, set := range spec.Model.Options.List() {
			_ = set(&want)
		}
	}
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
// indexed on its userField, then the fields its filter pins to one value,
// then its timeField when the rule has a window (Component.IndexKeys), since
// every refresh queries it by user with that filter.
func sourceChecks(ctx context.Context, cfg DoctorConfig, ix *indexCache) []Check {
	var checks []Check
	for _, comp := range cfg.Rules.Components {
		c := Check{Name: fmt.Sprintf("source %s (%s)", comp.Collection, comp.Name)}
		indexes, err := ix.list(ctx, comp.Collection)
		switch {
		case !ix.exists[comp.Collection]:
			c.Status, c.Detail = Fail, "collection does not exist: every user scores 0 on "+comp.Name
			c.Fix = "check the collection name in the rules file (" + cfg.Rules.Source + ") and MONGODB_DATABASE"
		case err != nil:
			c.Status, c.Detail = Fail, err.Error()
		default:
			c.Status, c.Detail, c.Fix = sourceVerdict(comp, indexes)
			if c.Status == Fail {
				break
			}
			if locale := defaultCollation(ctx, cfg.Colls.DB, comp.Collection); locale != "" && locale != "simple" {
				c.Status, c.Detail, c.Fix = collationVerdict(comp, indexes, locale, c.Status, c.Detail, c.Fix)
			}
		}
		checks = append(checks, c)
	}
	return checks
}

// defaultCollation is coll's default collation locale, "" when it has none
// (or the server does not say: FerretDB has no collations).
func defaultCollation(ctx context.Context, db *mongo.Database, coll string) string {
	specs, err := db.ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: coll}})
	if err != nil || len(specs) == 0 {
		return ""
	}
	locale, _ := specs[0].Options.Lookup("collation", "locale").StringValueOK()
	return locale
}

// collationVerdict amends a source's verdict where the collection's default
// collation is not simple: the service compares usernames exactly, so its
// queries there carry the simple collation, and an index serves them only
// if it was built with the simple collation too (an index built without
// one takes the collection's default).
func collationVerdict(comp scoring.Component, indexes []indexInfo, locale, status, detail, fix string) (string, string, string) {
	want := comp.IndexKeys()
	for _, ix := range indexes {
		if len(ix.Keys) > 0 && strings.HasPrefix(ix.Keys[0], want[0]+":") && ix.Collation == "simple" {
			return status, detail + fmt.Sprintf("; %s has the simple collation the queries use (the collection's default is %s)", ix.Name, locale), fix
		}
	}
	return Warn, fmt.Sprintf("the collection's default collation is %s: the service's queries of it use the simple collation (usernames compared exactly), and no index on %s has it, so none serves them", locale, comp.UserField),
		fmt.Sprintf("in mongosh: db.getCollection(%q).createIndex(%s, {collation: {locale: \"simple\"}})", comp.Collection, keysJS(appendDir(want)))
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
	fix = fmt.Sprintf("in mongosh: db.getCollection(%q).createIndex(%s)", comp.Collection, keysJS(appendDir(want)))
	switch {
	case best == len(want):
		return OK, fmt.Sprintf("%s serves {%s}", bestName, strings.Join(want, ", ")), ""
	case best >= 1:
		return Warn, fmt.Sprintf("%s serves {%s} but not {%s}: each refresh reads more of a user's documents than it counts", bestName, strings.Join(want[:best], ", "), strings.Join(want[best:], ", ")), fix
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
