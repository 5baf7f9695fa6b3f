package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/kube"
)

// lockTimeout is the shortened lock timeout of TestLockEndRetries: long
// enough that even a loaded machine reports the waiter unschedulable
// before the lock ends (a waiter bound first would never be).
const lockTimeout = 10 * time.Second

// TestLockEndRetries runs the real kube-scheduler with DynMIG, its lock
// timeout shortened, on a quiet cluster (no node heartbeats, no other
// pods): a MIG pod bound to the node whose containers the kubelet never
// starts (so it is never realized) locks the node, and a second MIG pod,
// which the device plugin could not confuse with it, is reported
// unschedulable. When the lock times out no cluster event happens, yet the
// plugin moves the waiter back to the active queue and it is bound within
// seconds, not after kube-scheduler's 5-minute periodic retry.
func TestLockEndRetries(t *testing.T) {
	e := startEnvConfig(t, false, shortLockConfig(t))
	e.waitRegistered()
	one := func(devices string) corev1.ResourceList {
		return corev1.ResourceList{kube.ResourceGPU: resource.MustParse(devices), kube.ResourceGPUMem: resource.MustParse("4000")}
	}
	e.migPod("stuck", one("1"))
	e.wait("stuck bound", 20*time.Millisecond, e.bound("stuck"))
	bound := time.Now()
	e.migPod("waiter", one("2"))
	e.waitUnschedulable("waiter")

	// Well past the lock's end, well before the periodic retry.
	ctx, cancel := context.WithTimeout(e.ctx, lockTimeout+time.Minute)
	defer cancel()
	if err := cluster.WaitFor(ctx, 20*time.Millisecond, "waiter bound after the lock ended", e.bound("waiter")); err != nil {
		t.Fatal(err)
	}
	t.Logf("waiter bound %v after stuck was bound (lock timeout %v)", time.Since(bound), lockTimeout)
}

// shortLockConfig writes the shipped plugin scheduler configuration with
// lockTimeout set to lockTimeout and returns its path.
func shortLockConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "schedplugin", "deploy", "kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const shipped = "lockTimeout: 2m\n"
	if strings.Count(string(data), shipped) != 1 {
		t.Fatalf("the shipped configuration does not set %q once", shipped)
	}
	file := filepath.Join(t.TempDir(), "kube-scheduler-config.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(string(data), shipped, "lockTimeout: "+lockTimeout.String()+"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
