package scoring

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// specExample is the contract's (docs/contract.md) example, verbatim.
const specExample = `
components:
  - name: activity          # key in the score document's ` + "`components`" + `
    collection: user_activity
    userField: username     # field that holds the username in that collection
    op: sum                 # sum | count | max | min | avg | distinct
    field: points           # the field that sum, max, min, avg and distinct read
    weight: 1
    window: 720h            # optional: only documents whose ` + "`at`" + ` field is within this window
    timeField: at           # optional: the date field the window applies to (default ` + "`at`" + `)
  - name: posts
    collection: posts
    userField: author
    op: count
    weight: 5
`

var specComponents = []Component{
	{Name: "activity", Collection: "user_activity", UserField: "username", Op: OpSum, Field: "points", Weight: 1, Window: 720 * time.Hour, TimeField: "at"},
	{Name: "posts", Collection: "posts", UserField: "author", Op: OpCount, Weight: 5, TimeField: "at"},
}

func TestParseRulesValid(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		data string
		want []Component
	}{
		"the contract's example in YAML": {data: specExample, want: specComponents},
		"the same in JSON": {
			data: `{"components": [
				{"name": "activity", "collection": "user_activity", "userField": "username", "op": "sum",
				 "field": "points", "weight": 1, "window": "720h", "timeField": "at"},
				{"name": "posts", "collection": "posts", "userField": "author", "op": "count", "weight": 5}]}`,
			want: specComponents,
		},
		"defaults for userField, timeField and weight": {
			data: "components:\n  - {name: n, collection: c, op: count}\n",
			want: []Component{{Name: "n", Collection: "c", UserField: "username", Op: OpCount, Weight: 1, TimeField: "at"}},
		},
		"explicit zero weight and window stay zero": {
			data: "components:\n  - {name: n, collection: c, op: max, field: f, weight: 0, window: 0s}\n",
			want: []Component{{Name: "n", Collection: "c", UserField: "username", Op: OpMax, Field: "f", TimeField: "at"}},
		},
		"every op, custom fields, fractional and negative weights": {
			data: `components:
  - {name: a, collection: c1, op: distinct, field: tags.main, userField: user.name, weight: -0.5, window: 90m, timeField: when}
  - {name: b, collection: c2, op: max, field: level, weight: 2.25}
`,
			want: []Component{
				{Name: "a", Collection: "c1", UserField: "user.name", Op: OpDistinct, Field: "tags.main", Weight: -0.5, Window: 90 * time.Minute, TimeField: "when"},
				{Name: "b", Collection: "c2", UserField: "username", Op: OpMax, Field: "level", Weight: 2.25, TimeField: "at"},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseRules("rules.yaml", []byte(tc.data))
			if err != nil {
				t.Fatalf("ParseRules: %v", err)
			}
			if r.Source != "rules.yaml" {
				t.Errorf("Source = %q, want rules.yaml", r.Source)
			}
			if !reflect.DeepEqual(r.Components, tc.want) {
				t.Errorf("Components =\n%+v\nwant\n%+v", r.Components, tc.want)
			}
		})
	}
}

func TestDefaultRulesIsTheContractsFirstComponent(t *testing.T) {
	t.Parallel()
	d := DefaultRules()
	if d.Source != "built-in" {
		t.Errorf("Source = %q, want built-in", d.Source)
	}
	if !reflect.DeepEqual(d.Components, specComponents[:1]) {
		t.Errorf("Components = %+v, want %+v", d.Components, specComponents[:1])
	}
	// Each call returns its own copy: callers may not corrupt the default.
	d.Components[0].Weight = 99
	if DefaultRules().Components[0].Weight != 1 {
		t.Error("DefaultRules shares state between calls")
	}
}

