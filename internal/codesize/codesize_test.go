// Package codesize holds the repository's size budget as tests: the
// non-test Go a maintainer has to read stays under a line count, and no
// function grows past what fits on a screen (docs/guide.md, Layout). Raise
// a limit only in the change that needs it, saying why.
package codesize

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	maxNonTestLines = 20_000 // every non-test .go file, comments and examples included
	maxFuncLines    = 60     // from func to its closing brace
)

// sources lists the repository's non-test Go files, skipping hidden
// directories, testdata and node_modules (what a clean clone's
// `git ls-files '*.go'` holds).
func sources(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing the repository's Go files: %v", err)
	}
	if len(files) < 50 {
		t.Fatalf("found %d Go files under %s: not the repository's root", len(files), root)
	}
	return files
}

func TestNonTestGoStaysWithinItsLineBudget(t *testing.T) {
	total := 0
	for _, f := range sources(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += bytes.Count(b, []byte("\n"))
	}
	t.Logf("%d non-test lines of Go (budget %d)", total, maxNonTestLines)
	if total > maxNonTestLines {
		t.Errorf("non-test Go is %d lines, over the budget of %d: make room before adding, or raise the budget saying why", total, maxNonTestLines)
	}
}

func TestNoFunctionIsLongerThanAScreen(t *testing.T) {
	fset := token.NewFileSet()
	for _, f := range sources(t) {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", f, err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			fd, ok := n.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				return true
			}
			if lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; lines > maxFuncLines {
				t.Errorf("%s: %s is %d lines, over %d", fset.Position(fd.Pos()), fd.Name.Name, lines, maxFuncLines)
			}
			return false
		})
	}
}
