package realizetest_test

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
)

func plain(n *fakehal.Node) realize.Realizer { return n }

// fakehal follows the model on every grid: 4 slots (A30, with its
// exclusive media engines), 8 (A100, H100) and 12 (RTX PRO 6000, +me.all).
func TestStateMachineFakehal(t *testing.T) {
	for _, model := range []string{"A30", "A100-SXM4-40GB", "H100-SXM5-80GB", "RTX PRO 6000"} {
		t.Run(model, func(t *testing.T) {
			realizetest.TestStateMachine(t, backend(plain, model))
		})
	}
}

// recorder is a rapid.TB that records a failure instead of failing the
// test, so that a mutant's failure can be required.
type recorder struct {
	mu     sync.Mutex
	failed bool
	log    strings.Builder
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return "mutant" }
func (r *recorder) Logf(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.log, f+"\n", a...)
}
func (r *recorder) Log(a ...any)             { r.Logf("%s", fmt.Sprint(a...)) }
func (r *recorder) Skipf(f string, a ...any) { runtime.Goexit() }
func (r *recorder) Skip(a ...any)            { runtime.Goexit() }
func (r *recorder) SkipNow()                 { runtime.Goexit() }
func (r *recorder) Errorf(f string, a ...any) {
	r.Logf(f, a...)
	r.Fail()
}
func (r *recorder) Error(a ...any)            { r.Errorf("%s", fmt.Sprint(a...)) }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }
func (r *recorder) Fatal(a ...any)            { r.Error(a...); runtime.Goexit() }
func (r *recorder) FailNow()                  { r.Fail(); runtime.Goexit() }
func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// failsUnderRapid runs prop under rapid.Check without failing t, no fail
// file written and shrinking kept short, and reports whether it failed.
func failsUnderRapid(t *testing.T, prop func(*rapid.T)) (bool, string) {
	t.Helper()
	for name, v := range map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": "50ms"} {
		old := flag.Lookup(name).Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rapid.Check(r, prop)
	}()
	<-done
	return r.Failed(), r.log.String()
}

// Each mutant breaks one NVML rule; the state machine must catch it.
func TestStateMachineMutants(t *testing.T) {
	mutants := map[string]func(*mutant){
		"creates elsewhere":             func(m *mutant) { m.anyPlacement = true },
		"hides bare GPU instances":      func(m *mutant) { m.hideBareGIs = true },
		"destroys in-use GPU instances": func(m *mutant) { m.forceDestroy = true },
		"unpublished as occupied":       func(m *mutant) { m.occupiedKind = true },
		"renames MIG devices":           func(m *mutant) { m.renameUUIDs = true },
		"reports no processes":          func(m *mutant) { m.blindProcesses = true },
		"destroying nothing succeeds":   func(m *mutant) { m.idempotentGone = true },
		"bare sentinels":                func(m *mutant) { m.plainErrors = true },
	}
	for name, set := range mutants {
		t.Run(name, func(t *testing.T) {
			wrap := func(n *fakehal.Node) realize.Realizer {
				m := &mutant{Node: n}
				set(m)
				return m
			}
			if failed, _ := failsUnderRapid(t, realizetest.MachineProperty(backend(wrap, "A100-SXM4-40GB"))); !failed {
				t.Fatal("the state machine passed a broken backend")
			}
		})
	}
}
