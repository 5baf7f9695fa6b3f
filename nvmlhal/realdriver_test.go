package nvmlhal_test

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"
	"testing/synctest"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize"
)

// Tests for what real drivers do that the first backend did not expect.

// Fix 1: on a library without nvmlDeviceGetNumaNodeId (before R550) the
// backend must not call it (the strict mock panics, as the process would
// die); NUMA comes from the PCI device's sysfs numa_node.
func TestNUMAFromSysfsWithoutNewSymbols(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{MissingSymbols: []string{"nvmlDeviceGetNumaNodeId"}})
	b := nvmlhal.New(nvmlhal.Options{NVML: srv, Sysfs: srv.Sysfs()})
	if err := b.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	devs, err := b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if want := d.Index / 4; d.NUMA != want {
			t.Errorf("GPU %d: NUMA %d, want %d", d.Index, d.NUMA, want)
		}
	}
	// No sysfs entry, or -1 (no affinity): 0, and no error.
	b2 := nvmlhal.New(nvmlhal.Options{NVML: srv, Sysfs: fstest.MapFS{
		"bus/pci/devices/0000:07:00.0/numa_node": {Data: []byte("-1\n")},
	}})
	if err := b2.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer b2.Shutdown(context.Background())
	devs, err = b2.Devices(t.Context())
	if err != nil || devs[0].NUMA != 0 || devs[5].NUMA != 0 {
		t.Errorf("Devices without NUMA data = %v, %v; want NUMA 0", devs, err)
	}
}

