package tests

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksResolve checks every relative link of README.md, docs/*.md and
// the READMEs of deploy/k8s and sim:
// the file it names exists and, for a Markdown file, so does the heading
// its #fragment names.
func TestDocLinksResolve(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	files = append([]string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "deploy", "k8s", "README.md"), filepath.Join(repoRoot, "sim", "README.md")}, files...)

	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := anchors[p]; ok {
			return a, nil
		}
		a, err := mdAnchors(p)
		anchors[p] = a
		return a, err
	}

	var errs []string
	for _, f := range files {
		lines, err := proseLines(f)
		require.NoError(t, err)
		name, _ := filepath.Rel(repoRoot, f)
		for _, l := range lines {
			for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				p := f
				if file != "" {
					p = filepath.Join(filepath.Dir(f), filepath.FromSlash(file))
				}
				if _, err := os.Stat(p); err != nil {
					errs = append(errs, fmt.Sprintf("%s:%d: %s: no such file", name, l.n, target))
					continue
				}
				if frag == "" || path.Ext(p) != ".md" {
					continue
				}
				a, err := anchorsOf(filepath.Clean(p))
				require.NoError(t, err)
				if !a[frag] {
					errs = append(errs, fmt.Sprintf("%s:%d: %s: no heading with that anchor", name, l.n, target))
				}
			}
		}
	}
	require.Empty(t, errs, strings.Join(errs, "\n"))
}

// line is a line of a Markdown file outside its code blocks.
type line struct {
	n    int
	text string
}

// proseLines returns the lines of a Markdown file outside fenced code
// blocks, whose "# comment" lines are no headings and whose "](" no links.
func proseLines(p string) ([]line, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []line
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(text), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line{n, text})
		}
	}
	return lines, sc.Err()
}

// mdAnchors returns the anchors GitHub gives the headings of a Markdown
// file: lower case, punctuation dropped, spaces as hyphens, and -1, -2… on
// a repeated one.
func mdAnchors(p string) (map[string]bool, error) {
	lines, err := proseLines(p)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	count := map[string]int{}
	for _, l := range lines {
		heading := strings.TrimLeft(l.text, "#")
		if len(heading) == len(l.text) || !strings.HasPrefix(heading, " ") {
			continue
		}
		a := slug(strings.TrimSpace(heading))
		if n := count[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		count[a]++
	}
	return anchors, nil
}

// slug is GitHub's anchor of a heading's text.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
