package dradriver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
)

// fakeProc writes the NVIDIA driver's /proc files for hw's GPUs under a
// new root: GPU i has device minor 2i+1 (minors need not be indexes), and
// every GI and CI ID up to 15 has a capability file whose minor encodes
// the GPU, GI and CI.
func fakeProc(t *testing.T, hw *fakehal.Node, uvm bool) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	devices := "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-caps\n"
	if uvm {
		devices += "510 nvidia-uvm\n"
	}
	write("proc/devices", devices+"\nBlock devices:\n  8 sd\n")
	devs, err := hw.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		minor := 2*d.Index + 1
		write(fmt.Sprintf("proc/driver/nvidia/gpus/0000:%02x:00.0/information", d.Index+7),
			fmt.Sprintf("Model: \t\t %s\nGPU UUID: \t %s\nBus Location: \t 0000:%02x:00.0\nDevice Minor: \t %d\nGPU Excluded:\t No\n", d.Name, d.UUID, d.Index+7, minor))
		for gi := range 16 {
			base := fmt.Sprintf("proc/driver/nvidia/capabilities/gpu%d/mig/gi%d", minor, gi)
			write(base+"/access", fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n", capMinor(minor, gi, -1)))
			for ci := range 8 {
				write(fmt.Sprintf("%s/ci%d/access", base, ci), fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n", capMinor(minor, gi, ci)))
			}
		}
	}
	return root
}

func capMinor(gpuMinor, gi, ci int) int { return 1000*gpuMinor + 10*gi + ci + 1 }

func readSpec(t *testing.T, dir, uid string) cdispec.Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "k8s.mig.dynmig.io-mig_"+uid+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

func nodePaths(ns []*cdispec.DeviceNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, fmt.Sprintf("%s c %d:%d", n.Path, n.Major, n.Minor))
	}
	return out
}

