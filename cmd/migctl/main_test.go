package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// result is what one in-process migctl run produced.
type result struct {
	code           int
	stdout, stderr string
}

// migctl runs the command line in process with stdin as standard input.
func migctl(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(stdin), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// check compares the exit code and that each want string appears in the
// output it names.
func (r result) check(t *testing.T, code int, inStdout, inStderr []string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code = %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range inStdout {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
	for _, w := range inStderr {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
}

func testdata(name string) string { return filepath.Join("testdata", name) }

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(testdata(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeTemp writes content to a file in a test directory.
func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The GPUs of testdata/node.json.
const (
	gpu0 = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
	gpu1 = "GPU-2c4e6a8b-1d3f-4a5b-8c7d-9e0f1a2b3c4d"
)

// podJSON is a MIG pod in Kubernetes JSON, bound to node when it is set,
// with the given allocation entries (none: no annotation) and one container
// per memory demand (0: the whole GPU).
func podJSON(name, node, phase string, allocs []reservation.Allocation, memMiB ...int) map[string]any {
	ann := map[string]string{"nvidia.com/vgpu-mode": "mig"}
	if allocs != nil {
		ann[reservation.AnnotationKey] = reservation.EncodeString(allocs)
	}
	var containers []any
	for i, m := range memMiB {
		lim := map[string]string{"nvidia.com/gpu": "1"}
		if m > 0 {
			lim["nvidia.com/gpumem"] = fmt.Sprint(m)
		}
		containers = append(containers, map[string]any{"name": fmt.Sprint("c", i), "image": "busybox",
			"resources": map[string]any{"limits": lim}})
	}
	spec := map[string]any{"containers": containers}
	if node != "" {
		spec["nodeName"] = node
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "test", "uid": "uid-" + name, "annotations": ann},
		"spec":     spec, "status": map[string]any{"phase": phase}}
}

func listJSON(t *testing.T, items ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func entry(gpu, profile string, start, size uint32) reservation.Allocation {
	return reservation.Allocation{GPUUUID: gpu, Profile: profile, Placement: capability.Placement{Start: start, Size: size}}
}

// cliCase is one migctl invocation and what it must print: exit code
// and substrings of standard output and standard error.
type cliCase struct {
	name     string
	args     []string
	stdin    string
	code     int
	inStdout []string
	inStderr []string
}

// runCases runs each case as a subtest.
func runCases(t *testing.T, tests []cliCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			migctl(t, tt.stdin, tt.args...).check(t, tt.code, tt.inStdout, tt.inStderr)
		})
	}
}

func TestUsage(t *testing.T) {
	tests := []cliCase{
		{name: "no arguments", args: nil, code: exitUsage, inStderr: []string{"usage: migctl <command>"}},
		{name: "help", args: []string{"help"}, code: exitOK, inStdout: []string{"commands:", "simulate", "exit codes"}},
		{name: "--help", args: []string{"--help"}, code: exitOK, inStdout: []string{"convert-legacy"}},
		{name: "help for a command", args: []string{"help", "place"}, code: exitOK, inStdout: []string{"usage: migctl place", "flags:", "-node-name string"}},
		{name: "help for an unknown command", args: []string{"help", "frobnicate"}, code: exitUsage, inStderr: []string{`unknown command "frobnicate"`}},
		{name: "version", args: []string{"version"}, code: exitOK, inStdout: []string{"migctl github.com/dynmig/dynmig ", "(revision "}},
		{name: "-version", args: []string{"-version"}, code: exitOK, inStdout: []string{"migctl github.com/dynmig/dynmig "}},
		{name: "unknown command", args: []string{"frobnicate"}, code: exitUsage, inStderr: []string{`unknown command "frobnicate"`}},
		{name: "unknown flag", args: []string{"status", "--frobnicate"}, code: exitUsage, inStderr: []string{"frobnicate", "usage: migctl status"}},
		{name: "stray argument", args: []string{"defaults", "extra"}, code: exitUsage, inStderr: []string{`unexpected argument "extra"`}},
	}
	runCases(t, tests)
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			for _, flag := range []string{"--help", "-h"} {
				r := migctl(t, "", c.name, flag)
				r.check(t, exitOK, []string{"usage: migctl " + c.name, "exit codes"}, nil)
				if r.stderr != "" {
					t.Errorf("%s %s wrote to stderr: %s", c.name, flag, r.stderr)
				}
			}
			// "migctl help CMD" prints the same text, flags included.
			if got, want := migctl(t, "", "help", c.name).stdout, migctl(t, "", c.name, "--help").stdout; got != want {
				t.Errorf("migctl help %s:\n%s\nwant (as %s --help):\n%s", c.name, got, c.name, want)
			}
		})
	}
}

func TestParseInterleaved(t *testing.T) {
	r := migctl(t, "", "validate", testdata("spec-allocation.json"), "--node", testdata("node.json"))
	r.check(t, exitOK, []string{"valid: 1 entry, 1 realized"}, nil)

	// "--" ends the flags: a file named like a flag can still be read.
	r = migctl(t, "", "validate", "--", "--node")
	r.check(t, exitInvalid, nil, []string{"--node"})
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		migctl(t, "", arg).check(t, exitOK, []string{"migctl ", "revision"}, nil)
	}
}
