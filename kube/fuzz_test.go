package kube_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/kube"
)

// FuzzParseRequest feeds arbitrary annotation values and quantities to the
// request parser: it must never panic, and every failure must be typed.
func FuzzParseRequest(f *testing.F) {
	f.Add("mig", "1", "9000", "", "GPU-a,GPU-b", "4g")
	f.Add("mig", "2", "", "50", "", "")
	f.Add("MIG", "1500m", "0.5", "101", ",,", " , ")
	f.Add("mig", "-1", "1Ei", "0", "x", "3g.20gb,2g")
	f.Fuzz(func(t *testing.T, mode, gpus, mem, pct, uuids, pref string) {
		limits := corev1.ResourceList{}
		for name, v := range map[corev1.ResourceName]string{kube.ResourceGPU: gpus, kube.ResourceGPUMem: mem, kube.ResourceGPUMemPercentage: pct} {
			if q, err := resource.ParseQuantity(v); err == nil {
				limits[name] = q
			}
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				kube.VGPUModeAnnotation: mode, kube.UseGPUUUIDAnnotation: uuids, kube.ProfilePreferenceAnnotation: pref,
			}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: limits}}}},
		}
		req, err := kube.ParseRequest(pod)
		if err != nil {
			var re *kube.RequestError
			if !errors.Is(err, kube.ErrNotMIG) && !errors.As(err, &re) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("ParseRequest returned a request that does not validate: %v", err)
		}
	})
}
