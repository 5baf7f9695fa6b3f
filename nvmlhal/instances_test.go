package nvmlhal_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize"
)

var (
	p1g   = capability.GIProfile1Slice
	p1gME = capability.GIProfile1SliceRev1
	p1gR2 = capability.GIProfile1SliceRev2
	p2g   = capability.GIProfile2Slice
	p3g   = capability.GIProfile3Slice
	p4g   = capability.GIProfile4Slice
	p7g   = capability.GIProfile7Slice
)

func at(start, size uint32) capability.Placement {
	return capability.Placement{Start: start, Size: size}
}

func mustCreate(t *testing.T, b *nvmlhal.Backend, gpu int, p capability.GIProfileIndex, pl capability.Placement) realize.Instance {
	t.Helper()
	inst, err := b.CreateInstance(context.Background(), gpu, p, pl)
	if err != nil {
		t.Fatalf("CreateInstance(%d, %d, %v): %v", gpu, p, pl, err)
	}
	return inst
}

func mustInstances(t *testing.T, b *nvmlhal.Backend, gpu int) []realize.Instance {
	t.Helper()
	insts, err := b.Instances(context.Background(), gpu)
	if err != nil {
		t.Fatalf("Instances(%d): %v", gpu, err)
	}
	return insts
}

func returnCode(err error) nvml.Return {
	var re *nvmlhal.ReturnError
	if errors.As(err, &re) {
		return re.Return
	}
	return nvml.SUCCESS
}

// Every profile at every legal placement: create, list, destroy exactly.
func TestCreateDestroyEveryPlacement(t *testing.T) {
	for _, model := range nvmlmock.Models {
		for _, opts := range []nvmlmock.Options{{}, {CIInfoDevice: true}} {
			name := model.String()
			if opts.CIInfoDevice {
				name += "/CIInfoDevice"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				b, _ := newBackend(t, model, opts)
				infos, err := b.GIProfiles(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				uuids := make(map[string]bool)
				for _, in := range infos {
					for _, pl := range in.Placements {
						inst := mustCreate(t, b, 1, in.Index, pl)
						wantCI, _ := capability.FullCIProfileIndex(in.SliceCount)
						if inst.GPU != 1 || inst.Profile != in.Index || inst.Placement != pl || len(inst.ComputeInstances) != 1 {
							t.Fatalf("created %+v for profile %d at %v", inst, in.Index, pl)
						}
						ci := inst.ComputeInstances[0]
						if ci.Profile != wantCI || ci.SliceCount != in.SliceCount || !strings.HasPrefix(ci.MIGUUID, "MIG-") {
							t.Errorf("compute instance %+v, want profile %d spanning %d slices with a MIG UUID", ci, wantCI, in.SliceCount)
						}
						if uuids[ci.MIGUUID] {
							t.Errorf("MIG UUID %s handed out twice", ci.MIGUUID)
						}
						uuids[ci.MIGUUID] = true
						listed := mustInstances(t, b, 1)
						if len(listed) != 1 || !equalInstance(listed[0], inst) {
							t.Fatalf("Instances = %+v, want [%+v]", listed, inst)
						}
						if err := b.DestroyComputeInstance(ctx, 1, inst.GIID, ci.ID); err != nil {
							t.Fatal(err)
						}
						if err := b.DestroyGPUInstance(ctx, 1, inst.GIID); err != nil {
							t.Fatal(err)
						}
						if left := mustInstances(t, b, 1); len(left) != 0 {
							t.Fatalf("after destroy: %+v", left)
						}
					}
				}
			})
		}
	}
}

func equalInstance(a, b realize.Instance) bool {
	if a.GPU != b.GPU || a.Profile != b.Profile || a.Placement != b.Placement || a.GIID != b.GIID || len(a.ComputeInstances) != len(b.ComputeInstances) {
		return false
	}
	for i := range a.ComputeInstances {
		if a.ComputeInstances[i] != b.ComputeInstances[i] {
			return false
		}
	}
	return true
}