// TestCDIDeviceNodes: with a NodeSource, each MIG device's CDI edits
// inject its GPU and compute instance capability nodes and its parent
// GPU's node, the spec injects nvidiactl and nvidia-uvm, and a container
// given several MIG devices of one request sees every one of them in
// NVIDIA_VISIBLE_DEVICES.
func TestCDIDeviceNodes(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	root := fakeProc(t, e.hw, true)
	d, err := dradriver.New(dradriver.Config{Node: testNode, Hardware: e.hw, Claims: e.claims, CDIDir: e.cdiDir, DataDir: e.dataDir,
		BootID: func() (string, error) { return "b", nil }, DeviceNodes: dradriver.ProcNodes{Root: root}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := claimFor("uid-two", deviceName(t, e.hw, 0, "1g.6gb", 0, 1), deviceName(t, e.hw, 1, "2g.12gb", 2, 2))
	e.claims.set(true, c)
	r := prepareOne(t, d, c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	spec := readSpec(t, e.cdiDir, "uid-two")
	if got, want := nodePaths(spec.ContainerEdits.DeviceNodes), []string{"/dev/nvidiactl c 195:255", "/dev/nvidia-uvm c 510:0", "/dev/nvidia-uvm-tools c 510:1"}; !slices.Equal(got, want) {
		t.Errorf("common nodes %v, want %v", got, want)
	}
	byGPU := map[int]struct{ gi, ci uint32 }{}
	var migs []string
	for _, in := range e.hw.Snapshot() {
		byGPU[in.GPU] = struct{ gi, ci uint32 }{in.GIID, in.ComputeInstances[0].ID}
	}
	for i, dev := range spec.Devices {
		gpuMinor := 2*i + 1
		inst := byGPU[i]
		want := []string{
			fmt.Sprintf("/dev/nvidia%d c 195:%d", gpuMinor, gpuMinor),
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d c 236:%d", capMinor(gpuMinor, int(inst.gi), -1), capMinor(gpuMinor, int(inst.gi), -1)),
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d c 236:%d", capMinor(gpuMinor, int(inst.gi), int(inst.ci)), capMinor(gpuMinor, int(inst.gi), int(inst.ci))),
		}
		if got := nodePaths(dev.ContainerEdits.DeviceNodes); !slices.Equal(got, want) {
			t.Errorf("device %s nodes %v, want %v", dev.Name, got, want)
		}
		if m := dev.ContainerEdits.DeviceNodes[1].FileMode; m == nil || *m != 0o444 {
			t.Errorf("device %s cap node mode %v, want 0444", dev.Name, m)
		}
		for _, in := range e.hw.Snapshot() {
			if in.GPU == i {
				migs = append(migs, in.ComputeInstances[0].MIGUUID)
			}
		}
	}
	want := "NVIDIA_VISIBLE_DEVICES=" + migs[0] + "," + migs[1]
	for _, dev := range spec.Devices {
		if !slices.Equal(dev.ContainerEdits.Env, []string{want}) {
			t.Errorf("device %s env %v, want [%s]", dev.Name, dev.ContainerEdits.Env, want)
		}
	}
}

// TestProcNodesErrors: a GPU or capability the driver's files do not
// describe is a *DeviceNodeError, and the claim is not handed out (its
// instance stays for the kubelet's retry); without nvidia-uvm only
// nvidiactl is common.
func TestProcNodesErrors(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30"}})
	root := fakeProc(t, hw, false)
	p := dradriver.ProcNodes{Root: root}
	if got, err := p.ControlNodes(); err != nil || len(got) != 1 || got[0].Path != "/dev/nvidiactl" {
		t.Errorf("ControlNodes without nvidia-uvm = %v, %v; want nvidiactl", got, err)
	}
	devs, err := hw.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var de *dradriver.DeviceNodeError
	for _, tc := range []struct {
		name   string
		gpu    string
		gi, ci uint32
	}{
		{"unknown GPU", "GPU-00000000-0000-4000-8000-000000000000", 1, 0},
		{"unknown GPU instance", devs[0].UUID, 99, 0},
		{"unknown compute instance", devs[0].UUID, 1, 99},
	} {
		if _, err := p.MIGNodes(tc.gpu, tc.gi, tc.ci); !errors.Is(err, dradriver.ErrDeviceNodes) || !errors.As(err, &de) {
			t.Errorf("%s: %v, want a *DeviceNodeError", tc.name, err)
		}
	}
	if _, err := (dradriver.ProcNodes{Root: t.TempDir()}).ControlNodes(); !errors.Is(err, dradriver.ErrDeviceNodes) {
		t.Errorf("no /proc/devices: %v, want ErrDeviceNodes", err)
	}

	e := newEnv(t, "NVIDIA A30")
	d, err := dradriver.New(dradriver.Config{Node: testNode, Hardware: e.hw, Claims: e.claims, CDIDir: e.cdiDir, DataDir: e.dataDir,
		BootID: func() (string, error) { return "b", nil }, DeviceNodes: dradriver.ProcNodes{Root: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := claimFor("uid-a", deviceName(t, e.hw, 0, "1g.6gb", 0, 1))
	e.claims.set(true, c)
	if r := prepareOne(t, d, c); !errors.Is(r.Err, dradriver.ErrDeviceNodes) {
		t.Errorf("prepare without the driver's files: %v, want ErrDeviceNodes", r.Err)
	}
	if pc, ok := d.Checkpoint().Claim("uid-a"); !ok || pc.State != dradriver.PrepareStarted {
		t.Errorf("checkpoint %+v, %t; want PrepareStarted", pc, ok)
	}
}

// FuzzProcNodes: whatever the driver's files hold, ProcNodes returns nodes
// or a *DeviceNodeError, never panics, and never a negative number.
func FuzzProcNodes(f *testing.F) {
	f.Add([]byte("Character devices:\n236 nvidia-caps\n510 nvidia-uvm\n"), []byte("GPU UUID: GPU-6b813aea-996a-440d-ab86-4736b86702bf\nDevice Minor: 3\n"), []byte("DeviceFileMinor: 31\nDeviceFileMode: 292\n"))
	f.Add([]byte("236"), []byte("Device Minor: -1"), []byte("DeviceFileMinor: x"))
	f.Fuzz(func(t *testing.T, devices, info, capFile []byte) {
		root := t.TempDir()
		write := func(rel string, data []byte) {
			p := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("proc/devices", devices)
		write("proc/driver/nvidia/gpus/0000:07:00.0/information", info)
		write("proc/driver/nvidia/capabilities/gpu3/mig/gi1/access", capFile)
		write("proc/driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access", capFile)
		p := dradriver.ProcNodes{Root: root}
		nodes, err := p.MIGNodes("GPU-6b813aea-996a-440d-ab86-4736b86702bf", 1, 0)
		ctl, cerr := p.ControlNodes()
		for _, e := range []error{err, cerr} {
			var de *dradriver.DeviceNodeError
			if e != nil && !errors.As(e, &de) {
				t.Fatalf("error %v is not a *DeviceNodeError", e)
			}
		}
		for _, n := range append(nodes, ctl...) {
			if n.Major < 0 || n.Minor < 0 || n.Path == "" {
				t.Fatalf("bad node %+v", n)
			}
		}
	})
}
