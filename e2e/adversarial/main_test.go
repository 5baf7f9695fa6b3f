package adversarial_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: the harness's
// components, the device plugin, the schedulers (kube-scheduler, the
// extender, the HTTP front), the hardware monitor and the partition all
// stop and wait for their goroutines. Ignored, as in the other e2e
// packages, are the control plane's own process-lifetime goroutines
// (wait.Forever, and klog's flush daemon, which kube-scheduler's app.Setup
// starts once per process, as in e2e/plugin) and the watch cache's
// wake-up timer, which ends within 3 s of the API server stopping.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.Forever"),
		goleak.IgnoreTopFunction("k8s.io/apiserver/pkg/storage/cacher.(*watchCache).waitUntilFreshLocked.func2"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}
