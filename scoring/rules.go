package scoring

import (
	"fmt"
	"os"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Op is the aggregation a component applies to its matching documents.
type Op string

// The operations the contract (docs/contract.md) defines.
const (
	OpSum      Op = "sum"      // sums Field; missing and non-numeric values count as 0
	OpCount    Op = "count"    // counts the matching documents
	OpMax      Op = "max"      // the largest numeric value of Field; 0 when there is none
	OpDistinct Op = "distinct" // counts the distinct non-null values of Field
	OpMin      Op = "min"      // the smallest numeric value of Field; 0 when there is none
	OpAvg      Op = "avg"      // the mean of the numeric values of Field; 0 when there is none
)

// opNames lists the ops in the order error messages name them.
const opNames = "sum, count, max, min, avg or distinct"

// Defaults applied to a component when the rules file leaves a key out.
const (
	DefaultUserField = "username"
	DefaultTimeField = "at"
	DefaultWeight    = 1.0
)

// Component is one term of a score: Op over the documents of Collection whose
// UserField is the username and that match Filter, within Window if any.
type Component struct {
	Name       string        // key in the score document's components
	Collection string        // source collection
	UserField  string        // field holding the username; defaults to "username"
	Op         Op            // sum, count, max, min, avg or distinct
	Field      string        // field read by every op but count
	Weight     float64       // multiplies the value in the score; 1 when the file omits it
	Window     time.Duration // only documents this recent count; 0 means no window
	TimeField  string        // date field the window applies to; defaults to "at"
	// Filter is a query document a source document must match too (nil:
	// none), checked by the parser; shared by every query: never modified.
	Filter bson.D
}

// IndexKeys returns the fields an index of Collection serves this component best by, in order:
// UserField, the fields Filter pins to one value, then TimeField when there is a window.
func (c Component) IndexKeys() []string {
	keys := []string{c.UserField}
	for _, f := range filterEqualityFields(c.Filter) {
		if !slices.Contains(keys, f) && (c.Window == 0 || f != c.TimeField) {
			keys = append(keys, f)
		}
	}
	if c.Window > 0 {
		keys = append(keys, c.TimeField)
	}
	return keys
}

// Rules is a validated set of components.
type Rules struct {
	Source     string // file path the rules came from, or "built-in"
	Components []Component
}

// DefaultRules returns the rules used without a rules file: the first component of docs/contract.md's example.
func DefaultRules() *Rules {
	return &Rules{Source: "built-in", Components: []Component{{
		Name: "activity", Collection: "user_activity", UserField: "username", Op: OpSum,
		Field: "points", Weight: 1, Window: 720 * time.Hour, TimeField: "at",
	}}}
}

// LoadRules reads and validates the rules file at path. Errors name the path.
func LoadRules(path string) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scoring rules: %w", err) // the *PathError names the file
	}
	return ParseRules(path, data)
}

// Collections returns the distinct source collections the rules read, sorted.
func (r *Rules) Collections() []string {
	var names []string
	for _, c := range r.Components {
		names = append(names, c.Collection)
	}
	return slices.Compact(slices.Sorted(slices.Values(names)))
}
