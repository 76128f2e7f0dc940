package scoring

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// RulesError reports every problem of a rules file, so an operator fixes them all in one restart.
type RulesError struct {
	Source   string
	Problems []string // `rules.yaml: component 2 ("posts"): unknown op "mean" (want ...)`
}

// Error lists every problem, one per line when there are several.
func (e *RulesError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid scoring rules: " + e.Problems[0]
	}
	return fmt.Sprintf("invalid scoring rules (%d problems):\n\t%s", len(e.Problems), strings.Join(e.Problems, "\n\t"))
}

// componentKeys are the keys a component may have, as errors list them. Any other is refused:
// a typo such as "colection" falling back to a default would score from the wrong data.
var componentKeys = []string{"name", "collection", "userField", "op", "field", "weight", "window", "timeField", "filter"}

// ParseRules parses and validates rules in YAML (or JSON). source, usually the
// file path, names the data in errors; a non-nil error is a *RulesError.
func ParseRules(source string, data []byte) (*Rules, error) {
	p := &rulesParser{source: source}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		p.problem("not valid YAML or JSON: %v", err)
		return nil, p.err()
	}
	comps := p.parseRoot(&root)
	if err := p.err(); err != nil {
		return nil, err
	}
	return &Rules{Source: source, Components: comps}, nil
}

// rulesParser walks the YAML tree by hand rather than decoding into structs,
// so it can keep going after a problem and say which component it is in.
type rulesParser struct {
	source   string
	problems []string
}

func (p *rulesParser) problem(format string, args ...any) {
	p.problems = append(p.problems, p.source+": "+fmt.Sprintf(format, args...))
}

// err is the *RulesError listing the problems found, nil when none was.
func (p *rulesParser) err() error {
	if len(p.problems) == 0 {
		return nil
	}
	return &RulesError{Source: p.source, Problems: p.problems}
}

func (p *rulesParser) parseRoot(root *yaml.Node) []Component {
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	if doc.Kind == 0 || doc.Kind == yaml.DocumentNode {
		p.problem("no components (the file is empty)")
		return nil
	}
	if doc.Kind != yaml.MappingNode {
		p.problem("want a mapping with a components list at the top level, got %s", kindName(doc))
		return nil
	}
	var list *yaml.Node
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if key := doc.Content[i].Value; key != "components" {
			p.problem("unknown top-level key %q (want components)", key)
		} else {
			list = doc.Content[i+1]
		}
	}
	switch {
	case list == nil:
		p.problem("no components (missing components list)")
		return nil
	case list.Kind != yaml.SequenceNode:
		p.problem("components must be a list, got %s", kindName(list))
		return nil
	case len(list.Content) == 0:
		p.problem("no components (the components list is empty)")
	}
	comps := make([]Component, 0, len(list.Content))
	firstIndex := map[string]int{} // name -> 1-based index of its first use
	for i, n := range list.Content {
		cp := componentParser{p: p, index: i + 1}
		c := cp.parse(n)
		if first, dup := firstIndex[c.Name]; dup && c.Name != "" {
			cp.problem("duplicate name %q (also component %d)", c.Name, first)
		} else if !dup {
			firstIndex[c.Name] = i + 1
		}
		comps = append(comps, c)
	}
	return comps
}

// componentParser reports problems prefixed with the component they are in.
type componentParser struct {
	p        *rulesParser
	index    int
	name     string
	filterOK bool // the filter (if any) read as a document, to be checked
}

func (cp *componentParser) problem(format string, args ...any) {
	where := fmt.Sprintf("component %d", cp.index)
	if cp.name != "" {
		where += fmt.Sprintf(" (%q)", cp.name)
	}
	cp.p.problem("%s: %s", where, fmt.Sprintf(format, args...))
}

