package fakehal_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

func TestCreateCIFailureRollsBackTheGI(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	f := n.FailNth(fakehal.OpCreateCI, 1, realize.ErrNotSupported)
	_, err := n.CreateInstance(ctx, 0, p2g, pl(0, 2))
	checkHWErr(t, err, realize.ErrNotSupported, fakehal.ReturnNotSupported)
	if got := n.Snapshot(); len(got) != 0 {
		t.Errorf("Snapshot = %+v, want the GI rolled back", got)
	}
	calls := map[fakehal.Op]int{fakehal.OpCreateGI: 1, fakehal.OpCreateCI: 1, fakehal.OpDestroyGI: 1}
	for op, want := range calls {
		if got := n.Calls(op); got != want {
			t.Errorf("Calls(%v) = %d, want %d", op, got, want)
		}
	}
	if f.Fired() != 1 {
		t.Errorf("Fired() = %d, want 1", f.Fired())
	}
	if _, err := n.CreateInstance(ctx, 0, p2g, pl(0, 2)); err != nil {
		t.Errorf("create after a one-shot fault: %v", err)
	}
}

func TestFailedRollbackIsJoinedAndLeavesTheGI(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	n.FailNth(fakehal.OpCreateCI, 1, fakehal.ReturnInsufficientResources)
	n.FailNth(fakehal.OpDestroyGI, 1, fakehal.ReturnGPUIsLost)
	_, err := n.CreateInstance(ctx, 0, p3g, pl(4, 4))
	if !errors.Is(err, realize.ErrOccupied) || !errors.Is(err, fakehal.ReturnGPUIsLost) {
		t.Errorf("error %v: want the CI failure (ErrOccupied) joined with the destroy failure (GPU_IS_LOST)", err)
	}
	got := n.Snapshot()
	if len(got) != 1 || got[0].Placement != pl(4, 4) || len(got[0].ComputeInstances) != 0 {
		t.Errorf("Snapshot = %+v, want the bare 3g left behind", got)
	}
}

func TestCrashAfterGI(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	n.CrashAfterGI(2)
	if _, err := n.CreateInstance(ctx, 0, p1g, pl(0, 1)); err != nil {
		t.Fatal(err)
	}
	_, err := n.CreateInstance(ctx, 0, p1g, pl(1, 1))
	if !errors.Is(err, fakehal.ErrCrashed) {
		t.Fatalf("second create: %v, want ErrCrashed", err)
	}
	var he *realize.HardwareError
	if !errors.As(err, &he) || he.Kind != nil {
		t.Errorf("crash error %v: want a HardwareError without Kind", err)
	}
	got, err := n.Instances(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[1].ComputeInstances) != 0 || got[1].Placement != pl(1, 1) {
		t.Errorf("Instances = %+v, want the crashed create's GI without a CI", got)
	}
	if n.Calls(fakehal.OpCreateCI) != 1 {
		t.Errorf("Calls(OpCreateCI) = %d, want 1: the crash happens before the CI", n.Calls(fakehal.OpCreateCI))
	}
}

func TestCrashAfterActing(t *testing.T) {
	tests := []struct {
		name     string
		op       fakehal.Op
		do       func(n *fakehal.Node, inst realize.Instance) error
		wantLeft int // instances left
		wantCIs  int // compute instances left on the first
	}{
		{name: "destroy CI", op: fakehal.OpDestroyCI, do: func(n *fakehal.Node, inst realize.Instance) error {
			return n.DestroyComputeInstance(ctx, 0, inst.GIID, 0)
		}, wantLeft: 1, wantCIs: 0},
		{name: "destroy GI", op: fakehal.OpDestroyGI, do: func(n *fakehal.Node, inst realize.Instance) error {
			_ = n.DestroyComputeInstance(ctx, 0, inst.GIID, 0)
			return n.DestroyGPUInstance(ctx, 0, inst.GIID)
		}, wantLeft: 0},
		{name: "create CI", op: fakehal.OpCreateCI, do: func(n *fakehal.Node, _ realize.Instance) error {
			_, err := n.CreateInstance(ctx, 0, p1g, pl(6, 1))
			return err
		}, wantLeft: 2, wantCIs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, fakehal.Options{})
			inst, err := n.CreateInstance(ctx, 0, p3g, pl(0, 4))
			if err != nil {
				t.Fatal(err)
			}
			n.Inject(fakehal.Fault{Op: tt.op, Nth: 1, Crash: true})
			if err := tt.do(n, inst); !errors.Is(err, fakehal.ErrCrashed) {
				t.Errorf("got %v, want ErrCrashed", err)
			}
			got := n.Snapshot()
			if len(got) != tt.wantLeft {
				t.Fatalf("Snapshot = %+v, want %d instances", got, tt.wantLeft)
			}
			if tt.wantLeft > 0 && len(got[0].ComputeInstances) != tt.wantCIs {
				t.Errorf("first instance has %d CIs, want %d", len(got[0].ComputeInstances), tt.wantCIs)
			}
		})
	}
}

