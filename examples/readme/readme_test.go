// The Go snippets of README.md and docs/*.md are compiled here. If you
// rewrite a ```go block of one of them, make the same change to its region
// in snippets.go (between
// "// readme:begin NAME" and "// readme:end"), so that it still compiles,
// and run go test ./examples/readme: it fails, printing both texts, when a
// block and its region differ. A new block needs a new region; a removed
// block, removing its region.
package readme_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// markdownFiles are the repository's user documentation: README.md and
// every file of docs/, relative to this package.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md: the path is wrong")
	}
	return append([]string{"../../README.md"}, docs...)
}

// goBlocks returns the bodies of the ```go fenced blocks of markdown.
func goBlocks(t *testing.T, path string) []string {
	t.Helper()
	var blocks []string
	var cur []string
	in := false
	for _, line := range readLines(t, path) {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, normalise(cur))
		case in:
			cur = append(cur, line)
		}
	}
	if in {
		t.Fatalf("%s: a ```go block is not closed", path)
	}
	return blocks
}

// regions returns the readme regions of a Go file by name.
func regions(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var name string
	var cur []string
	for i, line := range readLines(t, path) {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "// readme:begin "):
			if name != "" {
				t.Fatalf("%s:%d: region %q begins inside region %q", path, i+1, trimmed, name)
			}
			name, cur = strings.TrimPrefix(trimmed, "// readme:begin "), nil
		case trimmed == "// readme:end":
			if name == "" {
				t.Fatalf("%s:%d: readme:end outside a region", path, i+1)
			}
			out[name] = normalise(cur)
			name = ""
		case name != "":
			cur = append(cur, line)
		}
	}
	if name != "" {
		t.Fatalf("%s: region %q is not closed", path, name)
	}
	return out
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, strings.TrimRight(sc.Text(), " \t"))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// normalise drops leading and trailing blank lines and the indentation
// (tabs) common to every other line.
func normalise(lines []string) string {
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	indent := -1
	for _, l := range lines {
		if l == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if l != "" {
			out[i] = l[indent:]
		}
	}
	return strings.Join(out, "\n")
}

func TestREADMESnippets(t *testing.T) {
	regs := regions(t, "snippets.go")
	used := map[string]bool{}
	n := 0
	for _, path := range markdownFiles(t) {
		for i, b := range goBlocks(t, path) {
			n++
			name, ok := find(regs, b)
			if !ok {
				t.Errorf("%s ```go block %d is not a region of snippets.go:\n%s\n%s", path, i+1, b, closest(regs, b))
				continue
			}
			used[name] = true
		}
	}
	if n == 0 || len(regs) == 0 {
		t.Fatalf("found %d ```go blocks and %d regions; the paths or markers are wrong", n, len(regs))
	}
	for name := range regs {
		if !used[name] {
			t.Errorf("region %q of snippets.go is in no ```go block of README.md or docs/:\n%s", name, regs[name])
		}
	}
}

func find(regs map[string]string, block string) (string, bool) {
	for name, r := range regs {
		if r == block {
			return name, true
		}
	}
	return "", false
}

// closest shows the region that starts with the block's first line, if
// any, for comparison.
func closest(regs map[string]string, block string) string {
	first, _, _ := strings.Cut(block, "\n")
	for name, r := range regs {
		if rf, _, _ := strings.Cut(r, "\n"); rf == first {
			return fmt.Sprintf("region %q starts the same way:\n%s", name, r)
		}
	}
	return "no region starts with the same line"
}

// TestLifecycleExcerpt: the block of docs/concepts.md after the
// "lifecycle excerpt" marker is copied from the walk-through's output, not
// edited by hand: each of its lines is a line of the default golden file.
func TestLifecycleExcerpt(t *testing.T) {
	golden := map[string]bool{}
	for _, l := range readLines(t, "../lifecycle/testdata/default.golden") {
		golden[l] = true
	}
	lines := readLines(t, conceptsDoc)
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "<!-- lifecycle excerpt") {
			start = i
		}
	}
	if start < 0 || start+1 >= len(lines) || lines[start+1] != "```" {
		t.Fatal(conceptsDoc + ": no ``` block right after the lifecycle excerpt marker")
	}
	n := 0
	for _, l := range lines[start+2:] {
		if l == "```" {
			break
		}
		n++
		if !golden[l] {
			t.Errorf("%s: excerpt line is not in the lifecycle output:\n%s", conceptsDoc, l)
		}
	}
	if n == 0 {
		t.Error(conceptsDoc + ": the lifecycle excerpt is empty")
	}
}

// conceptsDoc holds the lifecycle excerpt.
const conceptsDoc = "../../docs/concepts.md"
