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
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	clitest.CheckUsage(t, command, []clitest.UsageCase{
		{Name: "negative lock timeout", Args: []string{"-lock-timeout=-2m"}, Flags: []string{"lock-timeout"}},
		{Name: "empty address", Args: []string{"-addr="}, Flags: []string{"addr"}},
		{Name: "empty resource", Args: []string{"-resource="}, Flags: []string{"resource"}},
		{Name: "not a duration", Args: []string{"-lock-timeout=120"}, Flags: []string{"lock-timeout"}},
		{Name: "zero qps", Args: []string{"-kube-api-qps=0"}, Flags: []string{"kube-api-qps"}},
		{Name: "negative burst", Args: []string{"-kube-api-burst=-1"}, Flags: []string{"kube-api-burst"}},
		{Name: "unknown flag", Args: []string{"-node=n1"}, Flags: []string{"node"}},
		{Name: "negative verbosity", Args: []string{"-v=-1"}, Flags: []string{"v"}},
	})
}

func TestHelpSaysWhatItIs(t *testing.T) {
	clitest.CheckHelp(t, command, summary)
}

// The API client gets kube-scheduler's rate limit by default, not
// client-go's 5 requests a second, and the flags' values otherwise.
func TestAPIRateLimit(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	const file = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(kubeconfig, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		qps   float64
		burst int
	}{{DefaultAPIQPS, DefaultAPIBurst}, {7.5, 9}} {
		cfg, err := restConfig(config{kubeconfig: kubeconfig, qps: tt.qps, burst: tt.burst})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QPS != float32(tt.qps) || cfg.Burst != tt.burst {
			t.Errorf("QPS %v, burst %d; want %v, %d", cfg.QPS, cfg.Burst, tt.qps, tt.burst)
		}
	}
}
