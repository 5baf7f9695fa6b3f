package chart_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/kube"
)

// TestAdmissionPolicy: the chart's MutatingAdmissionPolicy (its checked-in
// rendering for a cluster serving admissionregistration.k8s.io/v1) sends
// pods that carry the opt-in nvidia.com/vgpu-mode: mig to the dynmig
// scheduler, and leaves other pods alone: pods naming another scheduler,
// and pods asking for nvidia.com/gpumem without the opt-in, which every
// dynmig node would refuse.
func TestAdmissionPolicy(t *testing.T) {
	ctx := cluster.TestContext(t, 10*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	admin := c.Admin()
	if _, err := c.ApplyManifests(ctx, filepath.Join(filepath.Dir(renderedPath("extender")), "admission-policy.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpumem := corev1.ResourceList{kube.ResourceGPUMem: resource.MustParse("9000")}
	mig := map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}
	pod := func(name, scheduler string, annotations map[string]string, limits, requests corev1.ResourceList, init bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec:       corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		}
		c := corev1.Container{Name: "c", Image: "cuda", Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests}}
		if init {
			p.Spec.InitContainers = []corev1.Container{c}
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	// The policy takes effect once the API server has loaded it: create
	// routed pods until one is routed.
	n := 0
	if err := cluster.WaitFor(ctx, 100*time.Millisecond, "the admission policy in force", func(ctx context.Context) (bool, error) {
		n++
		got, err := admin.CoreV1().Pods("e2e").Create(ctx, pod(fmt.Sprintf("probe-%d", n), "", mig, gpumem, nil, false), metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return got.Spec.SchedulerName == "dynmig-scheduler", nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod("opted-in-limit", "", mig, gpumem, nil, false), "dynmig-scheduler"},
		{pod("opted-in-init", "", mig, gpumem, nil, true), "dynmig-scheduler"},
		{pod("annotated", "", mig, nil, nil, false), "dynmig-scheduler"},
		{pod("default-named", "default-scheduler", mig, gpumem, nil, false), "dynmig-scheduler"},
		{pod("gpumem-limit", "", nil, gpumem, nil, false), "default-scheduler"},
		{pod("gpumem-init", "", nil, gpumem, nil, true), "default-scheduler"},
		{pod("plain", "", nil, nil, nil, false), "default-scheduler"},
		{pod("other-mode", "", map[string]string{kube.VGPUModeAnnotation: "hami-core"}, nil, nil, false), "default-scheduler"},
		{pod("own-scheduler", "my-scheduler", mig, gpumem, nil, false), "my-scheduler"},
	} {
		got, err := admin.CoreV1().Pods("e2e").Create(ctx, tc.pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.pod.Name, err)
		}
		if got.Spec.SchedulerName != tc.want {
			t.Errorf("%s: schedulerName %q, want %q", tc.pod.Name, got.Spec.SchedulerName, tc.want)
		}
	}
}
