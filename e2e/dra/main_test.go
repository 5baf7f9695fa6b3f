package dra_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests. Ignored, as in
// the other e2e packages: wait.Forever goroutines (process-lifetime
// singletons of the control plane, such as the klog flusher) and the API
// server watch cache's wake-up timer, which ends within its block timeout
// after the server has stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.Forever"),
		goleak.IgnoreTopFunction("k8s.io/apiserver/pkg/storage/cacher.(*watchCache).waitUntilFreshLocked.func2"),
	)
}
