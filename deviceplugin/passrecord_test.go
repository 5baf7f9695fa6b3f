package deviceplugin_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// A maintenance pass that runs while an Allocate realizes a multi-device
// container finds the container's first instance managed before the
// Allocate fails on a later device and rolls that instance back. The pass
// must not record it as handed: the container would then never be pending
// again, and every retry of the kubelet would find no pod to admit (the
// device-plugin model of package systemtest found this). An adopted
// instance is recorded at once.
func TestPassRecordsNoCreatedInstanceBeforeItsHandOut(t *testing.T) {
	for _, tc := range []struct {
		origin realize.Origin
		want   bool
	}{
		{realize.OriginCreated, false},
		{realize.OriginAdopted, true},
	} {
		t.Run(tc.origin.String(), func(t *testing.T) {
			in := realize.ManagedInstance{
				Key:     realize.Key{GPU: 0, Profile: "1g.5gb", Placement: capability.Placement{Start: 2, Size: 1}},
				Owner:   realize.Owner{PodUID: "uid-p", ContainerIndex: 0, DeviceIndex: 0},
				GPUUUID: "GPU-0", GIIndex: 19,
				Runtime: reservation.RuntimeIdentity{MIGUUID: "MIG-1", GPUInstanceID: 9, ComputeInstanceID: 0},
				Origin:  tc.origin,
			}
			assert.Equal(t, tc.want, deviceplugin.PassRecordsHandOut(t.TempDir(), in))
		})
	}
}

// A restart that lost the checkpoint adopts one device of a running pod's
// two-device container and not the other (an ended pod's record names its
// MIG UUID too). The recorded view must keep the record's entry for the
// device not adopted: without it the container's entries were its one
// recorded device, nothing wanted the other instance, and leak collection
// destroyed it under the running pod (the device-plugin model of package
// systemtest found this).
func TestRecordedViewKeepsAContainersDevicesNotAdopted(t *testing.T) {
	gpu := "GPU-0"
	entry := func(d int, start uint32, mig string, gi uint32) reservation.Allocation {
		a := reservation.Allocation{ContainerIndex: 0, DeviceIndex: d, GPUUUID: gpu, Profile: "1g.5gb",
			Placement: capability.Placement{Start: start, Size: 1}}
		return a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: mig, GPUInstanceID: gi})
	}
	first, second := entry(0, 5, "MIG-A", 8), entry(1, 1, "MIG-B", 12)
	pod := reservation.Pod{UID: "uid-p", Namespace: "default", Name: "p", Phase: "Running", DeviceRequests: []int{2},
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{first, second})}}
	adopted := deviceplugin.HandedDevice{PodUID: "uid-p", ContainerIndex: 0, DeviceIndex: 1, GPUUUID: gpu, Profile: "1g.5gb",
		Placement: second.Placement, Runtime: reservation.RuntimeIdentity{MIGUUID: "MIG-B", GPUInstanceID: 12}, Adopted: true}
	view, err := reservation.DecodeString(deviceplugin.OverlayInherited(t.TempDir(), pod, []deviceplugin.HandedDevice{adopted}))
	assert.NoError(t, err)
	assert.ElementsMatch(t, []reservation.Allocation{first, second}, view)
}

// A plugin that starts without a checkpoint trusts the runtime identities
// its inherited pods' records name then, and writes them to its
// checkpoint: once it serves, and after a restart with the checkpoint
// kept, an inherited pod's record keeps those identities, and any other
// its owner writes later (another pod's MIG UUID and GPU instance, copied
// while no admission policy seals the record) names nothing: its entry
// keeps its scheduled fields only.
func TestInheritedPodKeepsOnlyTheIdentitiesItsRecordNamedThen(t *testing.T) {
	gpu := "GPU-0"
	entry := func(start uint32, mig string, gi uint32) reservation.Allocation {
		a := reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}
		return a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: mig, GPUInstanceID: gi})
	}
	podWith := func(allocs ...reservation.Allocation) reservation.Pod {
		return reservation.Pod{UID: "uid-p", Namespace: "default", Name: "p", Phase: "Running", DeviceRequests: []int{1},
			Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString(allocs)}}
	}
	own, other := entry(2, "MIG-P", 3), entry(5, "MIG-F", 8)
	for _, tc := range []struct {
		name        string
		then, later reservation.Allocation
		want        reservation.Allocation
	}{
		{"unchanged", own, own, own},
		{"identity added later", own.Scheduled(), other, other.Scheduled()},
		{"replaced by another pod's", own, other, other.Scheduled()},
		{"another identity at its placement", own, entry(2, "MIG-F", 8), own.Scheduled()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serving, restarted, err := deviceplugin.InheritThenRead(t.TempDir(), podWith(tc.then), podWith(tc.later))
			require.NoError(t, err)
			for name, got := range map[string]string{"serving": serving, "restarted": restarted} {
				view, err := reservation.DecodeString(got)
				require.NoError(t, err)
				assert.Equal(t, []reservation.Allocation{tc.want}, view, name)
			}
		})
	}
}
