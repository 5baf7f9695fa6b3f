package readme_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// maxFrontPage is how long README.md may grow: a front page read in five
// minutes; the rest belongs in docs/.
const maxFrontPage = 320

// linkTarget finds the target of an inline markdown link; the link text
// may span lines.
var linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// prose returns path's lines outside fenced code blocks.
func prose(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	in := false
	for _, l := range readLines(t, path) {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, l)
		}
	}
	return out
}

// anchors returns the fragment identifiers GitHub gives path's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(t, path) {
		text, ok := heading(l)
		if !ok {
			continue
		}
		a := slug(text)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func heading(line string) (string, bool) {
	hashes := len(line) - len(strings.TrimLeft(line, "#"))
	if hashes == 0 || hashes > 6 || !strings.HasPrefix(line[hashes:], " ") {
		return "", false
	}
	return strings.TrimSpace(line[hashes:]), true
}

// slug is GitHub's heading anchor: lower case, spaces to hyphens, and
// every character but letters, digits, hyphens and underscores dropped.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// brokenLinks lists the relative links of the markdown file path whose
// file, directory or heading does not exist.
func brokenLinks(t *testing.T, path string) []string {
	t.Helper()
	var broken []string
	text := strings.Join(prose(t, path), "\n")
	for _, m := range linkTarget.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		resolved := path
		if file != "" {
			resolved = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			if _, err := os.Stat(resolved); err != nil {
				broken = append(broken, target+": no such file or directory")
				continue
			}
		}
		if frag != "" && strings.HasSuffix(resolved, ".md") && !anchors(t, resolved)[frag] {
			broken = append(broken, target+": no such heading")
		}
	}
	return broken
}

// TestLinksResolve: every relative link of README.md and docs/*.md names a
// file or directory that exists, and a #fragment into a markdown file
// names one of its headings.
func TestLinksResolve(t *testing.T) {
	for _, path := range markdownFiles(t) {
		for _, b := range brokenLinks(t, path) {
			t.Errorf("%s: broken link %s", path, b)
		}
	}
}

// TestBrokenLinksAreFound: the check itself finds a missing file, a missing
// heading and a missing heading in another file, and accepts the forms that
// resolve.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("other.md", "# Other\n\n## Trust: who owns a MIG instance (`x`)\n\n## Dup\n\n## Dup\n")
	p := write("doc.md", "# Doc\n\n[ok](other.md) [ok](other.md#trust-who-owns-a-mig-instance-x)\n"+
		"[ok](other.md#dup-1) [ok](#doc) [ok](https://example.com/x) [a\nwrapped](other.md)\n"+
		"```\n[not a link](missing.md)\n```\n"+
		"[bad](missing.md) [bad](other.md#nowhere) [bad](#nowhere)\n")
	got := brokenLinks(t, p)
	want := []string{
		"missing.md: no such file or directory",
		"other.md#nowhere: no such heading",
		"#nowhere: no such heading",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("brokenLinks = %q, want %q", got, want)
	}
}

// TestFrontPageIsShort: README.md stays a front page.
func TestFrontPageIsShort(t *testing.T) {
	if n := len(readLines(t, "../../README.md")); n > maxFrontPage {
		t.Errorf("README.md has %d lines, more than %d: move detail to docs/ and link to it", n, maxFrontPage)
	}
}
