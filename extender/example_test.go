package extender_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// A scheduler cycle for one MIG pod: filter the nodes, bind to the one
// that fits, and the pod carries its reservation.
func ExampleExtender() {
	ctx := context.Background()
	// A fake API server whose binding writes the Binding's annotations
	// onto the pod, as the real one does.
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-node"}})
	// The device plugin of gpu-node publishes one fake A100-SXM4-40GB.
	gpus, _, err := capability.Discover(ctx, fakehal.MustNew(fakehal.Options{}), capability.DefaultAllowlist())
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := kube.NewRegistrationPublisher(client, "gpu-node", kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus); err != nil {
		fmt.Println(err)
		return
	}
	pod, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", UID: "uid-train",
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1"), kube.ResourceGPUMem: resource.MustParse("9000")},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}

	ext := extender.New(client, extender.Options{})
	// The extender reads nodes and pods through informers, which run
	// while Run does; Sync waits until they have caught up.
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { _ = ext.Run(runCtx); close(ran) }()
	defer func() { stop(); <-ran }()
	if err := ext.Sync(ctx); err != nil {
		fmt.Println(err)
		return
	}
	res := ext.Filter(ctx, extender.Args{Pod: pod, NodeNames: &[]string{"gpu-node", "cpu-node"}})
	fmt.Println("fits:", *res.NodeNames)
	if err := ext.Bind(ctx, extender.BindingArgs{PodNamespace: "default", PodName: "train", PodUID: pod.UID, Node: "gpu-node"}); err != nil {
		fmt.Println(err)
		return
	}
	bound, err := client.CoreV1().Pods("default").Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	allocs, err := kube.PodAllocations(bound)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range allocs {
		_, realized := a.Runtime()
		fmt.Printf("c%d/d%d %s %s realized=%v\n", a.ContainerIndex, a.DeviceIndex, a.Profile, a.Placement, realized)
	}
	fmt.Println(reservation.AnnotationKey, "written:", bound.Annotations[reservation.AnnotationKey] != "")
	// Output:
	// fits: [gpu-node]
	// c0/d0 2g.10gb [0,2) realized=false
	// hami.io/vgpu-mig-allocations written: true
}
