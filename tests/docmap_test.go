package tests

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's root, seen from this module's directory.
const repoRoot = ".."

// mapHeading starts the section of docs/architecture.md whose tables are
// the map of the tree; the section ends at the next heading of its level.
const mapHeading = "## The map of the tree"

// TestDocMapListsEveryPackage holds docs/architecture.md's map to the tree:
// every directory holding Go files (a package of one of the modules) has a
// row in one of the map's tables, and every row names a directory that
// exists, so a package added, renamed or removed without its row fails here.
func TestDocMapListsEveryPackage(t *testing.T) {
	pkgs, err := goPackageDirs(repoRoot)
	require.NoError(t, err)
	require.NotEmpty(t, pkgs)

	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	require.NoError(t, err)
	rows, err := mapRows(string(doc))
	require.NoError(t, err)

	var errs []string
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			errs = append(errs, fmt.Sprintf("package %s has no row in docs/architecture.md's map (%q)", p, mapHeading))
		}
	}
	for _, r := range rows {
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(r))); err != nil {
			errs = append(errs, fmt.Sprintf("docs/architecture.md's map names %s, which does not exist", r))
		}
	}
	require.Empty(t, errs, strings.Join(errs, "\n"))
}

// goPackageDirs lists, slash-separated and relative to root, every directory
// under root holding a .go file. Test data, installed Node modules, built
// binaries and hidden directories (.git, .bin, .data) hold no package.
func goPackageDirs(root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			return skipNonSource(root, p, name)
		}
		if strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return dirs, nil
}

// skipNonSource is filepath.SkipDir for a directory of root's tree that
// holds no package (test data, installed Node modules, built binaries and
// hidden directories: .git, .bin, .data), nil for any other.
func skipNonSource(root, dir, name string) error {
	if dir != root && (name == "testdata" || name == "node_modules" || name == "bin" || strings.HasPrefix(name, ".")) {
		return filepath.SkipDir
	}
	return nil
}

// codeSpan is one `code` span of a table cell.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// mapRows returns what the first cell of every table row of the map names,
// each `code` span of it: a directory relative to the repository's root.
func mapRows(doc string) ([]string, error) {
	start := strings.Index(doc, "\n"+mapHeading+"\n")
	if start < 0 {
		return nil, fmt.Errorf("no section %q", mapHeading)
	}
	section := doc[start+1+len(mapHeading):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			rows = append(rows, m[1])
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("section %q has no table rows", mapHeading)
	}
	return rows, nil
}

// TestMapRowsFailsOnAMissingRow shows that the map's check catches a
// package without a row: the map with one row taken out misses it.
func TestMapRowsFailsOnAMissingRow(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	require.NoError(t, err)
	const row = "| `pkg/pricing` |"
	require.Contains(t, string(doc), row)
	var kept []string
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, row) {
			kept = append(kept, line)
		}
	}
	rows, err := mapRows(strings.Join(kept, "\n"))
	require.NoError(t, err)
	require.NotContains(t, rows, "pkg/pricing")
	full, err := mapRows(string(doc))
	require.NoError(t, err)
	require.Contains(t, full, "pkg/pricing")
}