func TestCreateRefusals(t *testing.T) {
	for _, model := range nvmlmock.DGXModels {
		t.Run(model.String(), func(t *testing.T) {
			ctx := context.Background()
			b, _ := newBackend(t, model, nvmlmock.Options{})
			mustCreate(t, b, 0, p3g, at(4, 4))
			mustCreate(t, b, 0, p1gR2, at(0, 2))
			mustCreate(t, b, 0, p1gME, at(2, 1))
			for _, tc := range []struct {
				name    string
				profile capability.GIProfileIndex
				at      capability.Placement
				kind    error
				code    nvml.Return // SUCCESS: refused before NVML is asked
			}{
				{name: "1g inside 3g", profile: p1g, at: at(5, 1), kind: realize.ErrOccupied, code: nvml.ERROR_INSUFFICIENT_RESOURCES},
				{name: "2g over 1g.REV2", profile: p2g, at: at(0, 2), kind: realize.ErrOccupied, code: nvml.ERROR_INSUFFICIENT_RESOURCES},
				{name: "7g over everything", profile: p7g, at: at(0, 8), kind: realize.ErrOccupied, code: nvml.ERROR_INSUFFICIENT_RESOURCES},
				{name: "second 4g over 1g.REV2", profile: p4g, at: at(0, 4), kind: realize.ErrOccupied, code: nvml.ERROR_INSUFFICIENT_RESOURCES},
				{name: "second 1g+me (instance count 1)", profile: p1gME, at: at(3, 1), kind: realize.ErrOccupied, code: nvml.ERROR_INSUFFICIENT_RESOURCES},
				{name: "1g at slot 7", profile: p1g, at: at(7, 1), kind: realize.ErrInvalidPlacement},
				{name: "3g at start 2", profile: p3g, at: at(2, 4), kind: realize.ErrInvalidPlacement},
				{name: "3g with size 3", profile: p3g, at: at(0, 3), kind: realize.ErrInvalidPlacement},
				{name: "empty placement", profile: p1g, at: at(2, 0), kind: realize.ErrInvalidPlacement},
				{name: "profile the GPU lacks", profile: capability.GIProfile1SliceGFX, at: at(2, 1), kind: realize.ErrNotSupported, code: nvml.ERROR_NOT_SUPPORTED},
				{name: "profile outside NVML", profile: capability.GIProfileCount, at: at(2, 1), kind: realize.ErrNotSupported},
			} {
				t.Run(tc.name, func(t *testing.T) {
					_, err := b.CreateInstance(ctx, 0, tc.profile, tc.at)
					if !errors.Is(err, tc.kind) {
						t.Fatalf("err = %v, want %v", err, tc.kind)
					}
					if got := returnCode(err); got != tc.code {
						t.Errorf("NVML code = %v, want %v", got, tc.code)
					}
				})
			}
			if got := len(mustInstances(t, b, 0)); got != 3 {
				t.Errorf("instances after refusals = %d, want 3", got)
			}
		})
	}
}

// 4g@0 + 3g@4 uses all 7 compute slices; 3g@0 + 3g@4 strands one, which
// no 1g can use because every slot is taken.
func TestComputeSliceBudget(t *testing.T) {
	b, _ := newBackend(t, nvmlmock.DGXH200, nvmlmock.Options{})
	mustCreate(t, b, 0, p4g, at(0, 4))
	mustCreate(t, b, 0, p3g, at(4, 4))
	mustCreate(t, b, 1, p3g, at(0, 4))
	mustCreate(t, b, 1, p3g, at(4, 4))
	for _, gpu := range []int{0, 1} {
		for s := range uint32(7) {
			if _, err := b.CreateInstance(context.Background(), gpu, p1g, at(s, 1)); !errors.Is(err, realize.ErrOccupied) {
				t.Errorf("GPU %d: 1g@%d = %v, want ErrOccupied", gpu, s, err)
			}
		}
	}
}

func TestCreateMIGDisabled(t *testing.T) {
	b, _ := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{MIGDisabled: true})
	_, err := b.CreateInstance(context.Background(), 0, p1g, at(0, 1))
	if !errors.Is(err, realize.ErrMIGDisabled) || returnCode(err) != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("err = %v, want ErrMIGDisabled from NOT_SUPPORTED", err)
	}
}

