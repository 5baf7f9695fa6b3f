package readme_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/examples/readme"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// The scheduler snippet, run: a node of one fake A100 publishes its
// registration, and a pod asking for 9,000 MiB gets the smallest profile
// that covers it, 2g.10gb (9,984 MiB), at a legal placement.
func ExampleScheduler() {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(1, "A100-SXM4-40GB"), Seed: 1})
	gpus, _, err := capability.Discover(context.Background(), hw, capability.DefaultAllowlist())
	if err != nil {
		fmt.Println(err)
		return
	}
	devs, _ := capability.MIGNodeDevices(gpus)
	reg, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		fmt.Println(err)
		return
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1",
		Annotations: map[string]string{capability.NodeRegisterAnnotation: string(reg)}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("9000")},
		}}}},
	}

	value, err := readme.Scheduler(node, nil, pod)
	fmt.Println(value, err)
	// Output:
	// [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-ba3d4bd4-304b-481b-8fda-2b58833d93d0","profile":"2g.10gb","placement":{"start":0,"size":2}}] <nil>
}

// The DRA driver snippet, run: one claim allocated a 1g.6gb device at
// [0,1) of a fake A30 is prepared (one MIG device is created there and
// recorded) and unprepared (the device is destroyed).
func ExampleDRADriver() {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(1, "A30"), Seed: 1})
	dev, _ := hw.Device(0)
	claim := realize.Holder{UID: "claim-1", Namespace: "default", Name: "gpu-claim", Devices: []realize.Want{{
		Allocation: reservation.Allocation{GPUUUID: dev.UUID, Profile: "1g.6gb", Placement: capability.Placement{Start: 0, Size: 1}},
	}}}
	listClaims := func() ([]realize.Holder, bool) { return []realize.Holder{claim}, true }
	record := func(devs []realize.Device) error {
		for _, d := range devs {
			fmt.Println("prepared", d.Entry.Profile, d.Entry.Placement, "instances:", len(hw.Snapshot()))
			claim.Devices[d.Index].Allocation = d.Entry // the checkpoint: runtime identity filled in
		}
		return nil
	}

	err := readme.DRADriver(ctx, hw, nil, "claim-1", listClaims, record)
	fmt.Println("after unprepare, instances:", len(hw.Snapshot()), err)
	// Output:
	// prepared 1g.6gb [0,1) instances: 1
	// after unprepare, instances: 0 <nil>
}