func TestParseRulesInvalid(t *testing.T) {
	t.Parallel()
	const p = "rules.yaml: "
	tests := map[string]struct {
		data string
		want []string // every problem, in order
	}{
		"unknown op": {
			data: "components:\n  - {name: a, collection: c, op: count}\n  - {name: posts, collection: posts, op: mean}\n",
			want: []string{p + `component 2 ("posts"): unknown op "mean" (want sum, count, max, min, avg or distinct)`},
		},
		"missing op": {
			data: "components:\n  - {name: a, collection: c}\n",
			want: []string{p + `component 1 ("a"): missing op (want sum, count, max, min, avg or distinct)`},
		},
		"missing name": {
			data: "components:\n  - {collection: c, op: count}\n",
			want: []string{p + `component 1: missing name`},
		},
		"missing collection": {
			data: "components:\n  - {name: a, op: count}\n",
			want: []string{p + `component 1 ("a"): missing collection`},
		},
		"duplicate names": {
			data: "components:\n  - {name: a, collection: c, op: count}\n  - {name: b, collection: c, op: count}\n  - {name: a, collection: d, op: count}\n",
			want: []string{p + `component 3 ("a"): duplicate name "a" (also component 1)`},
		},
		"negative window": {
			data: "components:\n  - {name: a, collection: c, op: count, window: -1h}\n",
			want: []string{p + `component 1 ("a"): negative window "-1h"`},
		},
		"bad duration": {
			data: "components:\n  - {name: a, collection: c, op: count, window: 30}\n",
			want: []string{p + `component 1 ("a"): window "30" is not a duration such as "720h" or "90m"`},
		},
		"unknown key is not ignored": {
			data: "components:\n  - {name: a, colection: c, op: count}\n",
			want: []string{
				p + `component 1 ("a"): unknown key "colection" (did you mean "collection"?); known keys are name, collection, userField, op, field, weight, window, timeField, filter`,
				p + `component 1 ("a"): missing collection`,
			},
		},
		"unknown top-level key": {
			data: "components:\n  - {name: a, collection: c, op: count}\nversion: 2\n",
			want: []string{p + `unknown top-level key "version" (want components)`},
		},
		"missing field for sum, max and distinct": {
			data: "components:\n  - {name: s, collection: c, op: sum}\n  - {name: m, collection: c, op: max}\n  - {name: d, collection: c, op: distinct, field: ~}\n",
			want: []string{
				p + `component 1 ("s"): missing field (op "sum" reads it)`,
				p + `component 2 ("m"): missing field (op "max" reads it)`,
				p + `component 3 ("d"): missing field (op "distinct" reads it)`,
			},
		},
		"non-finite weight": {
			data: "components:\n  - {name: a, collection: c, op: count, weight: .inf}\n  - {name: b, collection: c, op: count, weight: .nan}\n",
			want: []string{
				p + `component 1 ("a"): weight .inf is not a finite number`,
				p + `component 2 ("b"): weight .nan is not a finite number`,
			},
		},
		"weight not a number": {
			data: "components:\n  - {name: a, collection: c, op: count, weight: heavy}\n",
			want: []string{p + `component 1 ("a"): weight "heavy" is not a number`},
		},
		"name unusable as a components key": {
			data: "components:\n  - {name: a.b, collection: c, op: count}\n",
			want: []string{p + `component 1 ("a.b"): invalid name "a.b": it becomes a key of the score document's components, so it must not contain "." or start with "$"`},
		},
		"field path that would be an operator": {
			data: "components:\n  - {name: a, collection: c, op: sum, field: $where, userField: u..v}\n",
			want: []string{
				p + `component 1 ("a"): invalid userField "u..v": a field path must not start with "$" or have empty parts`,
				p + `component 1 ("a"): invalid field "$where": a field path must not start with "$" or have empty parts`,
			},
		},
		"component is not a mapping": {
			data: "components:\n  - count\n",
			want: []string{p + `component 1: want a mapping, got a scalar count`},
		},
		"empty components list": {
			data: "components: []\n",
			want: []string{p + `no components (the components list is empty)`},
		},
		"no components key": {
			data: "{}\n",
			want: []string{p + `no components (missing components list)`},
		},
		"empty file": {
			data: "",
			want: []string{p + `no components (the file is empty)`},
		},
		"not YAML": {
			data: "components: [\n",
			want: []string{p + `not valid YAML or JSON: yaml: line 1: did not find expected node content`},
		},
		"several problems are all listed": {
			data: `components:
  - name: activity
    collection: user_activity
    op: mean
  - collection: posts
    op: count
    window: -5m
  - name: activity
    colection: x
    op: sum
`,
			want: []string{
				p + `component 1 ("activity"): unknown op "mean" (want sum, count, max, min, avg or distinct)`,
				p + `component 2: negative window "-5m"`,
				p + `component 2: missing name`,
				p + `component 3 ("activity"): unknown key "colection" (did you mean "collection"?); known keys are name, collection, userField, op, field, weight, window, timeField, filter`,
				p + `component 3 ("activity"): missing collection`,
				p + `component 3 ("activity"): missing field (op "sum" reads it)`,
				p + `component 3 ("activity"): duplicate name "activity" (also component 1)`,
			},
		},
		"every refused filter operator, all listed": {
			data: `components:
  - name: js
    collection: c
    op: count
    filter: {$where: "this.a > 1", b: {$gt: 1}}
  - name: expr
    collection: c
    op: count
    filter: {$expr: {$gt: [$a, 1]}}
  - name: fn
    collection: c
    op: count
    filter: {$or: [{a: 1}, {$function: {body: "return true", args: [], lang: js}}]}
  - name: schema
    collection: c
    op: count
    filter: {$jsonSchema: {required: [a]}}
  - name: text
    collection: c
    op: count
    filter: {$text: {$search: bob}}
  - name: other
    collection: c
    op: count
    filter: {a: {$mod: [2, 0]}, b: {$near: [0, 0]}, $comment: hi}
  - name: user
    collection: c
    userField: author.name
    op: count
    filter: {$and: [{author.name: {$ne: bob}}], author: {name: x}, author.name.first: y}
`,
			want: []string{
				p + `component 1 ("js"): filter at $where: refused operator $where: it runs JavaScript on the server; only query operators are allowed (` + allowedOps + `)`,
				p + `component 2 ("expr"): filter at $expr: refused operator $expr: aggregation expressions are not allowed; only query operators are allowed (` + allowedOps + `)`,
				p + `component 3 ("fn"): filter at $or.1.$function: refused operator $function: it runs JavaScript on the server; only query operators are allowed (` + allowedOps + `)`,
				p + `component 4 ("schema"): filter at $jsonSchema: refused operator $jsonSchema: only query operators are allowed (` + allowedOps + `); $jsonSchema is neither a comparison nor cheap on every server`,
				p + `component 5 ("text"): filter at $text: refused operator $text: only query operators are allowed (` + allowedOps + `); $text is neither a comparison nor cheap on every server`,
				p + `component 6 ("other"): filter at a.$mod: refused operator $mod: only query operators are allowed (` + allowedOps + `)`,
				p + `component 6 ("other"): filter at b.$near: refused operator $near: only query operators are allowed (` + allowedOps + `)`,
				p + `component 6 ("other"): filter at $comment: refused operator $comment: only query operators are allowed (` + allowedOps + `)`,
				p + `component 7 ("user"): filter at $and.0.author.name: refused field author.name: it is the component's userField (author.name), which the refresh matches to the user itself`,
				p + `component 7 ("user"): filter at author: refused field author: it is the component's userField (author.name), which the refresh matches to the user itself`,
				p + `component 7 ("user"): filter at author.name.first: refused field author.name.first: it is the component's userField (author.name), which the refresh matches to the user itself`,
			},
		},
		"misplaced operators and bad filter values": {
			data: `components:
  - name: f
    collection: c
    op: count
    filter:
      $gt: 5
      a: {$and: [{b: 1}]}
      b: {$regex: 1, $options: i}
      c: {$options: i}
      d: {$in: 5}
      e: {$all: [{$elemMatch: {x: 1}}]}
      g: {$gt: 1, h: 2}
      i: {x: {$gt: 1}}
      j: {$not: 5}
      k: {$elemMatch: 5}
      $or: []
      l..m: 1
  - {name: g, collection: c, op: count, filter: [a]}
  - {name: d, collection: c, op: count, filter: {n: 2025-01-31}}
  - {name: h, collection: c, op: count, filter: {a: {$date: "not a date"}}}
`,
			want: []string{
				p + `component 1 ("f"): filter at $gt: $gt applies to a field, e.g. {points: {$gt: ...}}`,
				p + `component 1 ("f"): filter at a.$and: $and combines whole queries, e.g. {$and: [{a: 1}, {b: 2}]}, not the conditions of one field`,
				p + `component 1 ("f"): filter at b.$regex: $regex needs a string or a regular expression`,
				p + `component 1 ("f"): filter at c.$options: $options goes with $regex`,
				p + `component 1 ("f"): filter at d.$in: $in needs a list`,
				p + `component 1 ("f"): filter at e.$all.0.$elemMatch: $elemMatch inside a value: only the operators of a field's condition may start with "$"`,
				p + `component 1 ("f"): filter at g.h: field "h" mixed with operators: a condition is either all operators or a document compared whole`,
				p + `component 1 ("f"): filter at i.x.$gt: $gt inside a value: only the operators of a field's condition may start with "$"`,
				p + `component 1 ("f"): filter at j.$not: $not needs operators, e.g. {$not: {$gt: 5}}, or a regular expression`,
				p + `component 1 ("f"): filter at k.$elemMatch: $elemMatch needs a non-empty document`,
				p + `component 1 ("f"): filter at $or: $or needs a non-empty list of query documents`,
				p + `component 1 ("f"): filter at l..m: invalid field "l..m": a field path must not have empty parts or parts starting with "$"`,
				p + `component 2 ("g"): filter must be a mapping (a MongoDB query document), got a list`,
				p + `component 3 ("d"): filter: unquoted date 2025-01-31: write {$date: "2025-01-31T00:00:00Z"} for a date, or quote it for a string`,
				p + `component 4 ("h"): filter is not a valid query document (invalid $date value string: not a date); dates are written {$date: "2025-01-31T00:00:00Z"}`,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseRules("rules.yaml", []byte(tc.data))
			if err == nil {
				t.Fatalf("ParseRules accepted the rules: %+v", r)
			}
			var re *RulesError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RulesError: %v", err, err)
			}
			if re.Source != "rules.yaml" {
				t.Errorf("Source = %q, want rules.yaml", re.Source)
			}
			if !reflect.DeepEqual(re.Problems, tc.want) {
				t.Errorf("Problems:\n%s\nwant:\n%s", strings.Join(re.Problems, "\n"), strings.Join(tc.want, "\n"))
			}
			for _, prob := range re.Problems {
				if !strings.Contains(err.Error(), prob) {
					t.Errorf("Error() %q does not list %q", err.Error(), prob)
				}
			}
		})
	}
}

