//go:build nvml_hardware

package nvmlhal_test

// Hardware tests: they load the system's libnvidia-ml.so.1 and talk to real
// GPUs, so they build only with -tags nvml_hardware and never run in CI.
//
//	go test -tags nvml_hardware -run TestHardwareDiscovery -v ./nvmlhal/
//
// is read-only: it prints every GPU, every GPU instance profile NVML
// reports (with the driver's name next to the derived one), the live
// instances and processes, and the hami.io/node-nvidia-register value the
// node would publish under the default allowlist.
//
//	go test -tags nvml_hardware -run TestHardwareSelfCheck -v ./nvmlhal/
//
// is the self-check for a first real GPU, read-only as well: it never
// changes the MIG mode and creates nothing. It compares every GPU with the
// fakehal preset for its NVML name (package nvmlhal/selfcheck), prints
// the table of differences and fails on any, so one run says whether the
// fake is faithful to that driver. Compute instance profiles are checked
// for profiles with a live instance only.
//
//	DYNMIG_HW_LIFECYCLE=1 [DYNMIG_HW_GPU=n] go test -tags nvml_hardware -run TestHardwareLifecycle -v ./nvmlhal/
//
// creates and destroys MIG instances: it needs root, a GPU in MIG mode
// with no GPU instances and no processes (it refuses any other), and no
// other MIG manager (device plugin, MIG Manager) running on the node.
// DYNMIG_HW_CONFORMANCE=1 additionally runs the realize conformance suite
// on that GPU (a few hundred creates and destroys).

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/selfcheck"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
)

