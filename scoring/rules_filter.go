package scoring

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.yaml.in/yaml/v3"
)

// A component's filter is YAML (or JSON) with relaxed Extended JSON for the values YAML has
// no word for ({$date: ...}, {$oid: ...}): turned into JSON and read by bson.UnmarshalExtJSON,
// so every "$" key still left is an operator, checked against the lists below.

// fieldOperators apply to a field: {field: {$op: ...}}.
var fieldOperators = []string{"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin",
	"$exists", "$type", "$all", "$elemMatch", "$size", "$regex", "$options", "$not"}

// logicalOperators combine whole queries: {$op: [query, ...]}.
var logicalOperators = []string{"$and", "$or", "$nor"}

// parseFilter converts a filter node to a query document; ok is false when cp got problems.
func (cp *componentParser) parseFilter(n *yaml.Node) (f bson.D, ok bool) {
	if n.ShortTag() == "!!null" {
		return nil, true
	}
	if resolveAlias(n).Kind != yaml.MappingNode {
		cp.problem("filter must be a mapping (a MongoDB query document), got %s", kindName(n))
		return nil, false
	}
	v, err := yamlValue(n, 0)
	var js []byte
	if err == nil {
		js, err = bson.MarshalExtJSON(v, false, false)
	}
	if err != nil {
		cp.problem("filter: %v", err)
		return nil, false
	}
	if err := bson.UnmarshalExtJSON(js, false, &f); err != nil {
		cp.problem("filter is not a valid query document (%v); dates are written {$date: \"2025-01-31T00:00:00Z\"}", err)
		return nil, false
	}
	return f, true
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// yamlValue is n as the value whose Extended JSON parseFilter reads: mapping keys in their order (it
// matters for a document compared whole), each scalar the BSON type YAML gives it (5 an int, 5.0 a double).
func yamlValue(n *yaml.Node, depth int) (any, error) {
	if depth > 100 {
		return nil, errors.New("nested too deeply")
	}
	n = resolveAlias(n)
	switch n.Kind {
	case yaml.MappingNode:
		d := bson.D{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolveAlias(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, fmt.Errorf("key %q: want a plain field name or operator (no merge keys or complex keys)", k.Value)
			}
			v, err := yamlValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			d = append(d, bson.E{Key: k.Value, Value: v})
		}
		return d, nil
	case yaml.SequenceNode:
		a := bson.A{}
		for _, e := range n.Content {
			v, err := yamlValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	case yaml.ScalarNode:
		return yamlScalar(n)
	}
	return nil, fmt.Errorf("unexpected %s", kindName(n))
}

func yamlScalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null", "!!str", "!!bool", "!!float":
		var v any // nil, string, bool or float64
		err := n.Decode(&v)
		return v, err
	case "!!int":
		// A plain JSON integer once written: an int32 read back (an int64
		// beyond), as the wrappers taking numbers ($timestamp, $minKey) want.
		var i int64
		if err := n.Decode(&i); err != nil {
			return nil, fmt.Errorf("%s: not a 64-bit integer; use {$numberDecimal: %q}", n.Value, n.Value)
		}
		return i, nil
	case "!!timestamp":
		// Read as a date, 2025-01-31 would be midnight UTC; read as a
		// string it would match no date field. Neither guess is safe.
		return nil, fmt.Errorf("unquoted date %s: write {$date: \"%sT00:00:00Z\"} for a date, or quote it for a string", n.Value, n.Value)
	}
	return nil, fmt.Errorf("%s: unsupported YAML type %s", n.Value, n.ShortTag())
}

// filterChecker reports every operator of a filter that is not a query
// operator and every condition on the user field: the filter never picks the user.
type filterChecker struct {
	cp        *componentParser
	userField string
}

func (fc filterChecker) problem(where, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if where != "" {
		msg = "at " + where + ": " + msg
	}
	fc.cp.problem("filter %s", msg)
}