func TestSysfsBusID(t *testing.T) {
	raw := func(s string) [32]int8 {
		var out [32]int8
		for i, c := range []byte(s) {
			out[i] = int8(c)
		}
		return out
	}
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"0000:3b:00.0":     "0000:3b:00.0",
		"":                 "",
		"../../etc/passwd": "",
		"00000000:3B/00.0": "",
	} {
		if got := nvmlhal.SysfsBusID(raw(in)); got != want {
			t.Errorf("SysfsBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// Fix 2: NVML answers INVALID_ARGUMENT for a MIG device index without a
// device and for a handle whose compute instance another client just
// destroyed. A scan that meets either skips it: listing, process counting
// and the create that resolves its new MIG device all succeed.
func TestMIGScanSkipsInvalidArgument(t *testing.T) {
	for _, tt := range []struct {
		name string
		op   nvmlmock.Op
	}{
		{name: "index without a device", op: nvmlmock.OpGetMigDeviceHandleByIndex},
		{name: "handle gone stale mid-scan", op: nvmlmock.OpMIGDeviceQuery},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
			first := mustCreate(t, b, 0, p1g, at(0, 1))
			// The scan of the second create meets the first instance's
			// index first; NVML fails it as if another client had just
			// destroyed that instance.
			srv.FailNext(tt.op, nvml.ERROR_INVALID_ARGUMENT)
			second, err := b.CreateInstance(ctx, 0, p1g, at(1, 1))
			if err != nil {
				t.Fatalf("CreateInstance with a stale neighbour in the scan: %v, want success (no rollback)", err)
			}
			if second.ComputeInstances[0].MIGUUID == "" || second.ComputeInstances[0].MIGUUID == first.ComputeInstances[0].MIGUUID {
				t.Errorf("second MIG UUID %q (first %q)", second.ComputeInstances[0].MIGUUID, first.ComputeInstances[0].MIGUUID)
			}
			srv.FailNext(tt.op, nvml.ERROR_INVALID_ARGUMENT)
			if _, err := b.Instances(ctx, 0); err != nil {
				t.Errorf("Instances with a stale handle: %v", err)
			}
			srv.FailNext(tt.op, nvml.ERROR_INVALID_ARGUMENT)
			if _, err := b.Processes(ctx, 0); err != nil {
				t.Errorf("Processes with a stale handle: %v", err)
			}
			if got := len(mustInstances(t, b, 0)); got != 2 {
				t.Errorf("%d instances, want 2", got)
			}
		})
	}
}

// Other scan failures still fail the call: only "no device there" is
// skipped.
func TestMIGScanFailsOnOtherErrors(t *testing.T) {
	b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	mustCreate(t, b, 0, p1g, at(0, 1))
	srv.FailNext(nvmlmock.OpGetMigDeviceHandleByIndex, nvml.ERROR_UNKNOWN)
	if _, err := b.Instances(t.Context(), 0); returnCode(err) != nvml.ERROR_UNKNOWN {
		t.Errorf("Instances = %v, want ERROR_UNKNOWN", err)
	}
}

// Fix 6: graphics and MPS clients are not in NVML's compute list; a +gfx
// instance running a renderer, or an MPS client, is busy all the same.
func TestGraphicsAndMPSProcessesCount(t *testing.T) {
	for _, tt := range []struct {
		name  string
		model nvmlmock.Model
		prof  capability.GIProfileIndex
		at    capability.Placement
		start func(srv *nvmlmock.Server, gi, ci uint32) error
	}{
		{name: "graphics on +gfx", model: nvmlmock.RTXPro6000, prof: capability.GIProfile1SliceGFX, at: at(3, 3),
			start: func(srv *nvmlmock.Server, gi, ci uint32) error { return srv.StartGraphicsProcess(0, gi, ci, 4242) }},
		{name: "MPS client", model: nvmlmock.DGXA100, prof: p1g, at: at(2, 1),
			start: func(srv *nvmlmock.Server, gi, ci uint32) error { return srv.StartMPSProcess(0, gi, ci, 4343) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			b, srv := newBackend(t, tt.model, nvmlmock.Options{})
			inst := mustCreate(t, b, 0, tt.prof, tt.at)
			ci := inst.ComputeInstances[0].ID
			if err := tt.start(srv, inst.GIID, ci); err != nil {
				t.Fatal(err)
			}
			rep, err := b.Processes(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Busy() || rep.Total != 1 || rep.ByGPUInstance[inst.GIID] != 1 {
				t.Errorf("Processes = %+v, want one process in GI %d", rep, inst.GIID)
			}
			err = b.DestroyComputeInstance(ctx, 0, inst.GIID, ci)
			if !errors.Is(err, realize.ErrInUse) {
				t.Errorf("DestroyComputeInstance under a client = %v, want ErrInUse", err)
			}
			srv.StopProcess(0, 4242)
			srv.StopProcess(0, 4343)
		})
	}
}

// Fix 3: drivers that answer the profile queries with MIG off list the
// table before MIG is enabled.
func TestGIProfilesWithMIGOff(t *testing.T) {
	b, _ := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{MIGDisabled: true, ProfilesWhileDisabled: true})
	infos, err := b.GIProfiles(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 7 || len(infos[0].Placements) == 0 {
		t.Errorf("GIProfiles with MIG off = %d profiles, want A100's 7 with placements", len(infos))
	}
}

// Fix 4: a versioned answer names a profile only when it agrees with the
// V1 answer and its name parses with V1's slice count: a SUCCESS proves
// nothing on driver 580.159.04, whose V3 answer has an empty name and
// garbage at V2's name offset.
func TestTrustedName(t *testing.T) {
	v1 := nvml.GpuInstanceProfileInfo{Id: 19, SliceCount: 1, MemorySizeMB: 16384}
	name := func(s string, at int) [96]int8 {
		var out [96]int8
		for i, c := range []byte(s) {
			out[at+i] = int8(c)
		}
		return out
	}
	tests := []struct {
		name     string
		id, sl   uint32
		mib      uint64
		raw      [96]int8
		want     string
		wantTrue bool
	}{
		{name: "V2 answer", id: 19, sl: 1, mib: 16384, raw: name("MIG 1g.18gb", 0), want: "1g.18gb", wantTrue: true},
		{name: "variant", id: 19, sl: 1, mib: 16384, raw: name("MIG 1g.18gb+me", 0), want: "1g.18gb+me", wantTrue: true},
		{name: "580 V3: empty, garbage at V2's offset", id: 19, sl: 1, mib: 16384, raw: name("MIG 7g.0gb", 8)},
		{name: "zeroed struct", raw: [96]int8{}},
		{name: "zeroed numbers, a name", raw: name("MIG 1g.18gb", 0)},
		{name: "other Id", id: 20, sl: 1, mib: 16384, raw: name("MIG 1g.18gb", 0)},
		{name: "other memory", id: 19, sl: 1, mib: 16383, raw: name("MIG 1g.18gb", 0)},
		{name: "slice count differs from the name's", id: 19, sl: 1, mib: 16384, raw: name("MIG 7g.18gb", 0)},
		{name: "unparsable name", id: 19, sl: 1, mib: 16384, raw: name("MIG one", 0)},
	}
	for _, tt := range tests {
		got, ok := nvmlhal.TrustedName(v1, tt.id, tt.sl, tt.mib, tt.raw)
		if got != tt.want || ok != tt.wantTrue {
			t.Errorf("%s: TrustedName = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.wantTrue)
		}
	}
}

// Fix 5: INSUFFICIENT_RESOURCES is named for all it can mean, including
// media engines, which a refused A30 +me pair shows.
func TestInsufficientResourcesMeaning(t *testing.T) {
	b, _ := newBackend(t, nvmlmock.A30, nvmlmock.Options{})
	mustCreate(t, b, 0, capability.GIProfile1SliceRev1, at(0, 1))
	_, err := b.CreateInstance(t.Context(), 0, capability.GIProfile2SliceRev1, at(2, 2))
	var re *nvmlhal.ReturnError
	if !errors.Is(err, realize.ErrOccupied) || !errors.As(err, &re) {
		t.Fatalf("2g.12gb+me next to 1g.6gb+me = %v, want ErrOccupied with a ReturnError", err)
	}
	if re.Return != nvml.ERROR_INSUFFICIENT_RESOURCES || re.Meaning != nvmlhal.Meaning(nvml.ERROR_INSUFFICIENT_RESOURCES, true) || re.Meaning == "" {
		t.Errorf("cause %+v, want INSUFFICIENT_RESOURCES with its meaning", re)
	}
}

// Fix 7: Shutdown waits for calls in flight (and holds new ones off), so
// no call runs on a library being shut down; its wait honours ctx.
func TestShutdownWaitsForCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
		b := nvmlhal.New(nvmlhal.Options{NVML: srv})
		if err := b.Init(t.Context()); err != nil {
			t.Fatal(err)
		}
		unlock, err := b.LockGPU(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			_, err := b.Instances(context.Background(), 0) // in flight, waiting for GPU 0
			done <- err
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := b.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Shutdown with a call in flight and a done ctx = %v, want context.Canceled", err)
		}
		shut := make(chan error)
		go func() { shut <- b.Shutdown(context.Background()) }()
		synctest.Wait()
		if got := srv.Inits(); got != 1 {
			t.Errorf("NVML shut down under a call in flight (inits %d)", got)
		}
		unlock()
		if err := <-done; err != nil {
			t.Errorf("the call in flight: %v", err)
		}
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if got := srv.Inits(); got != 0 {
			t.Errorf("inits after Shutdown = %d, want 0", got)
		}
	})
}

// failingInit is a library whose nvmlInit fails.
type failingInit struct{ *nvmlmock.Server }

func (failingInit) Init() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }

// Fix 7: a failed Init on a library the backend made leaves that library
// behind: the next Init uses a fresh one instead of stacking go-nvml
// references on it.
func TestFailedInitUsesAFreshLibrary(t *testing.T) {
	made := 0
	good := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
	b := nvmlhal.NewOwned(failingInit{nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})}, func() nvml.Interface {
		made++
		return good
	})
	if err := b.Init(t.Context()); returnCode(err) != nvml.ERROR_DRIVER_NOT_LOADED {
		t.Fatalf("Init = %v, want ERROR_DRIVER_NOT_LOADED", err)
	}
	if _, err := b.Devices(t.Context()); returnCode(err) != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Devices after a failed Init = %v, want ERROR_UNINITIALIZED", err)
	}
	if err := b.Init(t.Context()); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	if made != 1 || good.Inits() != 1 {
		t.Errorf("libraries made %d, fresh one's inits %d; want 1, 1", made, good.Inits())
	}
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
