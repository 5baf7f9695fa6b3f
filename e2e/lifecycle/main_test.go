package lifecycle_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: every component the
// harness starts (API server, etcd, scheduler, extender, fake kubelet,
// device plugin, front proxy) stops and waits for its goroutines. Two kinds
// are ignored, both the control plane's own:
//
//   - goroutines running wait.Forever: process-lifetime singletons by
//     design, such as the klog flusher the API server's healthz "log"
//     check starts once per process;
//   - the API server watch cache's wake-up timer
//     (watchCache.waitUntilFreshLocked), which a request for a
//     resourceVersion newer than the cache leaves behind and which ends
//     within the cache's block timeout (3 s) after the server has stopped;
//   - klog's flush daemon, which kube-scheduler's setup (app.Setup, for
//     the framework plugin's scheduler) starts once per process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.Forever"),
		goleak.IgnoreTopFunction("k8s.io/apiserver/pkg/storage/cacher.(*watchCache).waitUntilFreshLocked.func2"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}