// refuse names the operator and why it is not allowed.
func (fc filterChecker) refuse(where, op string) {
	why := "only query operators are allowed (" + strings.Join(append(slices.Clone(fieldOperators), logicalOperators...), " ") + ")"
	switch op {
	case "$where", "$function", "$accumulator":
		why = "it runs JavaScript on the server; " + why
	case "$expr":
		why = "aggregation expressions are not allowed; " + why
	case "$jsonSchema", "$text":
		why = why + "; " + op + " is neither a comparison nor cheap on every server"
	}
	fc.problem(where, "refused operator %s: %s", op, why)
}

// query checks a query document (the filter, an element of $and, $or or $nor, or an $elemMatch's
// query). inElem is set inside $elemMatch, whose fields are an array element's, never the user field.
func (fc filterChecker) query(q bson.D, where string, inElem bool) {
	for _, e := range q {
		at := join(where, e.Key)
		switch {
		case slices.Contains(logicalOperators, e.Key):
			arr, ok := e.Value.(bson.A)
			if !ok || len(arr) == 0 {
				fc.problem(at, "%s needs a non-empty list of query documents", e.Key)
			}
			for i, sub := range arr { // none unless a list
				if d, ok := sub.(bson.D); ok {
					fc.query(d, fmt.Sprintf("%s.%d", at, i), inElem)
				} else {
					fc.problem(fmt.Sprintf("%s.%d", at, i), "%s lists query documents, got %v", e.Key, sub)
				}
			}
		case slices.Contains(fieldOperators, e.Key):
			fc.problem(at, "%s applies to a field, e.g. {points: {%s: ...}}", e.Key, e.Key)
		case strings.HasPrefix(e.Key, "$"):
			fc.refuse(at, e.Key)
		case !validFieldPath(e.Key) || strings.Contains(e.Key, ".$"): // positional operators mean nothing in a query
			fc.problem(at, "invalid field %q: a field path must not have empty parts or parts starting with \"$\"", e.Key)
		case !inElem && pathsOverlap(e.Key, fc.userField):
			fc.problem(at, "refused field %s: it is the component's userField (%s), which the refresh matches to the user itself", e.Key, fc.userField)
		default:
			if d, ok := opDoc(e.Value); ok {
				fc.operators(d, at)
			} else {
				fc.literal(e.Value, at) // compared for equality
			}
		}
	}
}

// opDoc returns v as an operator document: one whose first key is an
// operator (a field's conditions, not a document compared whole).
func opDoc(v any) (bson.D, bool) {
	d, ok := v.(bson.D)
	return d, ok && len(d) > 0 && strings.HasPrefix(d[0].Key, "$")
}

// operators checks {$op: ..., $op2: ...}, the conditions on one field.
func (fc filterChecker) operators(d bson.D, where string) {
	hasRegex := slices.ContainsFunc(d, func(e bson.E) bool { return e.Key == "$regex" })
	for _, e := range d {
		at := join(where, e.Key)
		switch {
		case !strings.HasPrefix(e.Key, "$"):
			fc.problem(at, "field %q mixed with operators: a condition is either all operators or a document compared whole", e.Key)
		case slices.Contains(logicalOperators, e.Key):
			fc.problem(at, "%s combines whole queries, e.g. {%s: [{a: 1}, {b: 2}]}, not the conditions of one field", e.Key, e.Key)
		case !slices.Contains(fieldOperators, e.Key):
			fc.refuse(at, e.Key)
		default:
			fc.operator(e, at, hasRegex)
		}
	}
}

