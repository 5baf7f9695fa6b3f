package kube_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
)

// res builds a resource list from name/quantity pairs.
func res(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func migPod(ann map[string]string, init []corev1.Container, containers ...corev1.Container) *corev1.Pod {
	a := map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}
	for k, v := range ann {
		a[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p", Annotations: a},
		Spec:       corev1.PodSpec{InitContainers: init, Containers: containers},
	}
}

func ctr(name string, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: limits}}
}

func TestParseRequest(t *testing.T) {
	pod := migPod(map[string]string{
		kube.UseGPUUUIDAnnotation:        "GPU-a, GPU-b",
		kube.NoUseGPUUUIDAnnotation:      "GPU-c",
		kube.UseGPUTypeAnnotation:        "A100",
		kube.NoUseGPUTypeAnnotation:      "A30,,H100",
		kube.ProfilePreferenceAnnotation: "4g,2g.10gb",
	},
		[]corev1.Container{ctr("init", res("nvidia.com/gpu", "1", "nvidia.com/gpumem", "5000"))},
		ctr("whole", res("nvidia.com/gpu", "2")),
		ctr("cpu-only", res("cpu", "1")),
		ctr("pct", res("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "50")),
		corev1.Container{Name: "requests-only", Resources: corev1.ResourceRequirements{Requests: res("nvidia.com/gpu", "1", "nvidia.com/gpumem", "10000")}},
		ctr("both", res("nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000", "nvidia.com/gpumem-percentage", "90")),
	)
	got, err := kube.ParseRequest(pod)
	require.NoError(t, err)
	want := placement.Request{
		Containers: []placement.ContainerRequest{
			{Devices: 1, Memory: placement.MiB(5000)},
			{Devices: 2},
			{},
			{Devices: 1, Memory: placement.Percent(50)},
			{Devices: 1, Memory: placement.MiB(10000)},
			{Devices: 1, Memory: placement.MiB(3000)},
		},
		Preference: []string{"4g", "2g.10gb"},
		UseUUIDs:   []string{"GPU-a", "GPU-b"},
		NoUseUUIDs: []string{"GPU-c"},
		UseTypes:   []string{"A100"},
		NoUseTypes: []string{"A30", "H100"},
	}
	assert.Equal(t, want, got)
	assert.Equal(t, 6, got.DeviceCount())
}

func TestParseRequestNotMIG(t *testing.T) {
	pod := migPod(nil, nil, ctr("c", res("nvidia.com/gpu", "1")))
	delete(pod.Annotations, kube.VGPUModeAnnotation)
	_, err := kube.ParseRequest(pod)
	assert.ErrorIs(t, err, kube.ErrNotMIG)
	assert.False(t, kube.WantsMIG(pod))

	pod.Annotations[kube.VGPUModeAnnotation] = "hami-core"
	_, err = kube.ParseRequest(pod)
	assert.ErrorIs(t, err, kube.ErrNotMIG)

	pod.Annotations[kube.VGPUModeAnnotation] = " MIG"
	_, err = kube.ParseRequest(pod)
	require.ErrorIs(t, err, kube.ErrInvalidRequest, "a near miss is reported, not ignored")
	var re *kube.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, -1, re.Container)
	assert.Equal(t, kube.VGPUModeAnnotation, re.Field)
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct {
		name      string
		pod       *corev1.Pod
		container int
		cname     string
		field     string
		placement bool // placement's validation refused it, and the error says so
	}{
		{name: "fractional count", pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "1500m"))),
			container: 0, cname: "a", field: "nvidia.com/gpu"},
		{name: "negative count", pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "-1"))),
			container: 0, cname: "a", field: "nvidia.com/gpu"},
		{name: "zero gpumem", pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "1", "nvidia.com/gpumem", "0"))),
			container: 0, cname: "a", field: "nvidia.com/gpumem"},
		{name: "fractional gpumem", pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "1", "nvidia.com/gpumem", "0.5"))),
			container: 0, cname: "a", field: "nvidia.com/gpumem"},
		{name: "percentage above 100", pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "101"))),
			container: 0, cname: "a", field: "nvidia.com/gpumem-percentage"},
		{name: "percentage 0", pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "0"))),
			container: 0, cname: "a", field: "nvidia.com/gpumem-percentage"},
		{name: "memory without devices", pod: migPod(nil, []corev1.Container{ctr("i", nil)}, ctr("a", res("nvidia.com/gpumem", "1000"))),
			container: 1, cname: "a", field: "nvidia.com/gpumem"},
		{name: "too many devices", pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "257"))),
			container: 0, cname: "a", field: "nvidia.com/gpu", placement: true},
		{name: "too many devices in total", pod: migPod(nil, []corev1.Container{ctr("i", res("nvidia.com/gpu", "200"))}, ctr("a", res("nvidia.com/gpu", "100"))),
			container: 1, cname: "a", field: "nvidia.com/gpu", placement: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kube.ParseRequest(tt.pod)
			require.ErrorIs(t, err, kube.ErrInvalidRequest)
			var re *kube.RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.container, re.Container)
			assert.Equal(t, tt.cname, re.ContainerName)
			assert.Equal(t, tt.field, re.Field)
			assert.NotEmpty(t, re.Reason)
			var pe *placement.RequestError
			assert.Equal(t, tt.placement, errors.As(err, &pe), "wraps placement's *RequestError")
		})
	}
}