func hardwareBackend(t *testing.T) *nvmlhal.Backend {
	t.Helper()
	b := nvmlhal.New(nvmlhal.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err := b.Init(context.Background()); err != nil {
		t.Fatalf("NVML Init (is the NVIDIA driver installed?): %v", err)
	}
	t.Cleanup(func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return b
}

func TestHardwareDiscovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := hardwareBackend(t)
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Logf("GPU %d %s %q %d MiB NUMA %d MIG %v (pending %v)", d.Index, d.UUID, d.Name, d.MemoryMB, d.NUMA, d.MIGMode, d.PendingMIGMode)
		infos, err := b.GIProfiles(ctx, d.Index)
		if err != nil {
			t.Fatalf("GIProfiles(%d): %v", d.Index, err)
		}
		maxSMs := capability.MaxMultiprocessors(infos)
		for _, in := range infos {
			derived := capability.DeriveProfileName(in.Index, in.SliceCount, in.MemoryMB, d.MemoryMB)
			t.Logf("  index %2d id %2d driver name %-14q derived %-14s slices %d max %d SMs %3d core %3d %6d MiB placements %v",
				in.Index, in.ID, in.Name, derived, in.SliceCount, in.InstanceCount, in.MultiprocessorCount,
				capability.Core(in.MultiprocessorCount, maxSMs), in.MemoryMB, in.Placements)
			if in.Name != "" && in.Name != derived.String() {
				t.Logf("  NOTE: driver name %q differs from the derived %q", in.Name, derived)
			}
		}
		insts, err := b.Instances(ctx, d.Index)
		if errors.Is(err, realize.ErrMIGDisabled) {
			t.Logf("  no instances: MIG mode is off")
		} else if err != nil {
			t.Fatalf("Instances(%d): %v", d.Index, err)
		}
		for _, in := range insts {
			t.Logf("  live GI %d profile %d at %v CIs %+v", in.GIID, in.Profile, in.Placement, in.ComputeInstances)
		}
		procs, err := b.Processes(ctx, d.Index)
		if err != nil {
			t.Logf("  Processes(%d): %v", d.Index, err)
		} else {
			t.Logf("  processes: %+v", procs)
		}
	}

	gpus, report, err := capability.Discover(ctx, b, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range report.Findings {
		t.Logf("finding: %v", f)
	}
	var reg []capability.NodeDevice
	for _, g := range gpus {
		if g.MIGMode != capability.MIGEnabled {
			continue
		}
		d, err := capability.NewMIGNodeDevice(g, true)
		if err != nil {
			t.Errorf("registration of GPU %d: %v", g.Index, err)
			continue
		}
		reg = append(reg, d)
	}
	out, err := capability.EncodeNodeRegistration(reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hami.io/node-nvidia-register (MIG GPUs only): %s", out)
}

// lifecycleGPU picks the GPU to mutate and refuses one that is not idle.
func lifecycleGPU(t *testing.T, b *nvmlhal.Backend) int {
	t.Helper()
	ctx := context.Background()
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := -1
	if s := os.Getenv("DYNMIG_HW_GPU"); s != "" {
		if want, err = strconv.Atoi(s); err != nil {
			t.Fatalf("DYNMIG_HW_GPU=%q: %v", s, err)
		}
	}
	for _, d := range devs {
		if want >= 0 && d.Index != want {
			continue
		}
		if d.MIGMode != capability.MIGEnabled {
			if want >= 0 {
				t.Fatalf("GPU %d has MIG %v; enable it first (nvidia-smi -i %d -mig 1)", d.Index, d.MIGMode, d.Index)
			}
			continue
		}
		insts, err := b.Instances(ctx, d.Index)
		if err != nil {
			t.Fatal(err)
		}
		procs, err := b.Processes(ctx, d.Index)
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) == 0 && !procs.Busy() {
			return d.Index
		}
		if want >= 0 {
			t.Fatalf("GPU %d is not idle (%d GPU instances, %d processes); refusing to touch it", d.Index, len(insts), procs.Total)
		}
	}
	t.Skip("no idle MIG-enabled GPU (no GPU instances, no processes)")
	return -1
}

func TestHardwareLifecycle(t *testing.T) {
	if os.Getenv("DYNMIG_HW_LIFECYCLE") != "1" {
		t.Skip("set DYNMIG_HW_LIFECYCLE=1 to create and destroy MIG instances on an idle MIG-enabled GPU")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := hardwareBackend(t)
	gpu := lifecycleGPU(t, b)
	infos, err := b.GIProfiles(ctx, gpu)
	if err != nil || len(infos) == 0 {
		t.Fatalf("GIProfiles(%d) = %v, %v", gpu, infos, err)
	}
	t.Cleanup(func() { destroyAll(t, b, gpu) })

	// Smallest profile at its last placement (a driver that picked the
	// first free range would land elsewhere), then the largest profile is
	// refused while it lives, then everything is destroyed.
	small, large := infos[0], infos[0]
	for _, in := range infos {
		if in.SliceCount < small.SliceCount || (in.SliceCount == small.SliceCount && in.Index < small.Index) {
			small = in
		}
		if in.SliceCount > large.SliceCount {
			large = in
		}
	}
	last := small.Placements[len(small.Placements)-1]
	inst, err := b.CreateInstance(ctx, gpu, small.Index, last)
	if err != nil {
		t.Fatalf("CreateInstance(%d, index %d, %v): %v", gpu, small.Index, last, err)
	}
	t.Logf("created %+v", inst)
	if inst.Placement != last || len(inst.ComputeInstances) != 1 || len(inst.ComputeInstances[0].MIGUUID) < 5 || inst.ComputeInstances[0].MIGUUID[:4] != "MIG-" {
		t.Errorf("created %+v, want one CI with a MIG UUID at %v", inst, last)
	}
	listed, err := b.Instances(ctx, gpu)
	if err != nil || len(listed) != 1 || listed[0].GIID != inst.GIID || listed[0].Placement != last ||
		len(listed[0].ComputeInstances) != 1 || listed[0].ComputeInstances[0] != inst.ComputeInstances[0] {
		t.Errorf("Instances = %+v, %v; want exactly %+v", listed, err, inst)
	}
	if _, err := b.CreateInstance(ctx, gpu, large.Index, large.Placements[0]); !errors.Is(err, realize.ErrOccupied) {
		t.Errorf("overlapping create of index %d = %v, want ErrOccupied", large.Index, err)
	}
	if err := b.DestroyGPUInstance(ctx, gpu, inst.GIID); !errors.Is(err, realize.ErrInUse) {
		t.Errorf("destroy GI with its CI = %v, want ErrInUse", err)
	}
	if err := b.DestroyComputeInstance(ctx, gpu, inst.GIID, inst.ComputeInstances[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := b.DestroyGPUInstance(ctx, gpu, inst.GIID); err != nil {
		t.Fatal(err)
	}
	if err := b.DestroyGPUInstance(ctx, gpu, inst.GIID); !errors.Is(err, realize.ErrNotFound) {
		t.Errorf("destroy again = %v, want ErrNotFound", err)
	}
	if left, err := b.Instances(ctx, gpu); err != nil || len(left) != 0 {
		t.Errorf("after destroy: %+v, %v", left, err)
	}

	if os.Getenv("DYNMIG_HW_CONFORMANCE") == "1" {
		realizetest.TestRealizer(t, func(*testing.T) realizetest.Backend { return realizetest.Backend{Realizer: b} })
	}
}

// destroyAll removes whatever the test left on the GPU it chose, which was
// idle when the test began.
func destroyAll(t *testing.T, b *nvmlhal.Backend, gpu int) {
	ctx := context.Background()
	insts, err := b.Instances(ctx, gpu)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, in := range insts {
		for _, ci := range in.ComputeInstances {
			if err := b.DestroyComputeInstance(ctx, gpu, in.GIID, ci.ID); err != nil {
				t.Errorf("cleanup CI %d/%d: %v", in.GIID, ci.ID, err)
			}
		}
		if err := b.DestroyGPUInstance(ctx, gpu, in.GIID); err != nil {
			t.Errorf("cleanup GI %d: %v", in.GIID, err)
		}
	}
}

// TestHardwareSelfCheck compares every GPU with its fakehal preset,
// read-only.
func TestHardwareSelfCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := hardwareBackend(t)
	results, err := selfcheck.Check(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := selfcheck.Write(&out, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("self-check against the fakehal presets:\n%s", out.String())
	for _, r := range results {
		if !r.OK() {
			t.Errorf("GPU %d %q does not match its preset (see the table above)", r.GPU, r.Name)
		}
	}
}
