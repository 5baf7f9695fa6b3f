package dradriver_test

import (
	"context"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
)

// The devices a fake A30 node publishes while slot 0 is allocated: per
// profile, the free placements first, in the order dynmig's default policy
// prefers them (the next 1g.6gb goes next to the taken slot, keeping
// [2,4) whole for a 2g.12gb), then the blocked ones.
func ExampleNewCatalog() {
	hw := fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30"}})
	gpus, _, err := capability.Discover(context.Background(), hw, capability.DefaultAllowlist())
	if err != nil {
		panic(err)
	}
	used := map[string]placement.Occupancy{gpus[0].UUID: placement.Occupancy(0).Take(capability.Placement{Start: 0, Size: 1})}
	cat, err := dradriver.NewCatalog("node-a", gpus, used)
	if err != nil {
		panic(err)
	}
	for _, d := range cat.Devices() {
		fmt.Println(d.Partition.Profile, d.Partition.Placement)
	}
	fmt.Println(cat.Devices()[0].Name)
	fmt.Println(len(cat.ResourceSlices()), "slices")
	// Output:
	// 1g.6gb [1,2)
	// 1g.6gb [2,3)
	// 1g.6gb [3,4)
	// 1g.6gb [0,1)
	// 2g.12gb [2,4)
	// 2g.12gb [0,2)
	// 4g.24gb [0,4)
	// mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-1-1
	// 4 slices
}

// The kubelet prepares a claim the scheduler allocated one 2g.12gb device
// of a fake A30 node: the driver creates exactly that instance and returns
// its CDI device; unpreparing destroys it.
func ExampleDriver_PrepareResourceClaims() {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30"}})
	cdiDir, _ := os.MkdirTemp("", "cdi")
	dataDir, _ := os.MkdirTemp("", "plugin")
	defer os.RemoveAll(cdiDir)
	defer os.RemoveAll(dataDir)

	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", UID: "3f2a"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: dradriver.DriverName, Pool: "node-a",
			Device: "mig-6b813aea-996a-440d-ab86-4736b86702bf-2g12gb-2-2",
		}},
	}}
	d, err := dradriver.New(dradriver.Config{
		Node: "node-a", Hardware: hw, Claims: staticClaims{claim},
		CDIDir: cdiDir, DataDir: dataDir,
	})
	if err != nil {
		panic(err)
	}
	if err := d.Setup(ctx); err != nil {
		panic(err)
	}
	res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	for _, dev := range res[claim.UID].Devices {
		fmt.Println(dev.Requests, dev.CDIDeviceIDs)
	}
	for _, in := range hw.Snapshot() {
		fmt.Println("instance at", in.Placement, in.ComputeInstances[0].MIGUUID)
	}
	obj := kubeletplugin.NamespacedObject{UID: claim.UID}
	obj.Namespace, obj.Name = claim.Namespace, claim.Name
	errs, _ := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{obj})
	fmt.Println("unprepared:", errs[claim.UID], len(hw.Snapshot()), "instances left")
	// Output:
	// [gpu] [k8s.mig.dynmig.io/mig=3f2a-mig-6b813aea-996a-440d-ab86-4736b86702bf-2g12gb-2-2]
	// instance at [2,4) MIG-ab957e7c-034c-4f79-bb63-8d743dc72d61
	// unprepared: <nil> 0 instances left
}

// staticClaims is a complete listing of fixed claims.
type staticClaims []*resourceapi.ResourceClaim

func (s staticClaims) Claims() ([]*resourceapi.ResourceClaim, bool) { return s, true }
