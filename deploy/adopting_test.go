package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	adoptingPath         = "docs/adopting.md"
	doctorPrivilegesPath = "internal/ops/doctor_privileges.go"
)

// doctorNeeds reads the privileges `scorerefresh doctor` checks from the
// code (the need{collection, action} literals of needs() in
// internal/ops/doctor_privileges.go), as resource -> actions, with the
// default collection names, the shipped rules' source collections, "" for
// the database and "cluster".
func doctorNeeds(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, repoFile(t, doctorPrivilegesPath), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	colls := map[string]string{"Queue": "score_events", "Claims": "score_claims", "DeadLetter": "score_events_dead", "Scores": "user_scores"}
	sources := loadRulesCollections(t)
	out := map[string][]string{}
	add := func(coll string, action string) {
		if !slices.Contains(out[coll], action) {
			out[coll] = append(out[coll], action)
		}
	}
	resolve := func(e ast.Expr) []string {
		switch e := e.(type) {
		case *ast.BasicLit:
			s, _ := strconv.Unquote(e.Value)
			return []string{s}
		case *ast.CallExpr: // c.Queue.Name()
			if sel, ok := e.Fun.(*ast.SelectorExpr); ok {
				if inner, ok := sel.X.(*ast.SelectorExpr); ok && colls[inner.Sel.Name] != "" {
					return []string{colls[inner.Sel.Name]}
				}
			}
		case *ast.Ident:
			if e.Name == "src" {
				return sources
			}
		}
		t.Fatalf("%s: a need{} of a form this test does not read: %T", doctorPrivilegesPath, e)
		return nil
	}
	var rangeActions []string
	addNeed := func(n *ast.CompositeLit) {
		if len(n.Elts) != 2 {
			t.Fatalf("%s: a need{} without two fields", doctorPrivilegesPath)
		}
		actions := rangeActions
		if _, isIdent := n.Elts[1].(*ast.Ident); !isIdent {
			actions = resolve(n.Elts[1])
		}
		for _, c := range resolve(n.Elts[0]) {
			for _, a := range actions {
				add(c, a)
			}
		}
	}
	var walk func(n ast.Node) bool
	walk = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.RangeStmt:
			if lit, ok := n.X.(*ast.CompositeLit); ok {
				saved := rangeActions
				rangeActions = nil
				for _, el := range lit.Elts {
					rangeActions = append(rangeActions, resolve(el)...)
				}
				ast.Inspect(n.Body, walk)
				rangeActions = saved
				return false
			}
		case *ast.CompositeLit:
			if id, ok := n.Type.(*ast.Ident); ok && id.Name == "need" {
				addNeed(n)
			}
			// []need{{...}, {...}}: the elements' type is elided.
			if arr, ok := n.Type.(*ast.ArrayType); ok {
				if id, ok := arr.Elt.(*ast.Ident); ok && id.Name == "need" {
					for _, el := range n.Elts {
						addNeed(el.(*ast.CompositeLit))
					}
					return false
				}
			}
		}
		return true
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "needs" {
			ast.Inspect(fn.Body, walk)
		}
	}
	if len(out) < 5 {
		t.Fatalf("%s: read only %v from needs()", doctorPrivilegesPath, out)
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// loadRulesCollections lists the collections the shipped rules read.
func loadRulesCollections(t *testing.T) []string {
	t.Helper()
	var rules struct {
		Components []struct {
			Collection string `yaml:"collection"`
		} `yaml:"components"`
	}
	decodeYAML(t, "deploy/k8s/rules/rules.yaml", &rules)
	var out []string
	for _, c := range rules.Components {
		if !slices.Contains(out, c.Collection) {
			out = append(out, c.Collection)
		}
	}
	return out
}

// TestAdoptingRoleIsWhatTheDoctorChecks: the custom role of docs/adopting.md,
// as mongosh's createRole and as the Atlas CLI's privileges, grants exactly
// the actions the doctor checks, no more and no fewer.
func TestAdoptingRoleIsWhatTheDoctorChecks(t *testing.T) {
	t.Parallel()
	want := doctorNeeds(t)
	doc := string(readAsset(t, adoptingPath))

	mongosh := map[string][]string{}
	res := regexp.MustCompile(`\{\s*resource:\s*\{\s*(?:db:\s*"app",\s*collection:\s*"([^"]*)"|cluster:\s*true)\s*\},\s*actions:\s*\[([^\]]*)\]`)
	for _, m := range res.FindAllStringSubmatch(doc, -1) {
		coll := m[1]
		if strings.Contains(m[0], "cluster: true") {
			coll = "cluster"
		}
		for _, a := range regexp.MustCompile(`"(\w+)"`).FindAllStringSubmatch(m[2], -1) {
			mongosh[coll] = append(mongosh[coll], a[1])
		}
		slices.Sort(mongosh[coll])
	}
	if !maps.EqualFunc(mongosh, want, slices.Equal) {
		t.Errorf("%s: the createRole privileges are\n  %v\nthe doctor checks (%s)\n  %v", adoptingPath, mongosh, doctorPrivilegesPath, want)
	}

	atlas := map[string][]string{}
	camel := func(s string) string { // FIND -> find, CREATE_INDEX -> createIndex
		parts := strings.Split(strings.ToLower(s), "_")
		for i := 1; i < len(parts); i++ {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
		return strings.Join(parts, "")
	}
	for _, m := range regexp.MustCompile(`--privilege '([^']*)'`).FindAllStringSubmatch(doc, -1) {
		for _, p := range strings.Split(m[1], ",") {
			action, where, _ := strings.Cut(p, "@")
			coll := "cluster"
			if where != "" {
				db, c, _ := strings.Cut(where, ".")
				if db != "app" {
					t.Errorf("%s: Atlas privilege %s is not on the database app", adoptingPath, p)
				}
				coll = c
			}
			atlas[coll] = append(atlas[coll], camel(action))
		}
	}
	for k := range atlas {
		slices.Sort(atlas[k])
	}
	if !maps.EqualFunc(atlas, want, slices.Equal) {
		t.Errorf("%s: the Atlas custom role's privileges are\n  %v\nthe doctor checks (%s)\n  %v", adoptingPath, atlas, doctorPrivilegesPath, want)
	}
}

// TestAdoptingIsLinked: README's Deploying section and DEPLOYING.md lead to
// the adoption guide.
func TestAdoptingIsLinked(t *testing.T) {
	t.Parallel()
	for doc, link := range map[string]string{"README.md": "(docs/adopting.md)", "deploy/DEPLOYING.md": "(../docs/adopting.md)"} {
		if !strings.Contains(string(readAsset(t, doc)), link) {
			t.Errorf("%s does not link %s", doc, adoptingPath)
		}
	}
}
