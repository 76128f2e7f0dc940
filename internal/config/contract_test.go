package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// contractDoc is the page that lists every variable and its default.
const contractDoc = "../../docs/contract.md"

var (
	// tableRowRE is a row of the configuration table: | `NAME` | `default` | meaning |
	tableRowRE = regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| ([^|]+) \\|")
	// proseDefaultRE is a variable described in a sentence: `NAME` (… default X…)
	proseDefaultRE = regexp.MustCompile("`([A-Z_]+)` \\(([^)]*)\\)")
	defaultWordRE  = regexp.MustCompile(`default\s+([^\s,;)]+)`)
)

// documentedDefaults reads the defaults docs/contract.md gives: the table's,
// then those of the variables described in prose ("" when none is named).
func documentedDefaults(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(contractDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range tableRowRE.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = strings.Trim(strings.TrimSpace(m[2]), "`")
	}
	for _, m := range proseDefaultRE.FindAllStringSubmatch(string(doc), -1) {
		if _, inTable := out[m[1]]; inTable {
			continue
		}
		def := ""
		if d := defaultWordRE.FindStringSubmatch(m[2]); d != nil {
			def = d[1]
		}
		out[m[1]] = def
	}
	return out
}

// sameValue reports whether doc, as the contract writes it, is v.
func sameValue(v reflect.Value, doc string) error {
	switch x := v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(doc)
		if err != nil || d != x {
			return fmt.Errorf("documented %q, code %s", doc, x)
		}
	case int:
		if doc == "" && x == 0 {
			return nil
		}
		if n, err := strconv.Atoi(doc); err != nil || n != x {
			return fmt.Errorf("documented %q, code %d", doc, x)
		}
	case bool:
		if b, err := strconv.ParseBool(doc); err != nil || b != x {
			return fmt.Errorf("documented %q, code %t", doc, x)
		}
	case string:
		if doc == "built in" || doc == "(none)" { // SCORING_RULES: the built-in rules; SCORER_URL: unset
			doc = ""
		}
		if doc != x {
			return fmt.Errorf("documented %q, code %q", doc, x)
		}
	default:
		return fmt.Errorf("type %T not handled by this test", x)
	}
	return nil
}

func TestContractDocumentsTheDefaults(t *testing.T) {
	t.Parallel()
	doc := documentedDefaults(t)
	def := reflect.ValueOf(Defaults())
	typ := def.Type()
	for i := range typ.NumField() {
		name := strings.Split(typ.Field(i).Tag.Get("env"), ",")[0]
		documented, ok := doc[name]
		if !ok {
			t.Errorf("%s (Config.%s) is not in %s", name, typ.Field(i).Name, contractDoc)
			continue
		}
		if err := sameValue(def.Field(i), documented); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		delete(doc, name)
	}
	for name := range doc {
		t.Errorf("%s documents %s, which Config does not read", contractDoc, name)
	}
}

func TestEmptyVariableKeepsTheDefault(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]string{"CLAIM_WINDOW=", "LOG_LEVEL=", "MONGODB_URI=", "LEASE_DURATION="})
	if err != nil {
		t.Fatal(err)
	}
	if cfg != Defaults() {
		t.Errorf("empty variables:\n got %+v\nwant %+v", cfg, Defaults())
	}
}
