package nvcdigen_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/internal/leaf/migcdi"
	"github.com/dynmig/dynmig/nvmlhal/nvcdigen"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

// A MIG device's capability nodes: nvcdi (v1.20.2,
// internal/platform-support/dgpu) finds their minors in the host's
// /proc/driver/nvidia-caps/mig-minors, read at that fixed path and not
// under the driver root, and offers no option to relocate it.
// TestMIGDeviceNodes (mignodes_test.go) shows it a fake file through a
// mount namespace private to one thread, where the machine allows one
// (CAP_SYS_ADMIN; it is skipped elsewhere); TestMIGWithoutDriver checks
// the error on a machine without the driver. The rest of the spec (the
// parent GPU's node, the control nodes, the driver's libraries and
// binaries, the hooks) is found under the fake driver root and checked
// below; TestRealDriver checks a MIG device's edits on a node with the
// driver. What no test here shows: nvsandboxutils, which nvcdi prefers to
// NVML for device nodes when the driver ships libnvidia-sandboxutils.so.1
// (a real library it dlopens, with no option to substitute one).

// Both components take the generator.
var (
	_ deviceplugin.CDIGenerator = (*nvcdigen.Generator)(nil)
	_ dradriver.CDIGenerator    = (*nvcdigen.Generator)(nil)
)

// driverVersion is the version nvmlmock's driver reports.
const driverVersion = "580.65.06"

// byUUID resolves MIG UUIDs in DeviceGetHandleByUUID, as real NVML does
// and nvmlmock does not.
type byUUID struct{ *nvmlmock.Server }

func (s byUUID) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	if !strings.HasPrefix(uuid, "MIG-") {
		return s.Server.DeviceGetHandleByUUID(uuid)
	}
	n, ret := s.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	for i := range n {
		dev, _ := s.DeviceGetHandleByIndex(i)
		count, _ := dev.GetMaxMigDeviceCount()
		for j := range count {
			if mig, ret := dev.GetMigDeviceHandleByIndex(j); ret == nvml.SUCCESS {
				if u, _ := mig.GetUUID(); u == uuid {
					return migHandle{mig, j}, nvml.SUCCESS
				}
			}
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// migHandle answers the MIG handle queries go-nvlib makes that nvmlmock
// leaves to go-nvml's mock (which panics on them).
type migHandle struct {
	nvml.Device
	index int
}

func (m migHandle) GetIndex() (int, nvml.Return) { return m.index, nvml.SUCCESS }
func (m migHandle) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	return nvml.DeviceAttributes{MultiprocessorCount: 16, GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 10240}, nvml.SUCCESS
}

// migInstance makes GPU 0 of srv a MIG GPU with one 1g instance and
// returns it.
func migInstance(t *testing.T, srv *nvmlmock.Server) migcdi.Instance {
	t.Helper()
	srv.Init()
	defer srv.Shutdown()
	dev, _ := srv.DeviceGetHandleByIndex(0)
	if _, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	p, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	gi, ret := dev.CreateGpuInstanceWithPlacement(&p, &nvml.GpuInstancePlacement{Start: 2, Size: 1})
	if ret != nvml.SUCCESS {
		t.Fatalf("CreateGpuInstance: %v", ret)
	}
	cp, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&cp); ret != nvml.SUCCESS {
		t.Fatalf("CreateComputeInstance: %v", ret)
	}
	gpuUUID, _ := dev.GetUUID()
	mig, _ := dev.GetMigDeviceHandleByIndex(0)
	migUUID, _ := mig.GetUUID()
	giID, _ := mig.GetGpuInstanceId()
	ciID, _ := mig.GetComputeInstanceId()
	return migcdi.Instance{GPU: 0, GPUUUID: gpuUUID, MIGUUID: migUUID, GPUInstanceID: uint32(giID), ComputeInstanceID: uint32(ciID)}
}

