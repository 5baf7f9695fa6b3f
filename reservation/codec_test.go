package reservation_test

import (
	"errors"
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

// designExample is the reservation example of dynamic-mig-design.md as the
// document prints it (indented) and as the writer emits it (compact).
const (
	designExamplePretty = `[
  {
    "containerIndex": 0,
    "deviceIndex": 0,
    "gpuUUID": "GPU-xxxxxxxx",
    "profile": "2g.10gb",
    "placement": { "start": 2, "size": 2 },
    "migUUID": "MIG-xxxxxxxx",
    "gpuInstanceID": 4,
    "computeInstanceID": 0
  }
]`
	designExample = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-xxxxxxxx","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-xxxxxxxx","gpuInstanceID":4,"computeInstanceID":0}]`
)

func TestSpecExamplesRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{name: "wire example", in: wireExample, want: wireExample},
		{name: "wire example before realization", in: scheduledExample, want: scheduledExample},
		{name: "design example", in: designExample, want: designExample},
		{name: "design example as printed", in: designExamplePretty, want: designExample},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := reservation.DecodeString(tt.in)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if enc := reservation.EncodeString(got); enc != tt.want {
				t.Fatalf("Encode =\n%s\nwant\n%s", enc, tt.want)
			}
		})
	}
	// The design document's placeholders are not real MIG UUIDs: Validate
	// says so, naming the field.
	allocs, _ := reservation.DecodeString(designExample)
	var ve *reservation.ValidationError
	if err := reservation.Validate(allocs); !errors.As(err, &ve) || ve.Field != "migUUID" || !errors.Is(err, reservation.ErrMIGUUID) {
		t.Fatalf("Validate(design example) = %v, want ErrMIGUUID on migUUID", err)
	}
}

func TestDecodeStringAllocatesOnce(t *testing.T) {
	value := string(benchAnnotation())
	if n := testing.AllocsPerRun(50, func() {
		if _, err := reservation.DecodeString(value); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Fatalf("DecodeString allocates %v times, want 1 (the result slice)", n)
	}
	buf := make([]byte, 0, len(value))
	allocs, _ := reservation.DecodeString(value)
	if n := testing.AllocsPerRun(50, func() { buf = reservation.AppendEncode(buf[:0], allocs) }); n != 0 {
		t.Fatalf("AppendEncode allocates %v times, want 0", n)
	}
}