func TestFaultMatching(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "A100")})
	// Calls before injection do not count towards Nth.
	for range 2 {
		if _, err := n.Instances(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	f := n.Inject(fakehal.Fault{Op: fakehal.OpInstances, GPUs: []int{1}, Nth: 2, Err: errors.New("boom")})
	steps := []struct {
		gpu     int
		wantErr bool
	}{
		{gpu: 0}, {gpu: 1}, {gpu: 0}, {gpu: 1, wantErr: true}, {gpu: 1},
	}
	for i, s := range steps {
		_, err := n.Instances(ctx, s.gpu)
		if (err != nil) != s.wantErr {
			t.Errorf("step %d (GPU %d): err %v, want error %v", i, s.gpu, err, s.wantErr)
		}
		var he *realize.HardwareError
		if err != nil && (!errors.As(err, &he) || he.Kind != nil || he.GPU != 1 || he.Op != string(fakehal.OpInstances)) {
			t.Errorf("step %d: error %#v, want a HardwareError on GPU 1 without Kind", i, err)
		}
	}
	if f.Fired() != 1 || f.Matched() != 2 {
		t.Errorf("Fired, Matched = %d, %d; want 1, 2", f.Fired(), f.Matched())
	}
	if got := n.Calls(fakehal.OpInstances); got != 7 {
		t.Errorf("Calls(OpInstances) = %d, want 7", got)
	}
}

func TestEveryCallFaultUntilRemoved(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	f := n.Inject(fakehal.Fault{Op: fakehal.OpProcesses, Err: fakehal.ReturnGPUIsLost})
	for range 3 {
		_, err := n.Processes(ctx, 0)
		if !errors.Is(err, fakehal.ReturnGPUIsLost) {
			t.Fatalf("got %v, want GPU_IS_LOST", err)
		}
	}
	f.Remove()
	f.Remove()
	if _, err := n.Processes(ctx, 0); err != nil {
		t.Errorf("after Remove: %v", err)
	}
	if f.Fired() != 3 {
		t.Errorf("Fired = %d, want 3", f.Fired())
	}
	n.Inject(fakehal.Fault{Op: fakehal.OpDevices, Err: realize.ErrNotSupported})
	n.ClearFaults()
	if _, err := n.Devices(ctx); err != nil {
		t.Errorf("after ClearFaults: %v", err)
	}
}

func TestInjectedErrorKinds(t *testing.T) {
	hw := &realize.HardwareError{Op: "custom", GPU: 0, Kind: realize.ErrInUse}
	tests := []struct {
		name     string
		op       fakehal.Op
		inject   error
		wantKind error // nil: Kind must be nil
		wantIs   error
	}{
		{name: "sentinel", op: fakehal.OpDestroyGI, inject: realize.ErrInUse, wantKind: realize.ErrInUse, wantIs: fakehal.ReturnInUse},
		{name: "return code", op: fakehal.OpDestroyGI, inject: fakehal.ReturnNotFound, wantKind: realize.ErrNotFound, wantIs: fakehal.ReturnNotFound},
		{name: "invalid argument on create", op: fakehal.OpCreateGI, inject: fakehal.ReturnInvalidArgument, wantKind: realize.ErrInvalidPlacement, wantIs: fakehal.ReturnInvalidArgument},
		{name: "invalid argument elsewhere", op: fakehal.OpDestroyGI, inject: fakehal.ReturnInvalidArgument, wantIs: fakehal.ReturnInvalidArgument},
		{name: "hardware error as is", op: fakehal.OpDestroyGI, inject: hw, wantKind: realize.ErrInUse, wantIs: hw},
		{name: "context error", op: fakehal.OpCreateGI, inject: context.DeadlineExceeded, wantIs: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, fakehal.Options{})
			inst, _ := n.AddGPUInstance(0, p1g, pl(0, 1))
			n.FailNth(tt.op, 1, tt.inject)
			var err error
			if tt.op == fakehal.OpCreateGI {
				_, err = n.CreateInstance(ctx, 0, p1g, pl(1, 1))
			} else {
				err = n.DestroyGPUInstance(ctx, 0, inst.GIID)
			}
			var he *realize.HardwareError
			if !errors.As(err, &he) {
				t.Fatalf("got %v, want a HardwareError", err)
			}
			if he.Kind != tt.wantKind {
				t.Errorf("Kind = %v, want %v", he.Kind, tt.wantKind)
			}
			if !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v does not match %v", err, tt.wantIs)
			}
		})
	}
}

// waitMatched polls until the fault has matched want calls. It only waits
// for another goroutine to get there; no timing is asserted.
func waitMatched(t *testing.T, f *fakehal.Injected, want int) {
	t.Helper()
	for f.Matched() < want {
		time.Sleep(time.Millisecond)
	}
}

