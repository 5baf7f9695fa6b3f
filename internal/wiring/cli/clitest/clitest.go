// Package clitest helps the binaries' tests reach the operations server
// of package cli, and check their usage errors and -h text.
package clitest

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// Scrape GETs path from the server at addr and returns the status code and
// body; a transport error fails the test.
func Scrape(t testing.TB, addr net.Addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// Command is a binary's main logic: it runs with args and the two output
// streams and returns the exit code.
type Command func(args []string, stdout, stderr io.Writer) int

// UsageCase is a command line a binary must refuse as a usage error.
type UsageCase struct {
	Name string
	Args []string
	// Flags are the flags (without the dash) the message must name.
	Flags []string
}

// goIdentifier matches a qualified Go identifier such as Config.Node or
// Options.GPUs[0]: words for programmers, not for the operator.
var goIdentifier = regexp.MustCompile(`\b[A-Z]\w*\.[A-Z]\w*|\[\d+\]`)

// CheckUsage runs cmd with each case's arguments and fails unless it exits
// with code 64 (a usage error), having named each of the case's flags on
// stderr, written nothing on stdout, and used no Go identifier.
func CheckUsage(t *testing.T, cmd Command, cases []UsageCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := cmd(c.Args, &stdout, &stderr)
			msg := stderr.String()
			if code != 64 {
				t.Errorf("%q: exit %d, want 64; stderr:\n%s", c.Args, code, msg)
			}
			for _, f := range c.Flags {
				if !strings.Contains(msg, "-"+f) {
					t.Errorf("%q: the message does not name -%s:\n%s", c.Args, f, msg)
				}
			}
			if id := goIdentifier.FindString(msg); id != "" {
				t.Errorf("%q: the message names the Go identifier %q:\n%s", c.Args, id, msg)
			}
			if stdout.Len() > 0 {
				t.Errorf("%q: wrote to stdout:\n%s", c.Args, stdout.String())
			}
		})
	}
}

// CheckHelp runs cmd with -h and fails unless it exits 0 with a usage text
// that opens with summary and lists the flags.
func CheckHelp(t *testing.T, cmd Command, summary string) {
	t.Helper()
	var stdout, stderr strings.Builder
	if code := cmd([]string{"-h"}, &stdout, &stderr); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
	out := stdout.String() + stderr.String()
	first, _, _ := strings.Cut(out, "\n")
	if first != summary || !strings.HasSuffix(summary, ".") || strings.Count(summary, ". ") > 0 {
		t.Errorf("-h opens with %q, want the one sentence %q", first, summary)
	}
	if !strings.Contains(out, "-version") {
		t.Errorf("-h lists no flags:\n%s", out)
	}
}
