package dradriver_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
)

const testNode = "node-a"

// claimList is a ClaimSource whose listing tests set.
type claimList struct {
	mu       sync.Mutex
	claims   []*resourceapi.ResourceClaim
	complete bool
}

func (l *claimList) Claims() ([]*resourceapi.ResourceClaim, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*resourceapi.ResourceClaim(nil), l.claims...), l.complete
}

func (l *claimList) set(complete bool, claims ...*resourceapi.ResourceClaim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims, l.complete = claims, complete
}

// env is one node: fake hardware, directories, a claim listing.
type env struct {
	hw      *fakehal.Node
	claims  *claimList
	cdiDir  string
	dataDir string
	allow   capability.Allowlist
	client  kubernetes.Interface // nil: the driver has no API client
	boot    string               // the node's boot ID
}

func newEnv(t *testing.T, models ...string) *env {
	t.Helper()
	hw, err := fakehal.New(fakehal.Options{GPUs: models})
	if err != nil {
		t.Fatal(err)
	}
	return &env{hw: hw, claims: &claimList{complete: true}, cdiDir: t.TempDir(), dataDir: t.TempDir(), boot: "boot-1"}
}

// driver returns a set-up driver over the env; a second call is a restart.
func (e *env) driver(t *testing.T) *dradriver.Driver {
	t.Helper()
	d, err := dradriver.New(dradriver.Config{
		Node: testNode, Hardware: e.hw, Claims: e.claims, Client: e.client, Allowlist: e.allow,
		CDIDir: e.cdiDir, DataDir: e.dataDir, BootID: func() (string, error) { return e.boot + "\n", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(context.Background()); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return d
}

// claimFor returns a claim allocated the named devices of this node, all
// for request "gpu".
func claimFor(uid string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "claim-" + uid, UID: types.UID(uid)}}
	alloc := &resourceapi.AllocationResult{}
	for _, d := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: dradriver.DriverName, Pool: testNode, Device: d,
		})
	}
	c.Status.Allocation = alloc
	return c
}

// deviceName names a partition of the GPU at index gpu of hw.
func deviceName(t *testing.T, hw *fakehal.Node, gpu int, profile string, start, size uint32) string {
	t.Helper()
	devs, err := hw.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n, err := dradriver.Partition{GPUUUID: devs[gpu].UUID, Profile: profile, Placement: capability.Placement{Start: start, Size: size}}.DeviceName()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// profileClaim is a claim with one request for count devices of the
// profile, through the driver's class, as deploy/dra's template asks.
func profileClaim(uid, profile string, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "claim-" + uid, UID: types.UID(uid)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: dradriver.DeviceClassName,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["` + dradriver.DriverName + `"].profile == ` + strconv.Quote(profile),
				}}},
				AllocationMode: resourceapi.DeviceAllocationModeExactCount,
				Count:          count,
			},
		}}}},
	}
}

// deviceClass is deploy/dra's DeviceClass.
func deviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: dradriver.DeviceClassName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "` + dradriver.DriverName + `" && device.attributes["` + dradriver.DriverName + `"].type == "mig"`,
		}}}},
	}
}

type classLister struct{ class *resourceapi.DeviceClass }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{l.class}, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != l.class.Name {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return l.class, nil
}

// allocate runs the real structured allocator, as kube-scheduler does, on
// the catalog's slices with the devices of allocated claims taken, and
// returns claim with its allocation, or nil when it does not fit.
func allocate(t *testing.T, cat *dradriver.Catalog, claim *resourceapi.ResourceClaim, allocated ...*resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	return allocateWith(t, cat, deviceClass(), claim, allocated...)
}

// allocateWith is allocate with the given DeviceClass.
func allocateWith(t *testing.T, cat *dradriver.Catalog, class *resourceapi.DeviceClass, claim *resourceapi.ResourceClaim, allocated ...*resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	features := structured.Features{PartitionableDevices: true, PrioritizedList: true, DeviceTaints: true}
	taken := sets.New[structured.DeviceID]()
	for _, c := range allocated {
		for _, r := range c.Status.Allocation.Devices.Results {
			taken.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	state := structured.AllocatedState{
		AllocatedDevices:         taken,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	a, err := structured.NewAllocator(ctx, features, state, classLister{class}, cat.ResourceSlices(), cel.NewCache(8, cel.Features{}))
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
	res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if len(res) == 0 {
		return nil
	}
	out := claim.DeepCopy()
	out.Status.Allocation = &res[0]
	return out
}
