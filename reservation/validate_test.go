package reservation_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

func realized(a reservation.Allocation, mig string, gi, ci uint32) reservation.Allocation {
	return a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: mig, GPUInstanceID: gi, ComputeInstanceID: ci})
}

func TestValidate(t *testing.T) {
	ok := alloc(0, 0, gpuA, "2g.10gb", 2, 2)
	tests := []struct {
		name        string
		allocs      []reservation.Allocation
		wantProblem error
		wantIndex   int
		wantField   string
		wantOther   int
		wantCause   error
	}{
		{name: "negative container", allocs: []reservation.Allocation{alloc(-1, 0, gpuA, "1g.5gb", 0, 1)}, wantProblem: reservation.ErrNegativeIndex, wantField: "containerIndex", wantOther: -1},
		{name: "negative device", allocs: []reservation.Allocation{alloc(0, -2, gpuA, "1g.5gb", 0, 1)}, wantProblem: reservation.ErrNegativeIndex, wantField: "deviceIndex", wantOther: -1},
		{name: "empty gpu", allocs: []reservation.Allocation{alloc(0, 0, "", "1g.5gb", 0, 1)}, wantProblem: reservation.ErrGPUUUID, wantField: "gpuUUID", wantOther: -1},
		{name: "gpu without prefix", allocs: []reservation.Allocation{alloc(0, 0, "8d7f3c2e", "1g.5gb", 0, 1)}, wantProblem: reservation.ErrGPUUUID, wantField: "gpuUUID", wantOther: -1},
		{name: "gpu with space", allocs: []reservation.Allocation{alloc(0, 0, "GPU-a b", "1g.5gb", 0, 1)}, wantProblem: reservation.ErrGPUUUID, wantField: "gpuUUID", wantOther: -1},
		{name: "legacy gpu identifier", allocs: []reservation.Allocation{alloc(0, 0, gpuA+"[1-2]", "1g.5gb", 0, 1)}, wantProblem: reservation.ErrGPUUUID, wantField: "gpuUUID", wantOther: -1, wantCause: reservation.ErrLegacyIdentifier},
		{name: "empty profile", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "", 0, 1)}, wantProblem: reservation.ErrProfile, wantField: "profile", wantOther: -1},
		{name: "malformed profile", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "2g", 0, 1)}, wantProblem: reservation.ErrProfile, wantField: "profile", wantOther: -1, wantCause: capability.ErrProfileName},
		{name: "MIG prefix in profile", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "MIG 1g.5gb", 0, 1)}, wantProblem: reservation.ErrProfile, wantField: "profile", wantOther: -1, wantCause: capability.ErrProfileName},
		{name: "size zero", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "1g.5gb", 3, 0)}, wantProblem: reservation.ErrPlacement, wantField: "placement", wantOther: -1},
		{name: "overflowing placement", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "1g.5gb", 4294967295, 2)}, wantProblem: reservation.ErrPlacement, wantField: "placement", wantOther: -1},
		{name: "beyond any grid", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "1g.5gb", 64, 1)}, wantProblem: reservation.ErrPlacement, wantField: "placement", wantOther: -1},
		{name: "duplicate entry", allocs: []reservation.Allocation{ok, alloc(0, 0, gpuB, "1g.5gb", 0, 1)}, wantProblem: reservation.ErrDuplicateEntry, wantIndex: 1, wantField: "deviceIndex", wantOther: 0},
		{name: "partial runtime: only migUUID", allocs: []reservation.Allocation{{GPUUUID: gpuA, Profile: "1g.5gb", Placement: capability.Placement{Size: 1}, MIGUUID: migA}}, wantProblem: reservation.ErrPartialRuntime, wantField: "gpuInstanceID", wantOther: -1},
		{name: "partial runtime: IDs without migUUID", allocs: []reservation.Allocation{{GPUUUID: gpuA, Profile: "1g.5gb", Placement: capability.Placement{Size: 1}, GPUInstanceID: reservation.SomeID(0), ComputeInstanceID: reservation.SomeID(0)}}, wantProblem: reservation.ErrPartialRuntime, wantField: "migUUID", wantOther: -1},
		{name: "partial runtime: no CI", allocs: []reservation.Allocation{{GPUUUID: gpuA, Profile: "1g.5gb", Placement: capability.Placement{Size: 1}, MIGUUID: migA, GPUInstanceID: reservation.SomeID(7)}}, wantProblem: reservation.ErrPartialRuntime, wantField: "computeInstanceID", wantOther: -1},
		{name: "malformed MIG UUID", allocs: []reservation.Allocation{realized(ok, "MIG-xxxxxxxx", 4, 0)}, wantProblem: reservation.ErrMIGUUID, wantField: "migUUID", wantOther: -1},
		{name: "upper-case MIG UUID", allocs: []reservation.Allocation{realized(ok, "MIG-1A2B3C4D-5E6F-4A7B-8C9D-0E1F2A3B4C5D", 4, 0)}, wantProblem: reservation.ErrMIGUUID, wantField: "migUUID", wantOther: -1},
		{name: "legacy MIG UUID", allocs: []reservation.Allocation{realized(ok, "MIG-GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f/4/0", 4, 0)}, wantProblem: reservation.ErrMIGUUID, wantField: "migUUID", wantOther: -1, wantCause: reservation.ErrLegacyIdentifier},
		{name: "overlap on one GPU", allocs: []reservation.Allocation{ok, alloc(0, 1, gpuA, "1g.5gb", 3, 1)}, wantProblem: reservation.ErrOverlap, wantIndex: 1, wantField: "placement", wantOther: 0},
		{name: "same MIG UUID twice", allocs: []reservation.Allocation{realized(ok, migA, 4, 0), realized(alloc(0, 1, gpuB, "2g.10gb", 2, 2), migA, 4, 0)}, wantProblem: reservation.ErrRuntimeConflict, wantIndex: 1, wantField: "migUUID", wantOther: 0},
		{name: "same GI on one GPU", allocs: []reservation.Allocation{realized(ok, migA, 4, 0), realized(alloc(0, 1, gpuA, "2g.10gb", 4, 2), migB, 4, 0)}, wantProblem: reservation.ErrRuntimeConflict, wantIndex: 1, wantField: "gpuInstanceID", wantOther: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := reservation.Validate(tt.allocs)
			if !errors.Is(err, reservation.ErrInvalid) || !errors.Is(err, tt.wantProblem) {
				t.Fatalf("Validate = %v, want ErrInvalid and %v", err, tt.wantProblem)
			}
			var ve *reservation.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T has no *ValidationError", err)
			}
			if ve.Problem != tt.wantProblem || ve.Index != tt.wantIndex || ve.Field != tt.wantField || ve.Other != tt.wantOther {
				t.Errorf("got problem %v index %d field %q other %d, want %v %d %q %d",
					ve.Problem, ve.Index, ve.Field, ve.Other, tt.wantProblem, tt.wantIndex, tt.wantField, tt.wantOther)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Errorf("error %v does not match cause %v", err, tt.wantCause)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	allocs := []reservation.Allocation{
		alloc(-1, 0, "", "", 0, 0),
		{ContainerIndex: -1, GPUUUID: gpuA, Profile: "1g.5gb", Placement: capability.Placement{Size: 1}, MIGUUID: "bad"},
	}
	err := reservation.Validate(allocs)
	var got []error
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ve *reservation.ValidationError
		if !errors.As(e, &ve) {
			t.Fatalf("joined error %T is not a *ValidationError", e)
		}
		got = append(got, ve.Problem)
	}
	want := []error{
		reservation.ErrNegativeIndex, reservation.ErrGPUUUID, reservation.ErrProfile, reservation.ErrPlacement,
		reservation.ErrNegativeIndex, reservation.ErrPartialRuntime, reservation.ErrMIGUUID, reservation.ErrDuplicateEntry,
	}
	if len(got) != len(want) {
		t.Fatalf("problems = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		allocs []reservation.Allocation
	}{
		{name: "none", allocs: nil},
		{name: "touching intervals", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "2g.10gb", 0, 2), alloc(0, 1, gpuA, "2g.10gb", 2, 2)}},
		{name: "same placement on two GPUs", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "2g.10gb", 0, 2), alloc(1, 0, gpuB, "2g.10gb", 0, 2)}},
		{name: "GI and CI zero", allocs: []reservation.Allocation{realized(alloc(0, 0, gpuA, "7g.40gb", 0, 8), migA, 0, 0)}},
		{name: "same GI ID on two GPUs", allocs: []reservation.Allocation{realized(alloc(0, 0, gpuA, "1g.5gb", 0, 1), migA, 7, 0), realized(alloc(0, 1, gpuB, "1g.5gb", 0, 1), migB, 7, 0)}},
		{name: "variant profile", allocs: []reservation.Allocation{alloc(0, 0, gpuA, "1g.5gb+me", 6, 1)}},
		{name: "placeholder GPU UUID from the spec", allocs: []reservation.Allocation{alloc(0, 0, "GPU-xxxxxxxx", "2g.10gb", 2, 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := reservation.Validate(tt.allocs); err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
		})
	}
}

