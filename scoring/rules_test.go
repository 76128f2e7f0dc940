package scoring

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// specExample is the contract's (docs/contract.md) example, verbatim.
const specExample = `
components:
  - name: activity          # key in the score document's ` + "`components`" + `
    collection: user_activity
    userField: username     # field that holds the username in that collection
    op: sum                 # sum | count | max | distinct
    field: points           # the field that sum, max and distinct read
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
			data: "components:\n  - {name: a, collection: c, op: count}\n  - {name: posts, collection: posts, op: avg}\n",
			want: []string{p + `component 2 ("posts"): unknown op "avg" (want sum, count, max or distinct)`},
		},
		"missing op": {
			data: "components:\n  - {name: a, collection: c}\n",
			want: []string{p + `component 1 ("a"): missing op (want sum, count, max or distinct)`},
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
				p + `component 1 ("a"): unknown key "colection" (did you mean "collection"?); known keys are name, collection, userField, op, field, weight, window, timeField`,
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
    op: avg
  - collection: posts
    op: count
    window: -5m
  - name: activity
    colection: x
    op: sum
`,
			want: []string{
				p + `component 1 ("activity"): unknown op "avg" (want sum, count, max or distinct)`,
				p + `component 2: negative window "-5m"`,
				p + `component 2: missing name`,
				p + `component 3 ("activity"): unknown key "colection" (did you mean "collection"?); known keys are name, collection, userField, op, field, weight, window, timeField`,
				p + `component 3 ("activity"): missing collection`,
				p + `component 3 ("activity"): missing field (op "sum" reads it)`,
				p + `component 3 ("activity"): duplicate name "activity" (also component 1)`,
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

	bad := write("bad.yaml", "components:\n  - {name: posts, collection: posts, op: avg}\n")
	_, err = LoadRules(bad)
	if err == nil || !strings.Contains(err.Error(), bad+`: component 1 ("posts"): unknown op "avg"`) {
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