// allowedOps is how the refusal of an operator lists the allowed ones.
const allowedOps = "$eq $ne $gt $gte $lt $lte $in $nin $exists $type $all $elemMatch $size $regex $options $not $and $or $nor"

func TestLoadRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	good := write("good.yaml", specExample)
	r, err := LoadRules(good)
	if err != nil {
		t.Fatalf("LoadRules(%s): %v", good, err)
	}
	if r.Source != good || !reflect.DeepEqual(r.Components, specComponents) {
		t.Errorf("LoadRules = %+v, want source %s and the contract's components", r, good)
	}

	bad := write("bad.yaml", "components:\n  - {name: posts, collection: posts, op: mean}\n")
	_, err = LoadRules(bad)
	if err == nil || !strings.Contains(err.Error(), bad+`: component 1 ("posts"): unknown op "mean"`) {
		t.Errorf("LoadRules(bad) error = %v, want one naming %s, the component and the problem", err, bad)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = LoadRules(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadRules(missing) error = %v, want a not-exist error naming %s", err, missing)
	}
}

func TestCollections(t *testing.T) {
	t.Parallel()
	r := &Rules{Components: []Component{{Collection: "posts"}, {Collection: "a"}, {Collection: "posts"}, {Collection: "m"}}}
	if got, want := r.Collections(), []string{"a", "m", "posts"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Collections() = %v, want %v", got, want)
	}
}

