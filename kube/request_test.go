package kube_test

import (
	"errors"
	"fmt"
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

// A device plugin serving another resource name: ParseRequestFor counts
// devices under that name only, and its errors name it.
func TestParseRequestFor(t *testing.T) {
	const mig corev1.ResourceName = "example.com/mig"
	tests := []struct {
		name     string
		resource corev1.ResourceName
		pod      *corev1.Pod
		want     []placement.ContainerRequest
		field    string // a *RequestError naming this field; "" for none
	}{
		{name: "renamed resource counts", resource: mig,
			pod:  migPod(nil, nil, ctr("a", res("example.com/mig", "2", "nvidia.com/gpumem", "5000")), ctr("b", res("nvidia.com/gpu", "1"))),
			want: []placement.ContainerRequest{{Devices: 2, Memory: placement.MiB(5000)}, {}}},
		{name: "empty means nvidia.com/gpu", resource: "",
			pod:  migPod(nil, nil, ctr("a", res("example.com/mig", "2")), ctr("b", res("nvidia.com/gpu", "1"))),
			want: []placement.ContainerRequest{{}, {Devices: 1}}},
		{name: "memory beside the default resource only", resource: mig,
			pod: migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "50"))), field: "nvidia.com/gpumem-percentage"},
		{name: "bad count names the renamed resource", resource: mig,
			pod: migPod(nil, nil, ctr("a", res("example.com/mig", "1500m"))), field: "example.com/mig"},
		{name: "too many devices names the renamed resource", resource: mig,
			pod: migPod(nil, nil, ctr("a", res("example.com/mig", "257"))), field: "example.com/mig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kube.ParseRequestFor(tt.pod, tt.resource)
			if tt.field != "" {
				var re *kube.RequestError
				require.ErrorAs(t, err, &re)
				assert.Equal(t, tt.field, re.Field)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got.Containers)
		})
	}
	// ParseRequest is ParseRequestFor with nvidia.com/gpu.
	pod := migPod(nil, nil, ctr("a", res("nvidia.com/gpu", "1", "nvidia.com/gpumem", "4000")))
	got, err := kube.ParseRequest(pod)
	require.NoError(t, err)
	want, err := kube.ParseRequestFor(pod, kube.ResourceGPU)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// A device plugin that serves MIG devices under another resource name:
// the scheduler reads requests with that name, the one it also trusts
// reservations by.
func ExampleParseRequestFor() {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"nvidia.com/vgpu-mode": "mig"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "train",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"example.com/mig":   resource.MustParse("1"),
				"nvidia.com/gpumem": resource.MustParse("9000"),
			}},
		}}},
	}
	req, err := kube.ParseRequestFor(pod, "example.com/mig")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("example.com/mig:", req.DeviceCount(), "device of", req.Containers[0].Memory)
	_, err = kube.ParseRequest(pod)
	var re *kube.RequestError
	if errors.As(err, &re) {
		fmt.Printf("as nvidia.com/gpu: %s: %s\n", re.Field, re.Reason)
	}
	// Output:
	// example.com/mig: 1 device of 9000MiB
	// as nvidia.com/gpu: nvidia.com/gpumem: set on a container that requests no nvidia.com/gpu
}
