package tests

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLongTestsListed holds the Makefile's LONG_TESTS to the tests that skip
// under -short: make test runs with -short, so a test that skips there runs
// only if make test-long names it. Every test of the repository that calls
// testing.Short() (itself, or through a helper of its package) must be in
// LONG_TESTS, and every entry of LONG_TESTS must be such a test.
func TestLongTestsListed(t *testing.T) {
	require.NoError(t, checkLongTests(repoRoot))

	// The check fails on a tree whose long test the list misses, and on an
	// entry naming no long test.
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o750))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	}
	write("a/a_test.go", `package a

import "testing"

func TestListed(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
}

func TestThroughAHelper(t *testing.T) { skipShort(t) }

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
}

func TestShort(t *testing.T) {}
`)
	write("Makefile", "LONG_TESTS := \\\n\t./a:TestListed \\\n\t./a:TestShort \\\n\t./b:TestGone\n\ntest:\n")
	err := checkLongTests(root)
	require.Error(t, err)
	require.ErrorContains(t, err, "./a:TestThroughAHelper skips under -short but is not in the Makefile's LONG_TESTS")
	require.ErrorContains(t, err, "LONG_TESTS names ./a:TestShort, which does not skip under -short")
	require.ErrorContains(t, err, "LONG_TESTS names ./b:TestGone, which does not exist")
	require.NotContains(t, err.Error(), "TestListed")
}

// checkLongTests compares the LONG_TESTS of root's Makefile with the tests
// under root that skip under -short, and returns every difference.
func checkLongTests(root string) error {
	listed, err := makefileLongTests(filepath.Join(root, "Makefile"))
	if err != nil {
		return err
	}
	tests, long, err := shortSkippingTests(root)
	if err != nil {
		return err
	}
	var errs []string
	for _, name := range long {
		if !slices.Contains(listed, name) {
			errs = append(errs, name+" skips under -short but is not in the Makefile's LONG_TESTS: make test-long would never run it")
		}
	}
	for _, name := range listed {
		switch {
		case !slices.Contains(tests, name):
			errs = append(errs, "LONG_TESTS names "+name+", which does not exist")
		case !slices.Contains(long, name):
			errs = append(errs, "LONG_TESTS names "+name+", which does not skip under -short (make test runs it already)")
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// makefileLongTests returns the entries of the Makefile's LONG_TESTS
// variable ("./package:TestName"), one a line, continued by backslashes.
func makefileLongTests(path string) ([]string, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the repository's own Makefile.
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !in {
			name, _, ok := strings.Cut(line, ":=")
			if !ok || strings.TrimSpace(name) != "LONG_TESTS" {
				continue
			}
			in = true
			line = line[strings.Index(line, ":=")+2:]
		}
		more := strings.HasSuffix(line, `\`)
		out = append(out, strings.Fields(strings.TrimSuffix(line, `\`))...)
		if !more {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !in {
		return nil, fmt.Errorf("%s has no LONG_TESTS", path)
	}
	return out, nil
}

// shortSkippingTests returns every test function under root ("./package:
// TestName", the package's directory relative to root) and those of them
// that call testing.Short(), directly or through a function of their
// package that does.
func shortSkippingTests(root string) (tests, long []string, _ error) {
	byDir := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			return skipNonSource(root, p, name)
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := "./" + filepath.ToSlash(rel)
		byDir[dir] = append(byDir[dir], f)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for dir, files := range byDir {
		funcs := map[string]*ast.FuncDecl{}
		short := map[string]bool{} // functions that call testing.Short()
		for _, f := range files {
			tname := testingName(f)
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || fn.Body == nil {
					continue
				}
				funcs[fn.Name.Name] = fn
				if tname != "" && calls(fn.Body, func(c *ast.CallExpr) bool { return isSel(c.Fun, tname, "Short") }) {
					short[fn.Name.Name] = true
				}
			}
		}
		for name, fn := range funcs {
			if !isTest(name) {
				continue
			}
			tests = append(tests, dir+":"+name)
			if short[name] || calls(fn.Body, func(c *ast.CallExpr) bool {
				id, ok := c.Fun.(*ast.Ident)
				return ok && id.Name != name && short[id.Name] && !isTest(id.Name)
			}) {
				long = append(long, dir+":"+name)
			}
		}
	}
	slices.Sort(tests)
	slices.Sort(long)
	return tests, long, nil
}

// isTest reports whether name is a test function's (TestXxx, not Test_x's
// lower case).
func isTest(name string) bool {
	rest, ok := strings.CutPrefix(name, "Test")
	return ok && (rest == "" || rest[0] < 'a' || rest[0] > 'z')
}

// testingName is the name the file imports package testing under, "" if
// it does not.
func testingName(f *ast.File) string {
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == "testing" {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return "testing"
		}
	}
	return ""
}

// calls reports whether any call under n satisfies match.
func calls(n ast.Node, match func(*ast.CallExpr) bool) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && match(c) {
			found = true
		}
		return !found
	})
	return found
}

// isSel reports whether e is pkg.name.
func isSel(e ast.Expr, pkg, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != name {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == pkg
}