func TestValidateDoesNotAllocate(t *testing.T) {
	allocs, err := reservation.Decode(benchAnnotation())
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = reservation.Validate(allocs) }); n != 0 {
		t.Fatalf("Validate allocates %v times per run, want 0", n)
	}
}

// places builds placements from start, size pairs.
func places(pairs ...uint32) []capability.Placement {
	var out []capability.Placement
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, capability.Placement{Start: pairs[i], Size: pairs[i+1]})
	}
	return out
}

func a100() reservation.GPUs {
	return reservation.GPUs{{
		UUID: gpuA, Index: 0, Name: "NVIDIA A100-SXM4-40GB",
		Profiles: []capability.Profile{
			{Name: "1g.5gb", SliceCount: 1, Placements: places(0, 1, 1, 1, 2, 1, 3, 1, 4, 1, 5, 1, 6, 1)},
			{Name: "2g.10gb", SliceCount: 2, Placements: places(0, 2, 2, 2, 4, 2)},
			{Name: "3g.20gb", SliceCount: 3, Placements: places(0, 4, 4, 4)},
		},
	}}
}

func TestValidateAgainst(t *testing.T) {
	tests := []struct {
		name        string
		alloc       reservation.Allocation
		wantProblem error // nil: valid
	}{
		{name: "published", alloc: alloc(0, 0, gpuA, "2g.10gb", 2, 2)},
		{name: "unknown GPU", alloc: alloc(0, 0, gpuB, "2g.10gb", 2, 2), wantProblem: reservation.ErrUnknownGPU},
		{name: "unknown profile", alloc: alloc(0, 0, gpuA, "7g.40gb", 0, 8), wantProblem: reservation.ErrUnknownProfile},
		{name: "unpublished placement", alloc: alloc(0, 0, gpuA, "2g.10gb", 1, 2), wantProblem: reservation.ErrUnpublishedPlacement},
		{name: "placement of another profile", alloc: alloc(0, 0, gpuA, "3g.20gb", 4, 3), wantProblem: reservation.ErrUnpublishedPlacement},
		{name: "structural problems first", alloc: alloc(0, 0, gpuB, "2g.10gb", 2, 0), wantProblem: reservation.ErrPlacement},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := reservation.ValidateAgainst([]reservation.Allocation{tt.alloc}, a100())
			if tt.wantProblem == nil {
				if err != nil {
					t.Fatalf("ValidateAgainst = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.wantProblem) || !errors.Is(err, reservation.ErrInvalid) {
				t.Fatalf("ValidateAgainst = %v, want %v", err, tt.wantProblem)
			}
			if tt.wantProblem == reservation.ErrPlacement && errors.Is(err, reservation.ErrUnknownGPU) {
				t.Fatalf("capability checked although the entry was malformed: %v", err)
			}
		})
	}
	if err := reservation.ValidateAgainst([]reservation.Allocation{alloc(0, 0, gpuA, "1g.5gb", 0, 1)}, nil); !errors.Is(err, reservation.ErrUnknownGPU) {
		t.Fatalf("nil lookup: %v, want ErrUnknownGPU", err)
	}
}