func (fc filterChecker) operator(e bson.E, at string, hasRegex bool) {
	switch e.Key {
	case "$in", "$nin", "$all":
		if _, ok := e.Value.(bson.A); !ok {
			fc.problem(at, "%s needs a list", e.Key)
			return
		}
		fc.literal(e.Value, at) // each element at at.i
	case "$not":
		x, isOps := opDoc(e.Value)
		_, isRegex := e.Value.(bson.Regex)
		switch {
		case isOps:
			fc.operators(x, at)
		case !isRegex:
			fc.problem(at, "$not needs operators, e.g. {$not: {$gt: 5}}, or a regular expression")
		}
	case "$elemMatch":
		x, ok := e.Value.(bson.D)
		switch {
		case !ok || len(x) == 0:
			fc.problem(at, "$elemMatch needs a non-empty document")
		case strings.HasPrefix(x[0].Key, "$") && !slices.Contains(logicalOperators, x[0].Key):
			fc.operators(x, at) // conditions on each element itself
		default:
			fc.query(x, at, true) // a query on each element, a document
		}
	case "$options":
		if !hasRegex {
			fc.problem(at, "$options goes with $regex")
		}
		if _, ok := e.Value.(string); !ok {
			fc.problem(at, "$options needs a string of flags such as \"i\"")
		}
	case "$regex":
		switch e.Value.(type) {
		case string, bson.Regex:
		default:
			fc.problem(at, "$regex needs a string or a regular expression")
		}
	default:
		fc.literal(e.Value, at)
	}
}

// RefuseOperators returns a *RulesError naming each component whose filter uses one of ops, which
// server answers wrongly; nil when none does (every "$" key left in a parsed filter is an operator).
func (r *Rules) RefuseOperators(ops []string, server string) error {
	p := &rulesParser{source: r.Source}
	for i, c := range r.Components {
		cp := &componentParser{p: p, index: i + 1, name: c.Name}
		for _, op := range ops {
			if usesOperator(c.Filter, op) {
				cp.problem("filter uses %s, which %s answers wrongly (docs/contract.md): rewrite the filter without it", op, server)
			}
		}
	}
	return p.err()
}

// usesOperator reports whether op is a key anywhere in v.
func usesOperator(v any, op string) bool {
	switch x := v.(type) {
	case bson.D:
		return slices.ContainsFunc(x, func(e bson.E) bool { return e.Key == op || usesOperator(e.Value, op) })
	case bson.A:
		return slices.ContainsFunc(x, func(e any) bool { return usesOperator(e, op) })
	}
	return false
}

// literal checks a value compared as it is: no "$" key, which one server
// may read as an operator and another as a value ({$all: [{$elemMatch: ...}]}).
func (fc filterChecker) literal(v any, where string) {
	switch x := v.(type) {
	case bson.D:
		for _, e := range x {
			if strings.HasPrefix(e.Key, "$") {
				fc.problem(join(where, e.Key), "%s inside a value: only the operators of a field's condition may start with \"$\"", e.Key)
			} else {
				fc.literal(e.Value, join(where, e.Key))
			}
		}
	case bson.A:
		for i, e := range x {
			fc.literal(e, fmt.Sprintf("%s.%d", where, i))
		}
	}
}

// join is where + "." + key, or key when where is "" (no where starts with ".").
func join(where, key string) string { return strings.TrimPrefix(where+"."+key, ".") }

// pathsOverlap reports whether a condition on one path constrains the other:
// the same path, or one inside the other ("author" and "author.name").
func pathsOverlap(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
}

// filterEqualityFields returns the fields the filter pins to one value (a literal or $eq, no regular
// expression), at its top level or in a top-level $and: an index serves them as it serves the user field.
func filterEqualityFields(f bson.D) []string {
	isEq := func(o bson.E) bool {
		_, re := o.Value.(bson.Regex)
		return o.Key == "$eq" && !re
	}
	var out []string
	for _, e := range f {
		_, re := e.Value.(bson.Regex)
		d, ops := opDoc(e.Value)
		switch {
		case e.Key == "$and":
			arr, _ := e.Value.(bson.A)
			for _, sub := range arr {
				if d, ok := sub.(bson.D); ok {
					out = append(out, filterEqualityFields(d)...)
				}
			}
		case strings.HasPrefix(e.Key, "$"), re, ops && !slices.ContainsFunc(d, isEq), slices.Contains(out, e.Key):
		default:
			out = append(out, e.Key)
		}
	}
	return out
}
