package main

import (
	"path/filepath"
	"testing"

	"github.com/dynmig/dynmig/internal/wiring/cli/clitest"
)

// TestUsageErrors: every flag is checked before the cluster is contacted
// (KUBECONFIG names no file, so a command that got that far would exit 1,
// not 64), and each refusal names its flag in the operator's words.
func TestUsageErrors(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	clitest.CheckUsage(t, command, []clitest.UsageCase{
		{Name: "negative lock timeout", Args: []string{"-lock-timeout=-2m"}, Flags: []string{"lock-timeout"}},
		{Name: "empty address", Args: []string{"-addr="}, Flags: []string{"addr"}},
		{Name: "empty resource", Args: []string{"-resource="}, Flags: []string{"resource"}},
		{Name: "not a duration", Args: []string{"-lock-timeout=120"}, Flags: []string{"lock-timeout"}},
		{Name: "unknown flag", Args: []string{"-node=n1"}, Flags: []string{"node"}},
		{Name: "negative verbosity", Args: []string{"-v=-1"}, Flags: []string{"v"}},
	})
}

func TestHelpSaysWhatItIs(t *testing.T) {
	clitest.CheckHelp(t, command, summary)
}
