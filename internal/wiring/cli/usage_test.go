package cli_test

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/dynmig/dynmig/internal/wiring/cli"
)

func TestUsageChecks(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		name string
		err  error
		want string // the message, for the operator
	}{
		{"required, given", cli.Required("node", "n1", "why"), ""},
		{"required, missing", cli.Required("node", "", "this node's name"), "-node is required: this node's name"},
		{"duration zero", cli.NotNegative("lock-timeout", 0), ""},
		{"duration negative", cli.NotNegative("lock-timeout", -time.Second), "-lock-timeout=-1s: must not be negative"},
		{"with cause", &cli.FlagError{Flag: "backend", Value: "x", Reason: "unknown", Err: cause}, "-backend=x: unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				if tt.err != nil {
					t.Fatalf("refused: %v", tt.err)
				}
				return
			}
			if !errors.Is(tt.err, cli.ErrFlag) || !cli.IsUsage(tt.err) {
				t.Errorf("%v does not match ErrFlag", tt.err)
			}
			var fe *cli.FlagError
			if !errors.As(tt.err, &fe) || tt.err.Error() != tt.want {
				t.Errorf("message %q, want %q", tt.err, tt.want)
			}
		})
	}
	if err := (&cli.FlagError{Flag: "b", Err: cause}); !errors.Is(err, cause) {
		t.Error("a FlagError does not match its cause")
	}
}

// TestReportUsage: each joined error on its own line, once, after the
// binary's name, then the pointer to -h; exit 64.
func TestReportUsage(t *testing.T) {
	a := cli.Required("node", "", "a name")
	b := cli.NotNegative("poll", -time.Minute)
	var w strings.Builder
	code := cli.ReportUsage(&w, "bin", errors.Join(a, nil, errors.Join(b, a)))
	want := "bin: -node is required: a name\nbin: -poll=-1m0s: must not be negative\nRun bin -h for its flags.\n"
	if code != cli.ExitUsage || w.String() != want {
		t.Errorf("ReportUsage = %d\n%s\nwant 64\n%s", code, w.String(), want)
	}
}

func TestSetUsageOpensWithTheSummary(t *testing.T) {
	fs := flag.NewFlagSet("bin", flag.ContinueOnError)
	fs.String("node", "", "the node")
	cli.SetUsage(fs, "bin is a thing.")
	var w strings.Builder
	if code, stop := cli.Parse(fs, []string{"-h"}, &w); code != cli.ExitOK || !stop {
		t.Fatalf("Parse(-h) = %d, %v", code, stop)
	}
	if !strings.HasPrefix(w.String(), "bin is a thing.\n") || !strings.Contains(w.String(), "-node") {
		t.Errorf("usage:\n%s", w.String())
	}
}