// TestParseRulesFilter reads filters in YAML and in JSON, with every
// Extended JSON value form the driver reads: each is a value of its BSON
// type, never an operator, and plain YAML scalars keep their type.
func TestParseRulesFilter(t *testing.T) {
	t.Parallel()
	oid, _ := bson.ObjectIDFromHex("65a1b2c3d4e5f60718293a4b")
	dec, _ := bson.ParseDecimal128("1.5")
	date := bson.DateTime(time.Date(2025, 1, 31, 0, 0, 0, 0, time.UTC).UnixMilli())
	tests := map[string]struct {
		filter string
		want   bson.D
	}{
		"YAML scalars keep their types": {
			filter: `{s: published, "n": 5, big: 5000000000, f: 2.0, neg: -0.5, b: true, z: null, q: "5"}`,
			want: bson.D{{Key: "s", Value: "published"}, {Key: "n", Value: int32(5)}, {Key: "big", Value: int64(5000000000)},
				{Key: "f", Value: 2.0}, {Key: "neg", Value: -0.5}, {Key: "b", Value: true}, {Key: "z", Value: nil}, {Key: "q", Value: "5"}},
		},
		"Extended JSON values": {
			filter: `{d: {$gte: {$date: "2025-01-31T00:00:00Z"}}, o: {$oid: 65a1b2c3d4e5f60718293a4b}, l: {$numberLong: "7"},
				i: {$numberInt: "7"}, x: {$numberDouble: "Infinity"}, m: {$numberDecimal: "1.5"},
				bin: {$binary: {base64: "AQI=", subType: "00"}}, re: {$regularExpression: {pattern: "^a", options: i}},
				ts: {$timestamp: {t: 1, i: 2}}, lo: {$gt: {$minKey: 1}}, hi: {$lt: {$maxKey: 1}}}`,
			want: bson.D{
				{Key: "d", Value: bson.D{{Key: "$gte", Value: date}}},
				{Key: "o", Value: oid}, {Key: "l", Value: int64(7)}, {Key: "i", Value: int32(7)},
				{Key: "x", Value: math.Inf(1)}, {Key: "m", Value: dec},
				{Key: "bin", Value: bson.Binary{Subtype: 0, Data: []byte{1, 2}}},
				{Key: "re", Value: bson.Regex{Pattern: "^a", Options: "i"}},
				{Key: "ts", Value: bson.Timestamp{T: 1, I: 2}},
				{Key: "lo", Value: bson.D{{Key: "$gt", Value: bson.MinKey{}}}},
				{Key: "hi", Value: bson.D{{Key: "$lt", Value: bson.MaxKey{}}}},
			},
		},
		"operators, key order kept": {
			filter: `{$or: [{kind: {$in: [post, reply]}}, {tags: {$elemMatch: {n: {$gte: 1}}}}], meta.lang: {$exists: true, $ne: fr},
				doc: {b: 1, a: 2}, name: {$regex: "^a", $options: i}, arr: {$all: [1], $size: 1}, t: {$type: [string, int]}, n: {$not: {$gt: 5}}}`,
			want: bson.D{
				{Key: "$or", Value: bson.A{
					bson.D{{Key: "kind", Value: bson.D{{Key: "$in", Value: bson.A{"post", "reply"}}}}},
					bson.D{{Key: "tags", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "n", Value: bson.D{{Key: "$gte", Value: int32(1)}}}}}}}},
				}},
				{Key: "meta.lang", Value: bson.D{{Key: "$exists", Value: true}, {Key: "$ne", Value: "fr"}}},
				{Key: "doc", Value: bson.D{{Key: "b", Value: int32(1)}, {Key: "a", Value: int32(2)}}},
				{Key: "name", Value: bson.D{{Key: "$regex", Value: "^a"}, {Key: "$options", Value: "i"}}},
				{Key: "arr", Value: bson.D{{Key: "$all", Value: bson.A{int32(1)}}, {Key: "$size", Value: int32(1)}}},
				{Key: "t", Value: bson.D{{Key: "$type", Value: bson.A{"string", "int"}}}},
				{Key: "n", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: int32(5)}}}}},
			},
		},
		"a string that looks like an operator stays a string": {
			filter: `{status: "{\"$gt\": \"\"}", kind: "$where"}`,
			want:   bson.D{{Key: "status", Value: `{"$gt": ""}`}, {Key: "kind", Value: "$where"}},
		},
		"null filter is none": {filter: `null`, want: nil},
	}
	for name, tc := range tests {
		for _, format := range []string{"yaml", "json"} {
			data := "components:\n  - {name: v, collection: c, op: count, filter: " + tc.filter + "}\n"
			if format == "json" {
				if name != "Extended JSON values" && name != "a string that looks like an operator stays a string" {
					continue
				}
				// The same filter in a JSON rules file, keys and strings quoted.
				data = `{"components": [{"name": "v", "collection": "c", "op": "count", "filter": ` + jsonFilters[name] + `}]}`
			}
			r, err := ParseRules("rules."+format, []byte(data))
			if err != nil {
				t.Errorf("%s (%s): %v", name, format, err)
				continue
			}
			if got := r.Components[0].Filter; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s (%s): Filter =\n%v\nwant\n%v", name, format, got, tc.want)
			}
		}
	}
}

