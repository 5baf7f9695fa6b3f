package deviceplugin_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
