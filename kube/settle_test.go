package kube_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// informerTest runs f in a synctest bubble, where an informer's retry
// backoffs (seconds, with jitter) pass on the bubble's fake clock, so a
// test's length and outcome do not depend on the machine's load.
//
// apimachinery throttles utilruntime.HandleError, which the reflector calls
// on every failed list or watch, with a global that remembers the
// wall-clock time of the last error. The bubble's clock starts in 2000, so
// that throttle would sleep for decades of bubble time; the bubble keeps
// only the handlers that log. This mutates a global: tests in this package
// do not run in parallel.
func informerTest(t *testing.T, f func(t *testing.T)) {
	saved := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{
		func(ctx context.Context, err error, msg string, kv ...any) {
			t.Logf("client-go: %s: %v %v", msg, err, kv)
		},
	}
	defer func() { utilruntime.ErrorHandlers = saved }()
	synctest.Test(t, f)
}

// settle waits, inside a synctest bubble, until cond holds. Before each
// check it lets every goroutine of the bubble run until blocked; between
// checks it advances the bubble's fake clock. The bound is bubble time, not
// wall-clock time: it only stops a test that would otherwise spin.
func settle(t *testing.T, cond func() bool) {
	t.Helper()
	for start := time.Now(); time.Since(start) < time.Hour; time.Sleep(10 * time.Millisecond) {
		synctest.Wait()
		if cond() {
			return
		}
	}
	t.Fatal("condition never held within an hour of bubble time")
}

// received reports whether ch has a value ready, consuming it; a
// condition for [settle].
func received(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}
