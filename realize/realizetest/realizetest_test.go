package realizetest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mutant wraps a correct fake and breaks one rule of the contract.
type mutant struct {
	*fakehal.Node
	anyPlacement    bool // create at the first free placement, not the one asked
	plainErrors     bool // return bare sentinels instead of HardwareErrors
	hideBareGIs     bool // Instances leaves out GIs without compute instances
	forceDestroy    bool // destroying a GI destroys its compute instances first
	occupiedKind    bool // report unpublished placements as occupied
	renameUUIDs     bool // MIG UUIDs change between listings
	ignoreCtx       bool // calls ignore their context
	blindProcesses  bool // Processes never reports any
	idempotentGone  bool // destroying a missing GI succeeds
	listsWithoutMIG bool // Instances on a MIG-disabled GPU lists nothing instead of ErrMIGDisabled
	calls           int
}

func (m *mutant) CreateInstance(ctx context.Context, gpu int, p capability.GIProfileIndex, at capability.Placement) (realize.Instance, error) {
	if m.ignoreCtx {
		ctx = context.Background()
	}
	if m.anyPlacement {
		profs, _ := m.Node.GIProfiles(ctx, gpu)
		for _, info := range profs {
			if info.Index != p {
				continue
			}
			for _, try := range info.Placements {
				if inst, err := m.Node.CreateInstance(ctx, gpu, p, try); err == nil {
					return inst, nil
				}
			}
		}
	}
	inst, err := m.Node.CreateInstance(ctx, gpu, p, at)
	return inst, m.mangle(err)
}

func (m *mutant) mangle(err error) error {
	var he *realize.HardwareError
	if err == nil || !errors.As(err, &he) {
		return err
	}
	if m.occupiedKind && he.Kind == realize.ErrInvalidPlacement {
		c := *he
		c.Kind = realize.ErrOccupied
		return &c
	}
	if m.plainErrors && he.Kind != nil {
		return fmt.Errorf("mutant: %w", he.Kind)
	}
	return err
}

func (m *mutant) Instances(ctx context.Context, gpu int) ([]realize.Instance, error) {
	if m.ignoreCtx {
		ctx = context.Background()
	}
	insts, err := m.Node.Instances(ctx, gpu)
	if m.listsWithoutMIG && errors.Is(err, realize.ErrMIGDisabled) {
		return nil, nil
	}
	if m.hideBareGIs {
		insts = slices.DeleteFunc(insts, func(i realize.Instance) bool { return len(i.ComputeInstances) == 0 })
	}
	if m.renameUUIDs {
		m.calls++
		for i := range insts {
			for j := range insts[i].ComputeInstances {
				insts[i].ComputeInstances[j].MIGUUID += fmt.Sprint(m.calls)
			}
		}
	}
	return insts, m.mangle(err)
}

func (m *mutant) DestroyGPUInstance(ctx context.Context, gpu int, gi uint32) error {
	if m.forceDestroy {
		insts, _ := m.Node.Instances(ctx, gpu)
		for _, inst := range insts {
			if inst.GIID == gi {
				for _, ci := range inst.ComputeInstances {
					_ = m.Node.DestroyComputeInstance(ctx, gpu, gi, ci.ID)
				}
			}
		}
	}
	err := m.Node.DestroyGPUInstance(ctx, gpu, gi)
	if m.idempotentGone && errors.Is(err, realize.ErrNotFound) && gpu >= 0 && gpu < m.NumGPUs() {
		return nil
	}
	return m.mangle(err)
}

func (m *mutant) DestroyComputeInstance(ctx context.Context, gpu int, gi, ci uint32) error {
	return m.mangle(m.Node.DestroyComputeInstance(ctx, gpu, gi, ci))
}

func (m *mutant) Processes(ctx context.Context, gpu int) (realize.ProcessReport, error) {
	r, err := m.Node.Processes(ctx, gpu)
	if m.blindProcesses {
		r = realize.ProcessReport{}
	}
	return r, m.mangle(err)
}

func backend(r func(*fakehal.Node) realize.Realizer, model string) func() (realizetest.Backend, error) {
	return func() (realizetest.Backend, error) {
		n, err := fakehal.New(fakehal.Options{GPUs: fakehal.Repeat(2, model)})
		if err != nil {
			return realizetest.Backend{}, err
		}
		if err := n.ForceMIGMode(1, capability.MIGDisabled); err != nil {
			return realizetest.Backend{}, err
		}
		return realizetest.Backend{
			Realizer: r(n),
			StartProcess: func(_ context.Context, gpu int, migUUID string) (func() error, error) {
				pid, err := n.StartProcess(gpu, migUUID)
				return func() error { return n.StopProcess(pid) }, err
			},
		}, nil
	}
}

// failedChecks returns the names of the checks Run reports as failed.
func failedChecks(err error) []string {
	var names []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			var ce *realizetest.CheckError
			if errors.As(e, &ce) {
				names = append(names, ce.Check)
			}
		}
	}
	return names
}

