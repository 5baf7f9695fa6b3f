package kube_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// A scheduler's view of one node: pod events reach the ledger through the
// view's handlers (registered with an informer factory in a real
// scheduler), and a bind is recorded as soon as it happens, so an older
// event cannot undo it. Annotations alone claim nothing.
func ExampleSchedulerView() {
	ctx := context.Background()
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	gpus, _, _ := capability.Discover(ctx, fakehal.MustNew(fakehal.Options{}), capability.DefaultAllowlist())
	_, _ = kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus)
	node, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})

	view := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}), kube.SchedulerViewOptions{})
	view.NodeHandler().OnAdd(node, true)

	// A pod requesting one MIG device is reserved and bound.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", UID: "uid-train", ResourceVersion: "1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}}}}}
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: "3g.20gb"}}}
	as, err := view.Reserve("n1", pod, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... write reservation.EncodeString(schedule.Allocations(as)), bind ...
	view.Bound(pod, "n1", as)
	view.PodHandler().OnUpdate(nil, pod) // a lagging informer's view from before the bind
	rs, _, _ := view.Ledger().Pod("uid-train")
	fmt.Println("held:", rs[0].Profile, rs[0].Placement)

	// A pod requesting no GPU writes itself a record on the same GPU.
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "evil", UID: "uid-evil", ResourceVersion: "1",
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString(schedule.Allocations(as))}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}}}
	view.PodHandler().OnAdd(forged, false)
	for _, c := range view.Claims("n1") {
		fmt.Println("claim:", c.Pod, c.Pending, c.Ours)
	}
	fmt.Println("conflicts:", len(view.Ledger().Conflicts()))
	// Output:
	// held: 3g.20gb [4,8)
	// claim: default/train (uid-train) [1] true
	// conflicts: 0
}

// Another scheduler bound a pod that this view's informer has not
// delivered yet. A consistent listing of the node's pods, applied before
// deciding, counts it; the informer's older events then change nothing.
func ExampleSchedulerView_ObservePods() {
	ctx := context.Background()
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	gpus, _, _ := capability.Discover(ctx, fakehal.MustNew(fakehal.Options{}), capability.DefaultAllowlist())
	_, _ = kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus)
	node, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	view := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}), kube.SchedulerViewOptions{})
	view.NodeHandler().OnAdd(node, true)

	// The other scheduler's pod, bound to n1 with the whole GPU.
	entry := reservation.Allocation{GPUUUID: gpus[0].UUID, Profile: "7g.40gb", Placement: capability.Placement{Start: 0, Size: 8}}
	_, _ = client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other", UID: "uid-other", ResourceVersion: "7",
			Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{entry})}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}}}},
	}, metav1.CreateOptions{})

	err := view.ObservePods(ctx, func(ctx context.Context) ([]corev1.Pod, error) {
		// resourceVersion unset: a consistent read.
		list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	whole := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: "7g.40gb"}}}
	_, err = view.Ledger().Evaluate("n1", whole)
	fmt.Println("whole GPU free:", err == nil)
	for _, c := range view.Claims("n1") {
		fmt.Println("claim:", c.Pod, c.Pending, c.Ours)
	}
	// Output:
	// whole GPU free: false
	// claim: default/other (uid-other) [1] false
}
