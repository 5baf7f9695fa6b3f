package reservation_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// benchAnnotation is a realistic 16-entry annotation: one pod with four
// containers of four realized 1g devices each, spread over three 8-slot
// GPUs, as the deployed writer encodes it.
func benchAnnotation() []byte {
	gpus := []string{
		"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f",
		"GPU-11111111-2222-4333-8444-555555555555",
		"GPU-99999999-8888-4777-8666-555555555555",
	}
	allocs := make([]reservation.Allocation, 16)
	for i := range allocs {
		allocs[i] = reservation.Allocation{
			ContainerIndex: i / 4, DeviceIndex: i % 4,
			GPUUUID: gpus[i/7], Profile: "1g.5gb",
			Placement:         capability.Placement{Start: uint32(i % 7), Size: 1},
			MIGUUID:           fmt.Sprintf("MIG-%08x-5e6f-4a7b-8c9d-0e1f2a3b4c5d", i),
			GPUInstanceID:     reservation.SomeID(uint32(7 + i%7)),
			ComputeInstanceID: reservation.SomeID(0),
		}
	}
	return reservation.Encode(allocs)
}

// BenchmarkDecodeValidate measures strict decoding plus full validation of
// a 16-entry annotation; compare with BenchmarkEncodingJSON, which only
// decodes the same bytes into an equivalent struct with encoding/json.
func BenchmarkDecodeValidate(b *testing.B) {
	data := benchAnnotation()
	if allocs, err := reservation.Decode(data); err != nil || len(allocs) != 16 || reservation.Validate(allocs) != nil {
		b.Fatalf("bad fixture: %v", err)
	}
	b.Run("bytes", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			allocs, err := reservation.Decode(data)
			if err != nil {
				b.Fatal(err)
			}
			if err := reservation.Validate(allocs); err != nil {
				b.Fatal(err)
			}
		}
	})
	value := string(data)
	b.Run("string", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(value)))
		for b.Loop() {
			allocs, err := reservation.DecodeString(value)
			if err != nil {
				b.Fatal(err)
			}
			if err := reservation.Validate(allocs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodingJSON is the baseline: plain encoding/json decoding of the
// same 16-entry annotation, without any validation.
func BenchmarkEncodingJSON(b *testing.B) {
	data := benchAnnotation()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var allocs []jsonAllocation
		if err := json.Unmarshal(data, &allocs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	allocs, err := reservation.Decode(benchAnnotation())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = reservation.AppendEncode(buf[:0], allocs)
	}
}

func BenchmarkEncodingJSONMarshal(b *testing.B) {
	allocs, err := reservation.Decode(benchAnnotation())
	if err != nil {
		b.Fatal(err)
	}
	js := make([]jsonAllocation, len(allocs))
	for i := range allocs {
		js[i] = toJSON(allocs[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(js); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDesired measures the desired set of a busy node: 8 GPUs with 7
// single-device pods each, all realized.
func BenchmarkDesired(b *testing.B) {
	var snap reservation.Snapshot
	snap.Complete = true
	for g := range 8 {
		gpu := fmt.Sprintf("GPU-%08x-2222-4333-8444-555555555555", g)
		for s := range 7 {
			a := reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: uint32(s), Size: 1},
				MIGUUID:       fmt.Sprintf("MIG-%08x-5e6f-4a7b-8c9d-0e1f2a3b4c5d", g*7+s),
				GPUInstanceID: reservation.SomeID(uint32(7 + s)), ComputeInstanceID: reservation.SomeID(0)}
			uid := fmt.Sprintf("pod-%d-%d", g, s)
			snap.Pods = append(snap.Pods, reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning,
				Annotations:    map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{a})},
				DeviceRequests: []int{1}})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if set := reservation.Desired(snap); !set.Authorized || len(set.Active) != 56 {
			b.Fatalf("unexpected set: %v", set.Verdict())
		}
	}
}
