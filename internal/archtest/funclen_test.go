package archtest_test

import (
	"encoding/json"
	"errors"

	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the house limit on a library function's length, from its
// func keyword to its closing brace.
const maxFuncLines = 60

// isLibrary reports whether the package at rel (relative to the module) is
// library code: not a binary, an example, or the test-only systemtest.
func isLibrary(rel string) bool {
	top, _, _ := strings.Cut(rel, "/")
	return top != "cmd" && top != "examples" && top != "systemtest" && rel != "internal/archtest"
}

// funcLength is one function's length.
type funcLength struct {
	name  string // "dir/file.go Func", Func a method's name alone
	lines int
}

// libraryFuncs returns the length of every function in the library
// packages' non-test Go files.
func libraryFuncs(t *testing.T) []funcLength {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Dir,GoFiles,CgoFiles", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var funcs []funcLength
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath        string
			Dir               string
			GoFiles, CgoFiles []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if !isLibrary(rel) {
			continue
		}
		for _, f := range append(p.GoFiles, p.CgoFiles...) {
			funcs = append(funcs, fileFuncs(t, filepath.Join(p.Dir, f), rel+"/"+f)...)
		}
	}
	return funcs
}

// fileFuncs returns the length of each function declared in the file.
func fileFuncs(t *testing.T, path, name string) []funcLength {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []funcLength
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
		out = append(out, funcLength{name: name + " " + fd.Name.Name, lines: n})
	}
	return out
}

// TestFunctionLength: no library function is over maxFuncLines lines.
// Each one over is reported, longest first.
func TestFunctionLength(t *testing.T) {
	var long []funcLength
	for _, f := range libraryFuncs(t) {
		if f.lines > maxFuncLines {
			long = append(long, f)
		}
	}
	slices.SortFunc(long, func(a, b funcLength) int { return b.lines - a.lines })
	for _, f := range long {
		t.Errorf("%s is %d lines, over %d: split it", f.name, f.lines, maxFuncLines)
	}
}