func TestMIGUUIDForms(t *testing.T) {
	tests := []struct {
		in               string
		wantMIG, wantOld bool
	}{
		{in: migA, wantMIG: true},
		{in: "MIG-GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f/4/0", wantOld: true},
		{in: "MIG-GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f/4"},
		{in: "MIG-GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f/a/0"},
		{in: "MIG-1a2b3c4d5e6f4a7b8c9d0e1f2a3b4c5d"},
		{in: "GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"},
		{in: ""},
	}
	for _, tt := range tests {
		if got := reservation.IsMIGUUID(tt.in); got != tt.wantMIG {
			t.Errorf("IsMIGUUID(%q) = %v, want %v", tt.in, got, tt.wantMIG)
		}
		if got := reservation.IsLegacyMIGUUID(tt.in); got != tt.wantOld {
			t.Errorf("IsLegacyMIGUUID(%q) = %v, want %v", tt.in, got, tt.wantOld)
		}
	}
}

// A forged record of thousands of identical entries has millions of
// conflicting pairs; Validate reports the first MaxProblems and stops, so
// the device plugin's reconciliation stays cheap. The record is refused
// all the same.
func TestValidateBoundsProblems(t *testing.T) {
	same := alloc(0, 0, gpuA, "1g.5gb", 0, 1)
	allocs := make([]reservation.Allocation, 2400)
	for i := range allocs {
		allocs[i] = same
	}
	for name, validate := range map[string]func() error{
		"Validate":        func() error { return reservation.Validate(allocs) },
		"ValidateAgainst": func() error { return reservation.ValidateAgainst(allocs, reservation.GPUs{}) },
	} {
		err := validate()
		if !errors.Is(err, reservation.ErrDuplicateEntry) || !errors.Is(err, reservation.ErrOverlap) {
			t.Fatalf("%s = %v, want duplicate and overlap problems", name, err)
		}
		if got := len(err.(interface{ Unwrap() []error }).Unwrap()); got != reservation.MaxProblems {
			t.Errorf("%s reports %d problems, want MaxProblems (%d)", name, got, reservation.MaxProblems)
		}
	}
	value := reservation.EncodeString(allocs)
	set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: []reservation.Pod{{
		UID: "u", Namespace: "ns", Name: "forged", Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: value}, DeviceRequests: requests(allocs),
	}}})
	if set.Authorized || len(set.Active) != 0 || len(set.Unknown) != 1 {
		t.Fatalf("forged record: authorized %v, %d active, unknown %v; want refused", set.Authorized, len(set.Active), set.Unknown)
	}
	if len(set.Reasons) > reservation.MaxProblems {
		t.Errorf("%d reasons, want at most %d", len(set.Reasons), reservation.MaxProblems)
	}
}
