package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dynmig/dynmig/internal/wiring/cli/clitest"
)

// TestUsageErrors: every flag is checked before the cluster is contacted
// (KUBECONFIG names no file, so a command that got that far would exit 1,
// not 64), and each refusal names its flag in the operator's words.
func TestUsageErrors(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	t.Setenv("DP_DISABLE_HEALTHCHECKS", "")
	t.Setenv("DP_ENABLE_HEALTHCHECKS", "")
	ok := []string{"-node=n1", "-backend=fake"}
	file := filepath.Join(t.TempDir(), "driver")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	clitest.CheckUsage(t, command, []clitest.UsageCase{
		{Name: "no backend", Args: []string{"-node=n1"}, Flags: []string{"backend"}},
		{Name: "unknown backend", Args: []string{"-node=n1", "-backend=cuda"}, Flags: []string{"backend"}},
		{Name: "no node", Args: []string{"-backend=fake"}, Flags: []string{"node"}},
		{Name: "unknown fake model", Args: append(ok, "-fake-gpus=2xA999"), Flags: []string{"fake-gpus"}},
		{Name: "unknown model in a list", Args: append(ok, "-fake-gpus=A30,V100"), Flags: []string{"fake-gpus"}},
		{Name: "too many fake GPUs", Args: append(ok, "-fake-gpus=1000xA30"), Flags: []string{"fake-gpus"}},
		{Name: "negative poll", Args: append(ok, "-device-config-poll=-1s"), Flags: []string{"device-config-poll"}},
		{Name: "bad health check", Args: append(ok, "-disable-healthchecks=13,x"), Flags: []string{"disable-healthchecks"}},
		{Name: "bad enabled health check", Args: append(ok, "-enable-healthchecks=y"), Flags: []string{"enable-healthchecks"}},
		{Name: "empty resource", Args: append(ok, "-resource="), Flags: []string{"resource"}},
		{Name: "no driver root", Args: append(ok, "-driver-root="+filepath.Join(t.TempDir(), "absent")), Flags: []string{"driver-root"}},
		{Name: "driver root is a file", Args: append(ok, "-driver-root="+file), Flags: []string{"driver-root"}},
		{Name: "empty driver root", Args: append(ok, "-driver-root="), Flags: []string{"driver-root"}},
		{Name: "several at once", Args: []string{"-backend=cuda", "-device-config-poll=-2m"}, Flags: []string{"backend", "node", "device-config-poll"}},
		{Name: "unknown flag", Args: append(ok, "-gpus=2"), Flags: []string{"gpus"}},
		{Name: "bad log format", Args: append(ok, "-log-format=xml"), Flags: []string{"log-format"}},
	})
}

func TestHelpSaysWhatItIs(t *testing.T) {
	clitest.CheckHelp(t, command, summary)
}
