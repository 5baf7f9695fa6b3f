package kube_test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

func ExampleParseRequest() {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			"nvidia.com/vgpu-mode":              "mig",
			"nvidia.com/mig-profile-preference": "3g",
			"nvidia.com/nouse-gputype":          "A30",
		}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "warmup"}},
			Containers: []corev1.Container{{
				Name: "train",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"nvidia.com/gpu":    resource.MustParse("2"),
					"nvidia.com/gpumem": resource.MustParse("9000"),
				}},
			}},
		},
	}
	req, err := kube.ParseRequest(pod)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, c := range req.Containers {
		fmt.Printf("container %d (%s): %d x %v\n", i, kube.ContainerAt(pod, i).Name, c.Devices, c.Memory)
	}
	fmt.Println("prefer", req.Preference, "avoid", req.NoUseTypes)

	pod.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem-percentage"] = resource.MustParse("150")
	delete(pod.Spec.Containers[0].Resources.Limits, "nvidia.com/gpumem")
	_, err = kube.ParseRequest(pod)
	var re *kube.RequestError
	if errors.As(err, &re) {
		fmt.Printf("container %d %s: %s\n", re.Container, re.Field, re.Reason)
	}
	// Output:
	// container 0 (warmup): 0 x whole GPU
	// container 1 (train): 2 x 9000MiB
	// prefer [3g] avoid [A30]
	// container 1 nvidia.com/gpumem-percentage: must be at most 100
}

func ExampleOwnershipGuard() {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "gpu-node-1", Labels: map[string]string{"nvidia.com/mig.config": "all-1g.5gb"},
	}})
	guard := kube.NewOwnershipGuard(client, "gpu-node-1", kube.OwnershipGuardOptions{})
	err := guard.Check(context.Background())
	var oe *kube.OwnershipError
	if errors.As(err, &oe) {
		fmt.Println(errors.Is(err, kube.ErrMIGManagerOwnsNode), oe.Evidence)
	}
	// Output:
	// true [label nvidia.com/mig.config="all-1g.5gb"]
}

func ExampleAnnotationWriter() {
	scheduled := reservation.Allocation{
		ContainerIndex: 0, DeviceIndex: 0, GPUUUID: "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f",
		Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "train", UID: "uid-1", ResourceVersion: "41",
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{scheduled})},
	}}
	client := fake.NewClientset(pod)
	w := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{})

	realized := scheduled.WithRuntime(reservation.RuntimeIdentity{
		MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 4, ComputeInstanceID: 0,
	})
	out, err := w.WriteRuntime(context.Background(), pod, []reservation.Allocation{realized})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Annotations[reservation.AnnotationKey])
	// Output:
	// [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d","gpuInstanceID":4,"computeInstanceID":0}]
}

func ExamplePodView() {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", UID: "uid-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	v := kube.PodView(pod)
	fmt.Println(v.Namespace, v.Name, v.UID, v.Phase, v.Deleting, v.Active())
	// Output:
	// default train uid-1 Running false true
}

func ExampleNodePodSource() {
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "gpu-node-1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "other", UID: "u2"}, Spec: corev1.PodSpec{NodeName: "gpu-node-2"}},
	)
	src := kube.NewNodePodSource(client, "gpu-node-1", kube.NodePodSourceOptions{})
	fmt.Println("before Run:", src.Snapshot().Complete, src.Err())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- src.Run(ctx) }() // Run owns the informer's goroutines
	src.WaitForSync(ctx)
	snap := src.Snapshot()
	fmt.Println("synced:", snap.Complete, len(snap.Pods), snap.Pods[0].Name)

	cancel()
	<-done // every goroutine has stopped
	fmt.Println("after Run:", src.Snapshot().Complete)
	// Output:
	// before Run: false kube: pod source not running
	// synced: true 1 train
	// after Run: false
}

// A scheduler rebuilds a node's occupancy from the records of its active
// pods, reserves a new pod on top of it and writes that pod's record.
func ExampleAllocations() {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1", Annotations: map[string]string{
		capability.NodeRegisterAnnotation: `[{"id":"GPU-a","count":3,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig",` +
			`"migProfiles":[{"name":"2g.10gb","memoryMB":9984,"core":29,"sliceCount":2,"placements":[{"start":0,"size":2},{"start":2,"size":2},{"start":4,"size":2}]}],"health":true}]`,
	}}}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-running", Annotations: map[string]string{
		reservation.AnnotationKey: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2}}]`,
	}}}
	ledger := placement.NewLedger(placement.LedgerOptions{})
	gpus, err := kube.NodeGPUs(node)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ledger.SetNode(node.Name, gpus); err != nil {
		fmt.Println(err)
		return
	}
	allocs, err := kube.PodAllocations(running)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ledger.AddPod(node.Name, string(running.UID), schedule.LedgerReservations(string(running.UID), allocs)); err != nil {
		fmt.Println(err)
		return
	}

	req := placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(9000)}}}
	as, err := ledger.Reserve(node.Name, "uid-new", &req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reservation.EncodeString(schedule.Allocations(as)))
	// Output:
	// [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":2,"size":2}}]
}
