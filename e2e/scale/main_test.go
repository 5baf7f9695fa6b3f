package scale_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs a component instead of the tests when the binary is
// re-executed as one (roleEnv, see runChild). Otherwise it runs the tests
// and checks that no goroutine outlives them, ignoring the control
// plane's own process-lifetime goroutines as e2e/lifecycle does.
func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		if err := runChild(role, os.Getenv(childDirEnv)); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.Forever"),
		goleak.IgnoreTopFunction("k8s.io/apiserver/pkg/storage/cacher.(*watchCache).waitUntilFreshLocked.func2"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}