var jsonFilters = map[string]string{
	"Extended JSON values": `{"d": {"$gte": {"$date": "2025-01-31T00:00:00Z"}}, "o": {"$oid": "65a1b2c3d4e5f60718293a4b"}, "l": {"$numberLong": "7"},
		"i": {"$numberInt": "7"}, "x": {"$numberDouble": "Infinity"}, "m": {"$numberDecimal": "1.5"},
		"bin": {"$binary": {"base64": "AQI=", "subType": "00"}}, "re": {"$regularExpression": {"pattern": "^a", "options": "i"}},
		"ts": {"$timestamp": {"t": 1, "i": 2}}, "lo": {"$gt": {"$minKey": 1}}, "hi": {"$lt": {"$maxKey": 1}}}`,
	"a string that looks like an operator stays a string": `{"status": "{\"$gt\": \"\"}", "kind": "$where"}`,
}

func TestComponentIndexKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		filter string
		window time.Duration
		want   []string
	}{
		{`null`, 0, []string{"username"}},
		{`null`, time.Hour, []string{"username", "at"}},
		{`{status: published, kind: {$in: [a, b]}, lang: {$eq: en}, name: {$regex: "^a"}, re: {$regularExpression: {pattern: a, options: ""}}, $and: [{deleted: false}], $or: [{x: 1}]}`, time.Hour,
			[]string{"username", "status", "lang", "deleted", "at"}},
		{`{at: {$eq: {$date: "2025-01-31T00:00:00Z"}}}`, 0, []string{"username", "at"}},
	}
	for _, tc := range tests {
		c := mustComponent(t, tc.filter)
		c.Window = tc.window
		if got := c.IndexKeys(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("IndexKeys of filter %s, window %v = %v, want %v", tc.filter, tc.window, got, tc.want)
		}
	}
}

