package deviceplugin_test

import (
	"context"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

func TestParseDeviceListStrategy(t *testing.T) {
	for _, d := range deviceplugin.DeviceListStrategies() {
		got, err := deviceplugin.ParseDeviceListStrategy(string(d))
		require.NoError(t, err)
		assert.Equal(t, d, got)
	}
	got, err := deviceplugin.ParseDeviceListStrategy("")
	require.NoError(t, err)
	assert.Equal(t, deviceplugin.DeviceListEnvVar, got, "the zero value keeps the environment variable")
	for _, bad := range []string{"cdi", "envvar,cdi-cri", "ENVVAR"} {
		_, err := deviceplugin.ParseDeviceListStrategy(bad)
		assert.ErrorIs(t, err, deviceplugin.ErrDeviceListStrategy, bad)
	}
	_, err = deviceplugin.New(deviceplugin.Config{Node: "n1", Client: kubetest.NewClientset(), Hardware: fakehal.MustNew(fakehal.Options{}),
		SocketDir: t.TempDir(), DeviceListStrategy: "cdi"})
	assert.ErrorIs(t, err, deviceplugin.ErrDeviceListStrategy, "New refuses an unknown strategy")
}

// TestAllocateResponseByStrategy: each strategy hands a container with two
// MIG devices exactly its devices, and nothing else.
func TestAllocateResponseByStrategy(t *testing.T) {
	tests := []struct {
		strategy deviceplugin.DeviceListStrategy
		want     func(uuids []string) *v1beta1.ContainerAllocateResponse
	}{{
		strategy: "", // the zero value
		want: func(u []string) *v1beta1.ContainerAllocateResponse {
			return &v1beta1.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(u, ",")}}
		},
	}, {
		strategy: deviceplugin.DeviceListEnvVar,
		want: func(u []string) *v1beta1.ContainerAllocateResponse {
			return &v1beta1.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(u, ",")}}
		},
	}, {
		strategy: deviceplugin.DeviceListVolumeMounts,
		want: func(u []string) *v1beta1.ContainerAllocateResponse {
			r := &v1beta1.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}}
			for _, id := range u {
				r.Mounts = append(r.Mounts, &v1beta1.Mount{HostPath: "/dev/null", ContainerPath: path.Join("/var/run/nvidia-container-devices", id)})
			}
			return r
		},
	}, {
		strategy: deviceplugin.DeviceListCDICRI,
		want: func(u []string) *v1beta1.ContainerAllocateResponse {
			r := &v1beta1.ContainerAllocateResponse{}
			for _, id := range u {
				r.CdiDevices = append(r.CdiDevices, &v1beta1.CDIDevice{Name: "dynmig.io/mig=" + id})
			}
			return r
		},
	}, {
		strategy: deviceplugin.DeviceListCDIAnnotations,
		want: func(u []string) *v1beta1.ContainerAllocateResponse {
			return &v1beta1.ContainerAllocateResponse{Annotations: map[string]string{
				"cdi.k8s.io/dynmig_" + u[0]: "dynmig.io/mig=" + u[0] + ",dynmig.io/mig=" + u[1],
			}}
		},
	}}
	for _, tt := range tests {
		name := string(tt.strategy)
		if name == "" {
			name = "zero"
		}
		t.Run(name, func(t *testing.T) {
			hw := fakehal.MustNew(fakehal.Options{})
			uuid := gpuOf(t, hw, 0).UUID
			pod := boundPod("p",
				reservation.Allocation{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: uuid, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}},
				reservation.Allocation{ContainerIndex: 0, DeviceIndex: 1, GPUUUID: uuid, Profile: "1g.5gb", Placement: capability.Placement{Start: 1, Size: 1}})
			client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, pod)
			r := start(t, client, hw, func(c *deviceplugin.Config) {
				c.DeviceListStrategy = tt.strategy
				c.CDIDir = t.TempDir()
				c.CDIGenerator = deviceplugin.NewFakeCDI()
			})
			resp, err := allocate(context.Background(), r.client, "a", "b")
			require.NoError(t, err)
			require.Len(t, resp.ContainerResponses, 1)
			uuids := migUUIDs(t, getPod(t, client, "p"))
			require.Len(t, uuids, 2)
			assertResponse(t, tt.want(uuids), resp.ContainerResponses[0])
			if tt.strategy == deviceplugin.DeviceListCDIAnnotations {
				_, devs, err := cdi.ParseAnnotations(resp.ContainerResponses[0].Annotations)
				require.NoError(t, err, "the runtime's CDI library reads the annotation")
				assert.Equal(t, []string{deviceplugin.CDIName(uuids[0]), deviceplugin.CDIName(uuids[1])}, devs)
			}
		})
	}
}

// assertResponse compares the fields a container runtime acts on.
func assertResponse(t *testing.T, want, got *v1beta1.ContainerAllocateResponse) {
	t.Helper()
	assert.Equal(t, want.Envs, got.Envs, "Envs")
	assert.Equal(t, want.Annotations, got.Annotations, "Annotations")
	assert.Equal(t, len(want.Mounts), len(got.Mounts), "Mounts")
	for i := range min(len(want.Mounts), len(got.Mounts)) {
		assert.Equal(t, want.Mounts[i].HostPath, got.Mounts[i].HostPath)
		assert.Equal(t, want.Mounts[i].ContainerPath, got.Mounts[i].ContainerPath)
	}
	var wantCDI, gotCDI []string
	for _, d := range want.CdiDevices {
		wantCDI = append(wantCDI, d.Name)
	}
	for _, d := range got.CdiDevices {
		gotCDI = append(gotCDI, d.Name)
	}
	assert.Equal(t, wantCDI, gotCDI, "CdiDevices")
	assert.Empty(t, got.Devices, "no device specs: the runtime decides the nodes")
}

// migUUIDs returns the MIG UUIDs the pod's record names, in entry order.
func migUUIDs(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	allocs, err := kube.PodAllocations(pod)
	require.NoError(t, err)
	var out []string
	for _, a := range allocs {
		id, ok := a.Runtime()
		require.True(t, ok)
		out = append(out, id.MIGUUID)
	}
	return out
}