// TestSuiteCatchesBrokenBackends shows that each check can fail: every
// mutant breaks one rule, and the checks that cover the rule report it.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	tests := []struct {
		name       string
		mutant     mutant
		wantFailed []string // each must be among the failed checks
	}{
		{name: "creates anywhere", mutant: mutant{anyPlacement: true}, wantFailed: []string{"CreateEveryPlacement", "ExactPlacement"}},
		{name: "bare sentinel errors", mutant: mutant{plainErrors: true}, wantFailed: []string{"Overlap", "UnpublishedPlacement", "DestroyInUse", "NotFound"}},
		{name: "hides GIs without CIs", mutant: mutant{hideBareGIs: true}, wantFailed: []string{"DestroyInUse"}},
		{name: "destroys GIs with CIs", mutant: mutant{forceDestroy: true}, wantFailed: []string{"DestroyInUse"}},
		{name: "unpublished reported as occupied", mutant: mutant{occupiedKind: true}, wantFailed: []string{"UnpublishedPlacement"}},
		{name: "unstable MIG UUIDs", mutant: mutant{renameUUIDs: true}, wantFailed: []string{"CreateEveryPlacement", "MIGUUIDs"}},
		{name: "ignores context", mutant: mutant{ignoreCtx: true}, wantFailed: []string{"CanceledContext"}},
		{name: "blind to processes", mutant: mutant{blindProcesses: true}, wantFailed: []string{"Processes"}},
		{name: "destroying nothing succeeds", mutant: mutant{idempotentGone: true}, wantFailed: []string{"NotFound"}},
		{name: "lists nothing without MIG", mutant: mutant{listsWithoutMIG: true}, wantFailed: []string{"MIGDisabled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, model := range []string{"A100", "A30", "RTX PRO 6000"} {
				err := realizetest.Run(t.Context(), backend(func(n *fakehal.Node) realize.Realizer {
					m := tt.mutant
					m.Node = n
					return &m
				}, model))
				got := failedChecks(err)
				t.Logf("%s: %v", model, got)
				for _, want := range tt.wantFailed {
					if !slices.Contains(got, want) {
						t.Errorf("%s: failed checks %v, want %s among them", model, got, want)
					}
				}
			}
		})
	}
}

func TestRunPassesACorrectBackend(t *testing.T) {
	for _, model := range []string{"A100", "A30", "RTX PRO 6000", "H200"} {
		err := realizetest.Run(t.Context(), backend(func(n *fakehal.Node) realize.Realizer { return n }, model))
		if err != nil {
			t.Errorf("%s: %v", model, err)
		}
	}
}

func TestRunWithoutOptionalCapabilitiesSkips(t *testing.T) {
	newBackend := func() (realizetest.Backend, error) {
		n, err := fakehal.New(fakehal.Options{})
		return realizetest.Backend{Realizer: n}, err
	}
	if err := realizetest.Run(t.Context(), newBackend); err != nil {
		t.Errorf("Run without StartProcess or a MIG-disabled GPU: %v, want nil (skips)", err)
	}
}

func TestRunNeedsAnIdleGPU(t *testing.T) {
	newBackend := func() (realizetest.Backend, error) {
		n, err := fakehal.New(fakehal.Options{})
		if err != nil {
			return realizetest.Backend{}, err
		}
		_, err = n.AddGPUInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 0, Size: 1})
		return realizetest.Backend{Realizer: n}, err
	}
	err := realizetest.Run(t.Context(), newBackend)
	if got, want := len(failedChecks(err)), len(realizetest.Checks()); got != want {
		t.Errorf("%d checks failed on a busy GPU, want all %d", got, want)
	}
}

// Example runs the suite the way a backend package would in its tests,
// through Run to show the result.
func Example() {
	newBackend := func() (realizetest.Backend, error) {
		n, err := fakehal.New(fakehal.Options{GPUs: []string{"A30"}})
		return realizetest.Backend{Realizer: n}, err
	}
	fmt.Println(realizetest.Run(context.Background(), newBackend))
	// Output:
	// <nil>
}

func ExampleTestRealizer() {
	// In a backend's _test.go file:
	//
	//	func TestConformance(t *testing.T) {
	//		realizetest.TestRealizer(t, func(t *testing.T) realizetest.Backend {
	//			return realizetest.Backend{Realizer: newIdleBackend(t)}
	//		})
	//	}
	for _, c := range realizetest.Checks()[:3] {
		fmt.Println(c.Name)
	}
	// Output:
	// Discovery
	// CreateEveryPlacement
	// ExactPlacement
}

// TestMediaEnginesCheckCanFail: a backend that ignores media engines (a
// fakehal node whose tables have no engine columns) fails MediaEngines on
// the GPUs where engines clash, and only there; the check is skipped where
// no two profiles contend.
func TestMediaEnginesCheckCanFail(t *testing.T) {
	for _, tt := range []struct {
		model string
		want  string // "failed", "passed" or "skipped"
	}{
		{model: "A30", want: "failed"},
		{model: "RTX PRO 6000", want: "failed"},
		{model: "A100", want: "skipped"},
	} {
		m, _ := fakehal.LookupModel(tt.model)
		m.ProfileEngines = nil // the mutation: no engine budget
		var check realizetest.Check
		for _, c := range realizetest.Checks() {
			if c.Name == "MediaEngines" {
				check = c
			}
		}
		for _, mutated := range []bool{false, true} {
			opts := fakehal.Options{GPUs: []string{tt.model}}
			if mutated {
				opts.Models = []fakehal.Model{m}
			}
			n := fakehal.MustNew(opts)
			err := check.Run(t.Context(), realizetest.Backend{Realizer: n})
			got := "passed"
			switch {
			case errors.Is(err, realizetest.ErrSkipped):
				got = "skipped"
			case err != nil:
				got = "failed"
			}
			want := tt.want
			if !mutated && want == "failed" {
				want = "passed"
			}
			if got != want {
				t.Errorf("%s (engines ignored: %v): MediaEngines %s (%v), want %s", tt.model, mutated, got, err, want)
			}
		}
	}
}