func mustComponent(t *testing.T, filter string) Component {
	t.Helper()
	r, err := ParseRules("test", []byte("components: [{name: v, collection: src, op: count, filter: "+filter+"}]"))
	if err != nil {
		t.Fatal(err)
	}
	return r.Components[0]
}

// TestRefuseOperators: a component whose filter uses a refused operator
// anywhere (under $or, $not, inside another $elemMatch's query) is named,
// with the file, the operator and the server; one that does not, or a
// server that misreads nothing, passes.
func TestRefuseOperators(t *testing.T) {
	t.Parallel()
	rules, err := ParseRules("rules.yaml", []byte(`components:
  - {name: plain, collection: c, op: count, filter: {kind: post, n: {$not: {$gt: 5}}}}
  - {name: nested, collection: c, op: count, filter: {$or: [{kind: post}, {items: {$elemMatch: {n: {$gte: 3}}}}]}}
  - {name: unfiltered, collection: c, op: count}
  - {name: deep, collection: c, op: count, filter: {$and: [{tags: {$not: {$elemMatch: {$in: [go]}}}}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := rules.RefuseOperators(nil, "MongoDB"); err != nil {
		t.Errorf("refused with no operators to refuse: %v", err)
	}
	err = rules.RefuseOperators([]string{"$elemMatch"}, "FerretDB v1.24.2")
	var re *RulesError
	if !errors.As(err, &re) {
		t.Fatalf("RefuseOperators = %v, want a *RulesError", err)
	}
	want := []string{
		`rules.yaml: component 2 ("nested"): filter uses $elemMatch, which FerretDB v1.24.2 answers wrongly (docs/contract.md): rewrite the filter without it`,
		`rules.yaml: component 4 ("deep"): filter uses $elemMatch, which FerretDB v1.24.2 answers wrongly (docs/contract.md): rewrite the filter without it`,
	}
	if !reflect.DeepEqual(re.Problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(re.Problems, "\n"), strings.Join(want, "\n"))
	}
}

// weight: null (or ~, or nothing) has always parsed as a weight of 0, not
// as the default: a rules file that switched a component off that way must
// not find it scored at full weight after an upgrade.
func TestNullWeightIsZero(t *testing.T) {
	for _, w := range []string{"null", "~", ""} {
		r, err := ParseRules("rules.yaml", []byte("components:\n  - name: v\n    collection: src\n    op: count\n    weight: "+w+"\n"))
		if err != nil {
			t.Fatalf("weight: %q: %v", w, err)
		}
		if got := r.Components[0].Weight; got != 0 {
			t.Errorf("weight: %q parsed as %v, want 0", w, got)
		}
	}
}