func TestDestroyRefusals(t *testing.T) {
	for _, model := range nvmlmock.DGXModels {
		t.Run(model.String(), func(t *testing.T) {
			ctx := context.Background()
			b, srv := newBackend(t, model, nvmlmock.Options{})
			inst := mustCreate(t, b, 2, p2g, at(2, 2))
			ci := inst.ComputeInstances[0]

			err := b.DestroyGPUInstance(ctx, 2, inst.GIID)
			if !errors.Is(err, realize.ErrInUse) || returnCode(err) != nvml.ERROR_IN_USE {
				t.Errorf("destroy GI with a CI = %v, want ErrInUse", err)
			}
			if err := srv.StartMIGProcess(2, inst.GIID, ci.ID, 4242); err != nil {
				t.Fatal(err)
			}
			if err := b.DestroyComputeInstance(ctx, 2, inst.GIID, ci.ID); !errors.Is(err, realize.ErrInUse) {
				t.Errorf("destroy CI with a process = %v, want ErrInUse", err)
			}
			srv.StopProcess(2, 4242)

			if err := b.DestroyComputeInstance(ctx, 2, inst.GIID, ci.ID+1); !errors.Is(err, realize.ErrNotFound) {
				t.Errorf("destroy missing CI = %v, want ErrNotFound", err)
			}
			if err := b.DestroyGPUInstance(ctx, 2, inst.GIID+100); !errors.Is(err, realize.ErrNotFound) {
				t.Errorf("destroy missing GI = %v, want ErrNotFound", err)
			}
			if err := b.DestroyComputeInstance(ctx, 2, inst.GIID+100, 0); !errors.Is(err, realize.ErrNotFound) {
				t.Errorf("destroy CI of missing GI = %v, want ErrNotFound", err)
			}
			if err := b.DestroyGPUInstance(ctx, 9, 0); !errors.Is(err, realize.ErrNotFound) {
				t.Errorf("destroy on missing GPU = %v, want ErrNotFound", err)
			}
			if err := b.DestroyComputeInstance(ctx, 2, inst.GIID, ci.ID); err != nil {
				t.Fatal(err)
			}
			if err := b.DestroyGPUInstance(ctx, 2, inst.GIID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A GPU instance left without a compute instance (a crash between the two
// creates, or another tool) is listed, and can be destroyed.
func TestGPUInstanceWithoutComputeInstance(t *testing.T) {
	for _, model := range nvmlmock.DGXModels {
		t.Run(model.String(), func(t *testing.T) {
			ctx := context.Background()
			b, srv := newBackend(t, model, nvmlmock.Options{})
			keep := mustCreate(t, b, 5, p1g, at(6, 1))

			dev := srv.GPU(5)
			info, ret := dev.GetGpuInstanceProfileInfo(int(p3g))
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 0, Size: 4})
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			giInfo, _ := gi.GetInfo()

			insts := mustInstances(t, b, 5)
			if len(insts) != 2 {
				t.Fatalf("Instances = %+v, want 2", insts)
			}
			bare := insts[0]
			if bare.GIID != giInfo.Id || bare.Profile != p3g || bare.Placement != at(0, 4) || len(bare.ComputeInstances) != 0 {
				t.Errorf("bare GI listed as %+v", bare)
			}
			if !equalInstance(insts[1], keep) {
				t.Errorf("second = %+v, want %+v", insts[1], keep)
			}
			if err := b.DestroyGPUInstance(ctx, 5, bare.GIID); err != nil {
				t.Fatal(err)
			}
			if got := mustInstances(t, b, 5); len(got) != 1 || !equalInstance(got[0], keep) {
				t.Errorf("after destroy: %+v", got)
			}
		})
	}
}

func TestCreateRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		faults   map[nvmlmock.Op]nvml.Return
		kind     error
		leftOver int // GPU instances left when the rollback fails too
	}{
		{name: "CI create fails", faults: map[nvmlmock.Op]nvml.Return{nvmlmock.OpCreateComputeInstance: nvml.ERROR_INSUFFICIENT_RESOURCES}, kind: realize.ErrOccupied},
		{name: "CI create NOT_SUPPORTED", faults: map[nvmlmock.Op]nvml.Return{nvmlmock.OpCreateComputeInstance: nvml.ERROR_NOT_SUPPORTED}, kind: realize.ErrNotSupported},
		{name: "MIG device scan fails", faults: map[nvmlmock.Op]nvml.Return{nvmlmock.OpGetMigDeviceHandleByIndex: nvml.ERROR_UNKNOWN}},
		{name: "CI and GI rollback fail", kind: realize.ErrOccupied, leftOver: 1, faults: map[nvmlmock.Op]nvml.Return{
			nvmlmock.OpCreateComputeInstance: nvml.ERROR_INSUFFICIENT_RESOURCES,
			nvmlmock.OpDestroyGpuInstance:    nvml.ERROR_UNKNOWN,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, srv := newBackend(t, nvmlmock.DGXB200, nvmlmock.Options{})
			for op, ret := range tc.faults {
				srv.FailNext(op, ret)
			}
			_, err := b.CreateInstance(context.Background(), 0, p2g, at(4, 2))
			if err == nil {
				t.Fatal("CreateInstance succeeded")
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Errorf("err = %v, want %v", err, tc.kind)
			}
			if tc.leftOver > 0 && !errors.Is(err, nvml.ERROR_UNKNOWN) {
				t.Errorf("err = %v, want the failed rollback joined", err)
			}
			insts := mustInstances(t, b, 0)
			if len(insts) != tc.leftOver {
				t.Fatalf("instances after rollback = %+v, want %d", insts, tc.leftOver)
			}
			for _, in := range insts {
				if len(in.ComputeInstances) != 0 {
					t.Errorf("rollback left a compute instance: %+v", in)
				}
			}
			if tc.leftOver == 0 {
				mustCreate(t, b, 0, p2g, at(4, 2)) // the placement is free again
			}
		})
	}
}

func TestProcesses(t *testing.T) {
	ctx := context.Background()
	b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	r, err := b.Processes(ctx, 0)
	if err != nil || r.Busy() || r.ByGPUInstance != nil {
		t.Fatalf("idle GPU: %+v, %v", r, err)
	}
	a := mustCreate(t, b, 0, p3g, at(0, 4))
	c := mustCreate(t, b, 0, p1g, at(4, 1))
	for _, pid := range []uint32{10, 11} {
		if err := srv.StartMIGProcess(0, a.GIID, a.ComputeInstances[0].ID, pid); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.StartMIGProcess(0, c.GIID, c.ComputeInstances[0].ID, 12); err != nil {
		t.Fatal(err)
	}
	r, err = b.Processes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 3 || r.ByGPUInstance[a.GIID] != 2 || r.ByGPUInstance[c.GIID] != 1 || len(r.ByGPUInstance) != 2 {
		t.Errorf("report = %+v, want 3 processes: 2 in GI %d, 1 in GI %d", r, a.GIID, c.GIID)
	}
	srv.FailNext(nvmlmock.OpGetComputeRunningProcs, nvml.ERROR_NO_PERMISSION)
	if _, err := b.Processes(ctx, 0); err == nil || returnCode(err) != nvml.ERROR_NO_PERMISSION {
		t.Errorf("unreadable processes = %v, want the NVML error (never an idle report)", err)
	}
}

func TestEnableMIG(t *testing.T) {
	ctx := context.Background()
	t.Run("idle GPU", func(t *testing.T) {
		b, _ := newBackend(t, nvmlmock.DGXH100, nvmlmock.Options{MIGDisabled: true})
		if err := b.EnableMIG(ctx, 0); err != nil {
			t.Fatal(err)
		}
		cur, pend, err := b.MIGMode(ctx, 0)
		if err != nil || cur != capability.MIGEnabled || pend != capability.MIGEnabled {
			t.Errorf("mode = %v/%v, %v; want enabled", cur, pend, err)
		}
		if err := b.EnableMIG(ctx, 0); err != nil {
			t.Errorf("EnableMIG on an enabled GPU = %v, want nil", err)
		}
	})
	t.Run("busy GPU is refused", func(t *testing.T) {
		b, srv := newBackend(t, nvmlmock.DGXH100, nvmlmock.Options{MIGDisabled: true})
		if err := srv.StartProcess(0, 77); err != nil {
			t.Fatal(err)
		}
		if err := b.EnableMIG(ctx, 0); !errors.Is(err, realize.ErrInUse) {
			t.Errorf("EnableMIG on a busy GPU = %v, want ErrInUse", err)
		}
		cur, pend, _ := b.MIGMode(ctx, 0)
		if cur != capability.MIGDisabled || pend != capability.MIGDisabled {
			t.Errorf("busy GPU mode changed to %v/%v", cur, pend)
		}
	})
	t.Run("reset required", func(t *testing.T) {
		b, srv := newBackend(t, nvmlmock.DGXH100, nvmlmock.Options{MIGDisabled: true, ResetRequired: true})
		err := b.EnableMIG(ctx, 0)
		if !errors.Is(err, realize.ErrResetRequired) || returnCode(err) != nvml.ERROR_RESET_REQUIRED {
			t.Fatalf("EnableMIG = %v, want ErrResetRequired", err)
		}
		devs, _ := b.Devices(ctx)
		if devs[0].MIGMode != capability.MIGDisabled || devs[0].PendingMIGMode != capability.MIGEnabled {
			t.Errorf("device = %+v, want disabled now, enabled pending", devs[0])
		}
		if err := b.EnableMIG(ctx, 0); !errors.Is(err, realize.ErrResetRequired) {
			t.Errorf("EnableMIG while pending = %v, want ErrResetRequired", err)
		}
		if err := srv.ResetGPU(0); err != nil {
			t.Fatal(err)
		}
		if err := b.EnableMIG(ctx, 0); err != nil {
			t.Errorf("after reset: %v", err)
		}
	})
}

func TestInitShutdownOwnership(t *testing.T) {
	ctx := context.Background()
	srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
	if ret := srv.Init(); ret != nvml.SUCCESS { // the embedding program owns this one
		t.Fatal(ret)
	}
	b := nvmlhal.New(nvmlhal.Options{NVML: srv})
	if _, err := b.Devices(ctx); err != nil {
		t.Fatalf("backend over an initialised library: %v", err)
	}
	if err := b.Shutdown(ctx); !errors.Is(err, nvmlhal.ErrNotInitialized) {
		t.Errorf("Shutdown without Init = %v, want ErrNotInitialized", err)
	}
	if got := srv.Inits(); got != 1 {
		t.Fatalf("backend shut down the caller's NVML: inits = %d", got)
	}
	if err := b.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := srv.Inits(); got != 1 {
		t.Errorf("inits after balanced Init/Shutdown = %d, want 1", got)
	}
	srv.Shutdown()
}

func TestCanceledContext(t *testing.T) {
	b, _ := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.CreateInstance(ctx, 0, p1g, at(0, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateInstance = %v, want context.Canceled", err)
	}
	if _, err := b.Instances(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Instances = %v, want context.Canceled", err)
	}
	if len(mustInstances(t, b, 0)) != 0 {
		t.Error("a canceled create changed hardware")
	}
}

// Creates, lists and destroys on all GPUs at once; run with -race.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for gpu := range 8 {
		for s := range uint32(7) {
			wg.Go(func() {
				inst, err := b.CreateInstance(ctx, gpu, p1g, at(s, 1))
				if err != nil {
					errs <- err
					return
				}
				if _, err := b.Instances(ctx, gpu); err != nil {
					errs <- err
				}
				if _, err := b.Processes(ctx, gpu); err != nil {
					errs <- err
				}
				if err := b.DestroyComputeInstance(ctx, gpu, inst.GIID, inst.ComputeInstances[0].ID); err != nil {
					errs <- err
				}
				if err := b.DestroyGPUInstance(ctx, gpu, inst.GIID); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for gpu := range 8 {
		if left := mustInstances(t, b, gpu); len(left) != 0 {
			t.Errorf("GPU %d left %+v", gpu, left)
		}
	}
}

// A call waiting for a GPU's lock gives up when its context ends; other
// GPUs are not blocked.
func TestLockWaitHonoursContext(t *testing.T) {
	b, _ := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	unlock, err := b.LockGPU(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.CreateInstance(ctx, 0, p1g, at(0, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CreateInstance on a locked GPU = %v, want context.DeadlineExceeded", err)
	}
	mustCreate(t, b, 1, p1g, at(0, 1))
	unlock()
	mustCreate(t, b, 0, p1g, at(0, 1))
}

// A GPU whose MIG mode cannot be read is never reported as having no
// instances or no processes: every read that needs the mode says why it
// failed. (GIProfiles does not read the mode: it asks the profile queries
// whatever the mode.)
func TestUnreadableMIGMode(t *testing.T) {
	ctx := context.Background()
	b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	mustCreate(t, b, 0, p1g, at(0, 1))
	for name, call := range map[string]func() error{
		"MIGMode":   func() error { _, _, err := b.MIGMode(ctx, 0); return err },
		"Instances": func() error { _, err := b.Instances(ctx, 0); return err },
		"Processes": func() error { _, err := b.Processes(ctx, 0); return err },
	} {
		srv.FailNext(nvmlmock.OpGetMigMode, nvml.ERROR_UNKNOWN)
		if err := call(); returnCode(err) != nvml.ERROR_UNKNOWN {
			t.Errorf("%s with GetMigMode failing = %v, want the NVML error", name, err)
		}
	}
	if got := len(mustInstances(t, b, 0)); got != 1 {
		t.Errorf("after the failures %d instances, want 1", got)
	}
}