func TestLatencyDoesNotHoldTheNode(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "A100")})
	f := n.Inject(fakehal.Fault{Op: fakehal.OpCreateGI, GPUs: []int{0}, Latency: time.Hour})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := n.CreateInstance(cctx, 0, p7g, pl(0, 8))
		done <- err
	}()
	waitMatched(t, f, 1)
	// GPU 0's create sleeps; GPU 1 and reads of GPU 0 proceed.
	if _, err := n.CreateInstance(ctx, 1, p7g, pl(0, 8)); err != nil {
		t.Fatalf("create on GPU 1 while GPU 0 sleeps: %v", err)
	}
	if _, err := n.Instances(ctx, 0); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("sleeping create after cancel: %v, want context.Canceled", err)
	}
	if got, _ := n.Instances(ctx, 0); len(got) != 0 {
		t.Errorf("GPU 0 Instances = %+v, want none: the create was cancelled before acting", got)
	}
}

func TestCancelDuringCICreateRollsBack(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	f := n.Inject(fakehal.Fault{Op: fakehal.OpCreateCI, Latency: time.Hour})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := n.CreateInstance(cctx, 0, p4g, pl(0, 4))
		done <- err
	}()
	waitMatched(t, f, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if got := n.Snapshot(); len(got) != 0 {
		t.Errorf("Snapshot = %+v, want the GI rolled back despite the cancelled ctx", got)
	}
}

func TestDoneContextIsNotACall(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := n.CreateInstance(cctx, 0, p1g, pl(0, 1))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if n.Calls(fakehal.OpCreateGI) != 0 || len(n.Snapshot()) != 0 {
		t.Errorf("a call with a done ctx reached the hardware")
	}
}

// TestConcurrentUse hammers every GPU from several goroutines; run with
// -race. Each goroutine owns one GPU's placements so outcomes are known.
func TestConcurrentUse(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(4, "A100")})
	var wg sync.WaitGroup
	for gpu := range 4 {
		for _, start := range []uint32{0, 2, 4} {
			wg.Go(func() {
				for range 20 {
					inst, err := n.CreateInstance(ctx, gpu, p2g, pl(start, 2))
					if err != nil {
						t.Errorf("GPU %d create at %d: %v", gpu, start, err)
						return
					}
					if _, err := n.Processes(ctx, gpu); err != nil {
						t.Error(err)
					}
					if _, err := n.Instances(ctx, gpu); err != nil {
						t.Error(err)
					}
					if err := n.DestroyComputeInstance(ctx, gpu, inst.GIID, inst.ComputeInstances[0].ID); err != nil {
						t.Error(err)
					}
					if err := n.DestroyGPUInstance(ctx, gpu, inst.GIID); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := n.Calls(fakehal.OpCreateGI); got != 4*3*20 {
		t.Errorf("Calls(OpCreateGI) = %d, want %d", got, 4*3*20)
	}
}

func TestConcurrentCreatesOnOneRange(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			// Alternate two overlapping profiles: only one create can win.
			prof, at := p7g, pl(0, 8)
			if i%2 == 1 {
				prof, at = p3g, pl(4, 4)
			}
			_, errs[i] = n.CreateInstance(ctx, 0, prof, at)
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, realize.ErrOccupied):
			t.Errorf("create %d: %v, want nil or ErrOccupied", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d creates won, want exactly 1", won)
	}
}

func TestLingeringGIListing(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "H100")})
	inst, err := n.CreateInstance(ctx, 0, p3g, pl(0, 4))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.DestroyComputeInstance(ctx, 0, inst.GIID, 0); err != nil {
		t.Fatal(err)
	}
	n.Inject(fakehal.Fault{Op: fakehal.OpDestroyGI, Nth: 1, Linger: 2})
	if err := n.DestroyGPUInstance(ctx, 0, inst.GIID); err != nil {
		t.Fatalf("destroy with a lingering listing: %v, want success", err)
	}
	if got := n.Snapshot(); len(got) != 0 {
		t.Errorf("Snapshot = %+v, want the hardware empty", got)
	}
	// The range is free again, although listings still show the ghost.
	if _, err := n.CreateInstance(ctx, 0, p2g, pl(0, 2)); err != nil {
		t.Fatalf("create on the freed range: %v", err)
	}
	err = n.DestroyGPUInstance(ctx, 0, inst.GIID)
	checkHWErr(t, err, realize.ErrNotFound, fakehal.ReturnNotFound)
	for i, want := range []int{2, 2, 1} {
		got, err := n.Instances(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("listing %d: %d instances, want %d", i, len(got), want)
		}
	}
	if got, _ := n.Instances(ctx, 1); len(got) != 0 {
		t.Errorf("GPU 1 lists %d instances, want 0", len(got))
	}
}
