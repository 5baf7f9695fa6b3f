package dradriver_test

import (
	"context"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

// TestEnableMIG: on a node whose two GPUs have MIG mode off, the second
// running a process, Config.Manager.EnableMIG switches the idle GPU to MIG
// mode at setup and publishes its devices; the busy one is left alone.
// Without it nothing is switched and nothing published.
func TestEnableMIG(t *testing.T) {
	for _, enable := range []bool{true, false} {
		hw := fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30", "NVIDIA A30"}, MIGDisabled: true})
		if _, err := hw.StartProcess(1, ""); err != nil {
			t.Fatal(err)
		}
		d, err := dradriver.New(dradriver.Config{
			Node: testNode, Hardware: hw, Claims: &claimList{complete: true},
			CDIDir: t.TempDir(), DataDir: t.TempDir(), BootID: func() (string, error) { return "boot-1\n", nil },
			Manager: realize.Options{EnableMIG: enable},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Setup(context.Background()); err != nil {
			t.Fatalf("enable %v: Setup: %v", enable, err)
		}
		idle, _ := hw.Device(0)
		busy, _ := hw.Device(1)
		perGPU := map[int]int{}
		for _, dev := range d.Catalog().Devices() {
			perGPU[dev.GPU]++
		}
		if busy.MIGMode != capability.MIGDisabled || busy.PendingMIGMode != capability.MIGDisabled || perGPU[1] != 0 {
			t.Errorf("enable %v: the GPU running a process: MIG %v (pending %v), %d devices; want it left alone",
				enable, busy.MIGMode, busy.PendingMIGMode, perGPU[1])
		}
		switch {
		case enable && (idle.MIGMode != capability.MIGEnabled || perGPU[0] == 0):
			t.Errorf("with EnableMIG: the idle GPU has MIG %v and %d devices; want MIG on and its devices published", idle.MIGMode, perGPU[0])
		case !enable && (idle.MIGMode != capability.MIGDisabled || perGPU[0] != 0):
			t.Errorf("without EnableMIG: the idle GPU has MIG %v and %d devices; want it left alone", idle.MIGMode, perGPU[0])
		}
	}
}

// TestEnableMIGWaitingForReset: a GPU whose MIG mode change waits for a
// reset does not stop the driver's setup; it publishes nothing until then.
func TestEnableMIGWaitingForReset(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30"}, MIGDisabled: true, ModeChangeNeedsReset: true})
	d, err := dradriver.New(dradriver.Config{
		Node: testNode, Hardware: hw, Claims: &claimList{complete: true},
		CDIDir: t.TempDir(), DataDir: t.TempDir(), BootID: func() (string, error) { return "boot-1\n", nil },
		Manager: realize.Options{EnableMIG: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(context.Background()); err != nil {
		t.Fatalf("Setup: %v, want the driver to start with the GPU left out", err)
	}
	if n := len(d.Catalog().Devices()); n != 0 {
		t.Errorf("%d devices published for a GPU whose MIG mode waits for a reset", n)
	}
}
