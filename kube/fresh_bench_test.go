package kube

// These benchmarks are internal: they measure the relist path of
// NodePodSource (a consistent list applied to its store) against one watch
// event, neither of which the exported API isolates. A relist through Run
// also waits for the reflector's backoff, which is not its cost.

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/reservation"
)

// benchPods returns n running MIG pods of node n1, each with two
// containers, a reservation record and container statuses.
func benchPods(n int) []runtime.Object {
	objs := make([]runtime.Object, 0, n)
	for i := range n {
		name := "p" + strconv.Itoa(i)
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "default", Name: name, UID: types.UID("uid-" + name), ResourceVersion: strconv.Itoa(i + 1),
				Annotations: map[string]string{
					VGPUModeAnnotation:        VGPUModeMIG,
					reservation.AnnotationKey: `[{"containerIndex":0,"gpuUUID":"GPU-0","profile":"1g.10gb","placement":{"start":0,"size":1}}]`,
				},
			},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{
				{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPU: resource.MustParse("1")}}},
				{Name: "side"},
			}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: "side", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			}},
		})
	}
	return objs
}

// benchSource returns a source over a fake clientset holding n pods, with
// an OnInactive handler, whose store holds the listing.
func benchSource(b *testing.B, n int) (*NodePodSource, []runtime.Object) {
	b.Helper()
	objs := benchPods(n)
	s := NewNodePodSource(fake.NewClientset(objs...), "n1", NodePodSourceOptions{OnInactive: func(reservation.Pod) {}})
	relist(b, s)
	return s, objs
}

// relist lists as the reflector does after a watch ended and applies the
// listing.
func relist(b *testing.B, s *NodePodSource) {
	obj, err := s.lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	items, err := meta.ExtractListWithAlloc(obj)
	if err != nil {
		b.Fatal(err)
	}
	found := make([]any, len(items))
	for i := range items {
		found[i] = items[i]
	}
	rv, _ := meta.NewAccessor().ResourceVersion(obj)
	if err := s.store.Replace(found, rv); err != nil {
		b.Fatal(err)
	}
}

var benchSizes = []int{10, 110, 1000}

// BenchmarkRelist: one consistent list of the node's pods from the fake
// clientset (which copies every pod, as decoding would) applied to the
// source's store, with OnInactive comparisons.
func BenchmarkRelist(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			s, _ := benchSource(b, n)
			b.ReportAllocs()
			for b.Loop() {
				relist(b, s)
			}
		})
	}
}

// BenchmarkWatchEvent: one watch event, a modified pod (copied, as the
// fake's watch or decoding would) applied to the same store.
func BenchmarkWatchEvent(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			s, objs := benchSource(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p := objs[i%n].(*corev1.Pod).DeepCopy()
				p.ResourceVersion = strconv.Itoa(n + i + 1)
				if err := s.store.Update(p); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
