package dradriver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/dradriver"
)

// recordingGen is a CDIGenerator whose edits name the instance they were
// asked for, with a mount and a hook as NVIDIA's library adds, and an
// NVIDIA_VISIBLE_DEVICES of its own that the driver must replace.
type recordingGen struct {
	mu    sync.Mutex
	asked []dradriver.CDIInstance
}

var errGen = errors.New("generator failed")

func (g *recordingGen) DeviceEdits(in dradriver.CDIInstance) (cdispec.ContainerEdits, error) {
	g.mu.Lock()
	g.asked = append(g.asked, in)
	g.mu.Unlock()
	return cdispec.ContainerEdits{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void", "GEN=" + in.MIGUUID},
		DeviceNodes: []*cdispec.DeviceNode{{Path: fmt.Sprintf("/dev/gen%d-gi%d-ci%d", in.GPU, in.GPUInstanceID, in.ComputeInstanceID)}},
	}, nil
}

func (g *recordingGen) GPUEdits(in dradriver.CDIInstance) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: fmt.Sprintf("/dev/gen%d", in.GPU)}}}, nil
}

func (g *recordingGen) CommonEdits() (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl"}},
		Mounts:      []*cdispec.Mount{{HostPath: "/usr/lib/libcuda.so.1", ContainerPath: "/usr/lib/libcuda.so.1"}},
		Hooks:       []*cdispec.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}},
	}, nil
}

// TestCDIGenerator: with Config.CDIGenerator, each device's edits are the
// generator's for that instance (parent GPU index, GI and CI IDs, MIG
// UUID), the spec carries the generator's common edits once, the
// generator's own NVIDIA_VISIBLE_DEVICES is replaced by the request's, and
// Config.DeviceNodes is not read.
func TestCDIGenerator(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	gen := &recordingGen{}
	d, err := dradriver.New(dradriver.Config{Node: testNode, Hardware: e.hw, Claims: e.claims, CDIDir: e.cdiDir, DataDir: e.dataDir,
		BootID: func() (string, error) { return "b", nil }, CDIGenerator: gen, DeviceNodes: dradriver.ProcNodes{Root: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := claimFor("uid-gen", deviceName(t, e.hw, 0, "1g.6gb", 0, 1), deviceName(t, e.hw, 1, "2g.12gb", 2, 2))
	e.claims.set(true, c)
	if r := prepareOne(t, d, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	spec := readSpec(t, e.cdiDir, "uid-gen")
	if len(spec.ContainerEdits.Mounts) != 1 || len(spec.ContainerEdits.Hooks) != 1 || len(spec.ContainerEdits.DeviceNodes) != 1 {
		t.Errorf("common edits %+v; want the generator's node, mount and hook", spec.ContainerEdits)
	}
	var migs []string
	for _, in := range e.hw.Snapshot() {
		migs = append(migs, in.ComputeInstances[0].MIGUUID)
	}
	visible := "NVIDIA_VISIBLE_DEVICES=" + strings.Join(migs, ",")
	for i, in := range e.hw.Snapshot() {
		dev := spec.Devices[i]
		ci := in.ComputeInstances[0]
		wantNode := fmt.Sprintf("/dev/gen%d-gi%d-ci%d", in.GPU, in.GIID, ci.ID)
		if len(dev.ContainerEdits.DeviceNodes) != 1 || dev.ContainerEdits.DeviceNodes[0].Path != wantNode {
			t.Errorf("device %s nodes %v, want [%s]", dev.Name, nodePaths(dev.ContainerEdits.DeviceNodes), wantNode)
		}
		if want := []string{"GEN=" + ci.MIGUUID, visible}; !slices.Equal(dev.ContainerEdits.Env, want) {
			t.Errorf("device %s env %v, want %v", dev.Name, dev.ContainerEdits.Env, want)
		}
	}
}

// TestCDIGeneratorError: a generator's error fails the claim's prepare,
// naming the device, and leaves no spec.
func TestCDIGeneratorError(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d, err := dradriver.New(dradriver.Config{Node: testNode, Hardware: e.hw, Claims: e.claims, CDIDir: e.cdiDir, DataDir: e.dataDir,
		BootID: func() (string, error) { return "b", nil }, CDIGenerator: &failingGen{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := claimFor("uid-fail", deviceName(t, e.hw, 0, "1g.6gb", 0, 1))
	e.claims.set(true, c)
	r := prepareOne(t, d, c)
	var ce *dradriver.ClaimError
	if !errors.Is(r.Err, errGen) || !errors.As(r.Err, &ce) || ce.Device == "" {
		t.Fatalf("prepare = %v; want the generator's error naming the device", r.Err)
	}
	if entries, _ := os.ReadDir(e.cdiDir); len(entries) != 0 {
		t.Errorf("spec files %v left after a failed generation", entries)
	}
}

// failingGen fails every MIG device's edits.
type failingGen struct{ recordingGen }

func (*failingGen) DeviceEdits(dradriver.CDIInstance) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{}, errGen
}

// TestFakeCDI: the fakehal generator numbers nodes as the device plugin's
// fake does, and a whole GPU gets its own node.
func TestFakeCDI(t *testing.T) {
	g := dradriver.NewFakeCDI()
	in := dradriver.CDIInstance{GPU: 1, GPUInstanceID: 2, ComputeInstanceID: 0}
	dev, _ := g.DeviceEdits(in)
	gpu, _ := g.GPUEdits(in)
	common, _ := g.CommonEdits()
	if len(dev.DeviceNodes) != 3 || dev.DeviceNodes[0].Path != "/dev/nvidia1" {
		t.Errorf("MIG nodes %v", nodePaths(dev.DeviceNodes))
	}
	if len(gpu.DeviceNodes) != 1 || gpu.DeviceNodes[0].Path != "/dev/nvidia1" {
		t.Errorf("GPU nodes %v", nodePaths(gpu.DeviceNodes))
	}
	if len(common.DeviceNodes) != 1 || common.DeviceNodes[0].Path != "/dev/nvidiactl" {
		t.Errorf("common nodes %v", nodePaths(common.DeviceNodes))
	}
}
