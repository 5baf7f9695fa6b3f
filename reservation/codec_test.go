package reservation_test

import (
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// wireExample is the annotation from wire-compatibility.md, as written after
// realization.
const wireExample = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d","gpuInstanceID":4,"computeInstanceID":0}]`

func TestWireExampleRoundTrip(t *testing.T) {
	got, err := reservation.Decode([]byte(wireExample))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := []reservation.Allocation{{
		GPUUUID:           "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f",
		Profile:           "2g.10gb",
		Placement:         capability.Placement{Start: 2, Size: 2},
		MIGUUID:           "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
		GPUInstanceID:     reservation.SomeID(4),
		ComputeInstanceID: reservation.SomeID(0),
	}}
	if len(got) != 1 || got[0] != want[0] {
		t.Fatalf("Decode = %+v, want %+v", got, want)
	}
	if err := reservation.Validate(got); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if enc := string(reservation.Encode(got)); enc != wireExample {
		t.Fatalf("Encode =\n%s\nwant\n%s", enc, wireExample)
	}
}
