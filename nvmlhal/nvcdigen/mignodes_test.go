package nvcdigen_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/nvmlhal/nvcdigen"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

// errNoNamespace: the test cannot give itself a mount namespace here.
var errNoNamespace = errors.New("no private mount namespace")

// withMIGMinors runs f on an OS thread of its own whose mount namespace
// has a tmpfs over /proc/driver holding nvidia-caps/mig-minors with
// minors: nvcdi (v1.20.2) reads that file at the host's fixed path, never
// under the driver root, and offers no option to relocate it; a mount
// namespace private to one thread shows it a driver's file while the rest
// of the process, and the machine, see theirs. It returns errNoNamespace
// where namespaces or mounts are not allowed (no CAP_SYS_ADMIN, a
// seccomp profile), and f's error otherwise.
func withMIGMinors(minors string, f func() error) error {
	result := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, whose mount namespace is not the
		// process's, ends with this goroutine instead of running others.
		runtime.LockOSThread()
		if err := privateProcDriver(minors); err != nil {
			result <- fmt.Errorf("%w: %v", errNoNamespace, err)
			return
		}
		result <- f()
	}()
	return <-result
}

// privateProcDriver moves the calling thread to a new mount namespace,
// detached from the host's mount propagation, and mounts a tmpfs with
// nvidia-caps/mig-minors over /proc/driver there.
func privateProcDriver(minors string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "/proc/driver", "tmpfs", 0, "size=64k"); err != nil {
		return err
	}
	if err := os.Mkdir("/proc/driver/nvidia-caps", 0o755); err != nil {
		return err
	}
	return os.WriteFile("/proc/driver/nvidia-caps/mig-minors", []byte(minors), 0o444)
}

// capNode makes the capability device node nvidia-cap<minor> under root.
func capNode(t *testing.T, root string, minor int) {
	t.Helper()
	dir := filepath.Join(root, "dev", "nvidia-caps")
	mkdir(t, dir)
	path := filepath.Join(dir, fmt.Sprintf("nvidia-cap%d", minor))
	if err := unix.Mknod(path, unix.S_IFCHR|0o444, int(unix.Mkdev(508, uint32(minor)))); err != nil {
		t.Skipf("cannot make device nodes here (%v): the test needs CAP_MKNOD", err)
	}
}

// A MIG device's edits carry its parent GPU's node and the nodes of its
// GPU and compute instances' capabilities, the minors the driver's
// mig-minors file gives them, found under the driver root; the edits hold
// nothing else a device could be reached through.
func TestMIGDeviceNodes(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	in := migInstance(t, srv)
	root := fakeDriverRoot(t)
	// Minors as the driver numbers them: GPU 0's instances, and another
	// GPU's with the same IDs that must not be chosen.
	const giMinor, ciMinor = 21, 22
	minors := fmt.Sprintf("config 1\nmonitor 2\ngpu0/gi%[1]d/access %[3]d\ngpu0/gi%[1]d/ci%[2]d/access %[4]d\ngpu1/gi%[1]d/access 139\ngpu1/gi%[1]d/ci%[2]d/access 140\n",
		in.GPUInstanceID, in.ComputeInstanceID, giMinor, ciMinor)
	for _, m := range []int{giMinor, ciMinor, 139, 140} {
		capNode(t, root, m)
	}
	gen := newGenerator(t, srv, root)
	var edits cdispec.ContainerEdits
	err := withMIGMinors(minors, func() error {
		var err error
		edits, err = gen.DeviceEdits(in)
		return err
	})
	if errors.Is(err, errNoNamespace) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/nvidia0", fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giMinor), fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", ciMinor)}
	if got := nodePaths(edits); !sameSet(got, want) {
		t.Errorf("%s: nodes %v, want %v", in.MIGUUID, got, want)
	}
	t.Logf("%s: nodes %v", in.MIGUUID, nodePaths(edits))
	for _, n := range edits.DeviceNodes {
		if n.HostPath != "" && n.HostPath != filepath.Join(root, n.Path) {
			t.Errorf("node %s from %s, not from the driver root", n.Path, n.HostPath)
		}
	}
	if _, err := os.Stat("/proc/driver/nvidia-caps/mig-minors"); err == nil && !hostHasDriver {
		t.Error("the fake mig-minors file is visible outside its thread")
	}
}

// hostHasDriver: this machine has the NVIDIA driver's MIG minors.
var hostHasDriver = func() bool {
	_, err := os.Stat("/proc/driver/nvidia-caps/mig-minors")
	return err == nil
}()

// An instance the driver's mig-minors file does not list (its capability
// nodes are gone, or it was never the driver's) is an error naming it,
// not edits without its capabilities.
func TestMIGDeviceWithoutMinors(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	in := migInstance(t, srv)
	gen := newGenerator(t, srv, fakeDriverRoot(t))
	var edits cdispec.ContainerEdits
	err := withMIGMinors("config 1\nmonitor 2\ngpu1/gi1/access 139\n", func() error {
		var err error
		edits, err = gen.DeviceEdits(in)
		return err
	})
	if errors.Is(err, errNoNamespace) {
		t.Skip(err)
	}
	var ge *nvcdigen.Error
	if !errors.Is(err, nvcdigen.ErrGenerate) || !errors.As(err, &ge) || ge.ID != in.MIGUUID {
		t.Fatalf("DeviceEdits = %v; want an ErrGenerate naming %s", err, in.MIGUUID)
	}
	if len(edits.DeviceNodes) != 0 {
		t.Errorf("edits %v returned with the error", nodePaths(edits))
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// nvcdi leaves out the nodes it does not find under the driver root: a
// MIG device whose capability nodes, or a GPU whose node, are not there
// (a wrong -driver-root) is an ErrMissingNodes naming the root, not a
// spec that hands the container the parent GPU alone, or nothing.
func TestMissingNodes(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	in := migInstance(t, srv)
	root := fakeDriverRoot(t) // the GPUs' nodes, no capability nodes
	gen := newGenerator(t, srv, root)
	minors := fmt.Sprintf("gpu0/gi%[1]d/access 21\ngpu0/gi%[1]d/ci%[2]d/access 22\n", in.GPUInstanceID, in.ComputeInstanceID)
	err := withMIGMinors(minors, func() error {
		_, err := gen.DeviceEdits(in)
		return err
	})
	if errors.Is(err, errNoNamespace) {
		t.Skip(err)
	}
	var ne *nvcdigen.NodesError
	if !errors.Is(err, nvcdigen.ErrGenerate) || !errors.Is(err, nvcdigen.ErrMissingNodes) || !errors.As(err, &ne) || ne.DevRoot != root || ne.GPUNodes != 1 || ne.CapNodes != 0 {
		t.Errorf("MIG device without capability nodes: %v; want ErrMissingNodes under %s with the GPU's node only", err, root)
	}

	empty := newGenerator(t, srv, t.TempDir())
	if _, err := empty.GPUEdits(in); !errors.Is(err, nvcdigen.ErrMissingNodes) || !errors.As(err, &ne) || ne.GPUNodes != 0 {
		t.Errorf("GPU without its node: %v; want ErrMissingNodes", err)
	}
}