// fakeDriverRoot lays out what nvcdi looks for under a driver root: the
// device nodes (real character devices, which it checks), the driver's
// libraries at the version NVML reports, and a binary.
func fakeDriverRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	nodes := map[string]int{"nvidiactl": 255, "nvidia0": 0, "nvidia-uvm": 0}
	for name, minor := range nodes {
		path := filepath.Join(root, "dev", name)
		mkdir(t, filepath.Dir(path))
		major := 195
		if name == "nvidia-uvm" {
			major = 509
		}
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(uint32(major), uint32(minor)))); err != nil {
			t.Skipf("cannot make device nodes here (%v): the test needs CAP_MKNOD", err)
		}
	}
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	mkdir(t, lib)
	for _, name := range []string{"libcuda.so.", "libnvidia-ml.so.", "libnvidia-ptxjitcompiler.so."} {
		write(t, filepath.Join(lib, name+driverVersion))
	}
	mkdir(t, filepath.Join(root, "usr/bin"))
	write(t, filepath.Join(root, "usr/bin/nvidia-smi"))
	return root
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func newGenerator(t *testing.T, srv *nvmlmock.Server, root string) *nvcdigen.Generator {
	t.Helper()
	gen, err := nvcdigen.New(nvcdigen.Options{NVML: byUUID{srv}, DriverRoot: root, HookPath: "/opt/nvidia/nvidia-cdi-hook",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

func nodePaths(e cdispec.ContainerEdits) []string {
	var out []string
	for _, n := range e.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}

func mountPaths(e cdispec.ContainerEdits) []string {
	var out []string
	for _, m := range e.Mounts {
		out = append(out, m.ContainerPath)
	}
	return out
}

// The common edits carry the control nodes, the driver's libraries and
// binaries found under the driver root, and the toolkit's hooks at the
// configured path.
func TestCommonEdits(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	root := fakeDriverRoot(t)
	gen := newGenerator(t, srv, root)
	edits, err := gen.CommonEdits()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm"} {
		if !slices.Contains(nodePaths(edits), want) {
			t.Errorf("common nodes %v lack %s", nodePaths(edits), want)
		}
	}
	for _, want := range []string{"/usr/lib/x86_64-linux-gnu/libcuda.so." + driverVersion, "/usr/bin/nvidia-smi"} {
		if !slices.Contains(mountPaths(edits), want) {
			t.Errorf("common mounts %v lack %s", mountPaths(edits), want)
		}
	}
	for _, m := range edits.Mounts {
		// /dev/null hides /var/run/nvidia-container-devices (the
		// toolkit's volume-mounts selection) from the container.
		if !strings.HasPrefix(m.HostPath, root) && m.HostPath != "/dev/null" {
			t.Errorf("mount %s comes from %s, outside the driver root", m.ContainerPath, m.HostPath)
		}
	}
	if len(edits.Hooks) == 0 {
		t.Fatal("no hooks: the libraries would not be linked into the ld cache")
	}
	for _, h := range edits.Hooks {
		if h.Path != "/opt/nvidia/nvidia-cdi-hook" {
			t.Errorf("hook %v runs %s, not the configured hook", h.Args, h.Path)
		}
	}
	// A caller appending to its copy leaves the next caller's alone.
	_ = append(edits.Mounts, &cdispec.Mount{ContainerPath: "/appended"})
	again, err := gen.CommonEdits()
	if err != nil || len(again.Mounts) != len(edits.Mounts) {
		t.Errorf("second call: %d mounts, %v; want the first's %d", len(again.Mounts), err, len(edits.Mounts))
	}
	if full := again.Mounts[:cap(again.Mounts)]; slices.ContainsFunc(full, func(m *cdispec.Mount) bool { return m.ContainerPath == "/appended" }) {
		t.Error("an append to one caller's common edits reached the cached edits")
	}
}

// A whole GPU (the DRA driver's admin access) gets its own node, found
// from NVML's minor number under the driver root.
func TestGPUEdits(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	in := migInstance(t, srv)
	gen := newGenerator(t, srv, fakeDriverRoot(t))
	edits, err := gen.GPUEdits(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := nodePaths(edits); !slices.Contains(got, "/dev/nvidia0") {
		t.Errorf("GPU nodes %v lack /dev/nvidia0", got)
	}
	for _, e := range edits.Env {
		if strings.HasPrefix(e, "NVIDIA_VISIBLE_DEVICES=") {
			t.Errorf("edits set %s: a CDI device needs no variable", e)
		}
	}
}

// Without the NVIDIA driver's /proc/driver/nvidia-caps/mig-minors, nvcdi
// cannot name a MIG device's capability nodes: the error says which
// device, and no partial edits (the parent GPU without its capabilities)
// come back.
func TestMIGWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/proc/driver/nvidia-caps/mig-minors"); err == nil {
		t.Skip("this machine has the NVIDIA driver: TestRealDriver covers it")
	}
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	in := migInstance(t, srv)
	gen := newGenerator(t, srv, fakeDriverRoot(t))
	edits, err := gen.DeviceEdits(in)
	var ge *nvcdigen.Error
	if !errors.Is(err, nvcdigen.ErrGenerate) || !errors.As(err, &ge) || ge.ID != in.MIGUUID {
		t.Fatalf("DeviceEdits = %v; want an ErrGenerate naming %s", err, in.MIGUUID)
	}
	if len(edits.DeviceNodes) != 0 {
		t.Errorf("edits %v returned with the error", nodePaths(edits))
	}
}

// countingInit counts NVML Init calls.
type countingInit struct {
	byUUID
	inits *int
}

func (c countingInit) Init() nvml.Return { *c.inits++; return c.byUUID.Init() }

// An instance with no UUID at all is refused before nvcdi is asked.
func TestNoUUID(t *testing.T) {
	var inits int
	lib := countingInit{byUUID{nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})}, &inits}
	gen, err := nvcdigen.New(nvcdigen.Options{NVML: lib, DriverRoot: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	before := inits
	if _, err := gen.DeviceEdits(migcdi.Instance{}); !errors.Is(err, nvcdigen.ErrGenerate) {
		t.Fatalf("DeviceEdits(no UUID) = %v; want ErrGenerate", err)
	}
	if inits != before {
		t.Errorf("NVML initialized %d times for an instance without a UUID", inits-before)
	}
}

// An unknown MIG UUID is an error naming it.
func TestUnknownMIG(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	gen := newGenerator(t, srv, fakeDriverRoot(t))
	const gone = "MIG-00000000-0000-4000-8000-00000000dead"
	_, err := gen.DeviceEdits(migcdi.Instance{GPUUUID: "GPU-x", MIGUUID: gone})
	var ge *nvcdigen.Error
	if !errors.As(err, &ge) || ge.ID != gone {
		t.Fatalf("DeviceEdits(unknown) = %v; want an Error naming %s", err, gone)
	}
}

// On a node with the NVIDIA driver and a MIG device (none is created: the
// test only reads), the MIG device's edits carry its parent GPU's node
// and its two capability nodes. It is skipped elsewhere.
func TestRealDriver(t *testing.T) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Skipf("no NVIDIA driver: %v", ret)
	}
	defer lib.Shutdown()
	in, minor, ok := firstMIG(lib)
	if !ok {
		t.Skip("no MIG device on this node")
	}
	gen, err := nvcdigen.New(nvcdigen.Options{NVML: lib, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	edits, err := gen.DeviceEdits(in)
	if err != nil {
		t.Fatal(err)
	}
	nodes := nodePaths(edits)
	caps := slices.DeleteFunc(slices.Clone(nodes), func(p string) bool { return !strings.HasPrefix(p, "/dev/nvidia-caps/") })
	if !slices.Contains(nodes, "/dev/nvidia"+strconv.Itoa(minor)) || len(caps) != 2 {
		t.Errorf("%s: nodes %v; want /dev/nvidia%d and two capability nodes", in.MIGUUID, nodes, minor)
	}
	t.Logf("%s: nodes %v", in.MIGUUID, nodes)
	if _, err := gen.CommonEdits(); err != nil {
		t.Error(err)
	}
}

// firstMIG returns the first MIG device NVML lists and its parent's minor.
func firstMIG(lib nvml.Interface) (migcdi.Instance, int, bool) {
	n, _ := lib.DeviceGetCount()
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		count, _ := dev.GetMaxMigDeviceCount()
		for j := range count {
			mig, ret := dev.GetMigDeviceHandleByIndex(j)
			if ret != nvml.SUCCESS {
				continue
			}
			gpuUUID, _ := dev.GetUUID()
			migUUID, _ := mig.GetUUID()
			gi, _ := mig.GetGpuInstanceId()
			ci, _ := mig.GetComputeInstanceId()
			minor, _ := dev.GetMinorNumber()
			return migcdi.Instance{GPU: i, GPUUUID: gpuUUID, MIGUUID: migUUID, GPUInstanceID: uint32(gi), ComputeInstanceID: uint32(ci)}, minor, true
		}
	}
	return migcdi.Instance{}, 0, false
}