func (cp *componentParser) parse(n *yaml.Node) Component {
	c := Component{UserField: DefaultUserField, TimeField: DefaultTimeField, Weight: DefaultWeight}
	if n.Kind != yaml.MappingNode {
		cp.problem("want a mapping, got %s", kindName(n))
		return c
	}
	// Read the name first so every problem of this component can carry it.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" {
			cp.name = cp.str("name", n.Content[i+1])
		}
	}
	c.Name = cp.name
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch key, v := n.Content[i].Value, n.Content[i+1]; key {
		case "name": // read above
		case "collection", "userField", "op", "field", "timeField":
			*map[string]*string{"collection": &c.Collection, "userField": &c.UserField, "op": (*string)(&c.Op),
				"field": &c.Field, "timeField": &c.TimeField}[key] = cp.str(key, v)
		case "weight":
			var w float64 // not c.Weight: null decodes to nothing, and weight: null has always meant 0
			if v.Kind != yaml.ScalarNode || v.Decode(&w) != nil {
				cp.problem("weight %q is not a number", v.Value)
				w = DefaultWeight
			}
			if c.Weight = w; math.IsNaN(w) || math.IsInf(w, 0) {
				cp.problem("weight %s is not a finite number", v.Value)
			}
		case "window":
			s := cp.str(key, v)
			var err error
			c.Window, err = time.ParseDuration(s) // 0 on error
			switch {
			case s == "":
			case err != nil:
				cp.problem("window %q is not a duration such as \"720h\" or \"90m\"", s)
			case c.Window < 0:
				cp.problem("negative window %q", s)
			}
		case "filter":
			// Checked in validate, once userField is known whatever the key order.
			c.Filter, cp.filterOK = cp.parseFilter(v)
		default:
			msg := fmt.Sprintf("unknown key %q", key)
			if s := suggestKey(key); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			cp.problem("%s; known keys are %s", msg, strings.Join(componentKeys, ", "))
		}
	}
	c.UserField, c.TimeField = cmp.Or(c.UserField, DefaultUserField), cmp.Or(c.TimeField, DefaultTimeField) // null or ""
	cp.validate(&c)
	return c
}

func (cp *componentParser) validate(c *Component) {
	if c.Name == "" {
		cp.problem("missing name")
	} else if strings.Contains(c.Name, ".") || strings.HasPrefix(c.Name, "$") {
		cp.problem("invalid name %q: it becomes a key of the score document's components, so it must not contain \".\" or start with \"$\"", c.Name)
	}
	if c.Collection == "" {
		cp.problem("missing collection")
	} else if strings.ContainsAny(c.Collection, "$\x00") {
		cp.problem("invalid collection %q: must not contain \"$\" or NUL", c.Collection)
	}
	switch c.Op {
	case OpSum, OpMax, OpMin, OpAvg, OpDistinct:
		if c.Field == "" {
			cp.problem("missing field (op %q reads it)", c.Op)
		}
	case OpCount:
	case "":
		cp.problem("missing op (want %s)", opNames)
	default:
		cp.problem("unknown op %q (want %s)", c.Op, opNames)
	}
	for _, f := range []struct{ key, path string }{{"userField", c.UserField}, {"field", c.Field}, {"timeField", c.TimeField}} {
		if f.path != "" && !validFieldPath(f.path) {
			cp.problem("invalid %s %q: a field path must not start with \"$\" or have empty parts", f.key, f.path)
		}
	}
	if cp.filterOK && c.Filter != nil {
		filterChecker{cp: cp, userField: c.UserField}.query(c.Filter, "", false)
	}
}

// str reads a scalar; null reads as "", missing or the default like an absent key.
func (cp *componentParser) str(key string, v *yaml.Node) string {
	switch {
	case v.Kind != yaml.ScalarNode:
		cp.problem("%s must be a string, got %s", key, kindName(v))
	case v.Tag != "!!null":
		return v.Value
	}
	return ""
}

// validFieldPath reports whether path can be a field in a query and "$path" in an aggregation.
func validFieldPath(path string) bool {
	return !strings.HasPrefix(path, "$") && !strings.ContainsRune(path, 0) && !slices.Contains(strings.Split(path, "."), "")
}

// suggestKey returns the component key closest to a misspelt one, or "" when none is a likely typo.
func suggestKey(key string) string {
	best, bestDist := "", 3 // at most two edits away
	for _, k := range componentKeys {
		d := editDistance(strings.ToLower(key), strings.ToLower(k))
		// Short keys need a closer match: "x" is not a typo of "op".
		if d < bestDist && d < len(k)/2+1 {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	row := make([]int, len(b)+1) // distances from a[:i] to each b[:j]
	for j := range row {
		row[j] = j
	}
	for i := range len(a) {
		diag := row[0] // a[:i] to b[:j]
		row[0] = i + 1
		for j := range len(b) {
			cost := 1
			if a[i] == b[j] {
				cost = 0
			}
			diag, row[j+1] = row[j+1], min(row[j+1]+1, row[j]+1, diag+cost)
		}
	}
	return row[len(b)]
}

func kindName(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return "a scalar " + n.Value
	}
	return cmp.Or(map[yaml.Kind]string{yaml.SequenceNode: "a list", yaml.MappingNode: "a mapping", yaml.AliasNode: "an alias"}[n.Kind], "nothing")
}
