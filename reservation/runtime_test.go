package reservation_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// scheduledExample is the spec's wire example before realization.
const scheduledExample = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"2g.10gb","placement":{"start":2,"size":2}}]`

var exampleIdentity = reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 4, ComputeInstanceID: 0}

func TestSetRuntimeProducesSpecBytes(t *testing.T) {
	got, err := reservation.SetRuntime(scheduledExample, 0, 0, exampleIdentity, reservation.PatchOptions{})
	if err != nil {
		t.Fatalf("SetRuntime: %v", err)
	}
	if got.Value != wireExample || !got.Changed {
		t.Fatalf("SetRuntime = %q changed=%v, want the spec's realized example, changed", got.Value, got.Changed)
	}
	var patch struct {
		Metadata struct {
			ResourceVersion *string           `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(got.Patch, &patch); err != nil {
		t.Fatalf("patch is not JSON: %v\n%s", err, got.Patch)
	}
	if patch.Metadata.ResourceVersion != nil || len(patch.Metadata.Annotations) != 1 ||
		patch.Metadata.Annotations[reservation.AnnotationKey] != wireExample {
		t.Fatalf("patch = %s", got.Patch)
	}
}

func TestSetRuntimeResourceVersion(t *testing.T) {
	got, err := reservation.SetRuntime(scheduledExample, 0, 0, exampleIdentity, reservation.PatchOptions{ResourceVersion: "12345"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"resourceVersion":"12345","annotations":{"hami.io/vgpu-mig-allocations":` + mustQuote(wireExample) + `}}}`
	if string(got.Patch) != want {
		t.Fatalf("patch =\n%s\nwant\n%s", got.Patch, want)
	}
}

func mustQuote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestSetRuntimeIdempotent(t *testing.T) {
	got, err := reservation.SetRuntime(wireExample, 0, 0, exampleIdentity, reservation.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Changed || got.Value != wireExample {
		t.Fatalf("SetRuntime on realized value = %+v, want unchanged", got)
	}
}

func TestSetRuntimeRefuses(t *testing.T) {
	other := exampleIdentity
	other.GPUInstanceID = 5
	otherMIG := exampleIdentity
	otherMIG.MIGUUID = "MIG-00000000-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	otherCI := exampleIdentity
	otherCI.ComputeInstanceID = 1
	partial := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}]`
	two := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d","gpuInstanceID":7,"computeInstanceID":0},{"containerIndex":0,"deviceIndex":1,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":1,"size":1}}]`
	tests := []struct {
		name      string
		value     string
		ci, di    int
		id        reservation.RuntimeIdentity
		wantKind  error
		wantCause error
		wantField string
	}{
		{name: "different GI ID", value: wireExample, id: other, wantKind: reservation.ErrRuntimeMismatch, wantField: "gpuInstanceID"},
		{name: "different MIG UUID", value: wireExample, id: otherMIG, wantKind: reservation.ErrRuntimeMismatch, wantField: "migUUID"},
		{name: "different CI ID", value: wireExample, id: otherCI, wantKind: reservation.ErrRuntimeMismatch, wantField: "computeInstanceID"},
		{name: "partial identity stored", value: partial, id: exampleIdentity, wantKind: reservation.ErrBadRecord, wantCause: reservation.ErrPartialRuntime},
		{name: "no such entry", value: scheduledExample, ci: 1, id: exampleIdentity, wantKind: reservation.ErrNoEntry},
		{name: "malformed MIG UUID", value: scheduledExample, id: reservation.RuntimeIdentity{MIGUUID: "MIG-xxxxxxxx"}, wantKind: reservation.ErrBadIdentity},
		{name: "malformed record", value: `[{]`, id: exampleIdentity, wantKind: reservation.ErrBadRecord, wantCause: reservation.ErrMalformed},
		{name: "empty record", value: ``, id: exampleIdentity, wantKind: reservation.ErrNoEntry},
		{name: "collides with sibling", value: two, di: 1, id: exampleIdentity, wantKind: reservation.ErrBadIdentity, wantCause: reservation.ErrRuntimeConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reservation.SetRuntime(tt.value, tt.ci, tt.di, tt.id, reservation.PatchOptions{})
			if !errors.Is(err, tt.wantKind) {
				t.Fatalf("SetRuntime = %v, want %v", err, tt.wantKind)
			}
			var re *reservation.RuntimeError
			if !errors.As(err, &re) || re.ContainerIndex != tt.ci || re.DeviceIndex != tt.di {
				t.Fatalf("error %v is not a *RuntimeError for (%d,%d)", err, tt.ci, tt.di)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Fatalf("error %v does not match %v", err, tt.wantCause)
			}
			if tt.wantField != "" && re.Field != tt.wantField {
				t.Fatalf("Field = %q, want %q", re.Field, tt.wantField)
			}
		})
	}
}

func TestSetRuntimeForRefusesSchedulerChange(t *testing.T) {
	allocs, err := reservation.DecodeString(scheduledExample)
	if err != nil {
		t.Fatal(err)
	}
	want := allocs[0].WithRuntime(exampleIdentity)
	got, err := reservation.SetRuntimeFor(scheduledExample, want, reservation.PatchOptions{})
	if err != nil || got.Value != wireExample {
		t.Fatalf("SetRuntimeFor = %q, %v", got.Value, err)
	}
	for _, tt := range []struct {
		field  string
		mutate func(*reservation.Allocation)
	}{
		{"gpuUUID", func(a *reservation.Allocation) { a.GPUUUID = gpuB }},
		{"profile", func(a *reservation.Allocation) { a.Profile = "1g.5gb" }},
		{"placement", func(a *reservation.Allocation) { a.Placement.Start = 4 }},
	} {
		changed := want
		tt.mutate(&changed)
		_, err := reservation.SetRuntimeFor(scheduledExample, changed, reservation.PatchOptions{})
		var re *reservation.RuntimeError
		if !errors.Is(err, reservation.ErrSchedulerField) || !errors.As(err, &re) || re.Field != tt.field {
			t.Errorf("changed %s: error = %v, want ErrSchedulerField on %s", tt.field, err, tt.field)
		}
	}
	if _, err := reservation.SetRuntimeFor(scheduledExample, allocs[0], reservation.PatchOptions{}); !errors.Is(err, reservation.ErrBadIdentity) {
		t.Fatalf("no identity: %v, want ErrBadIdentity", err)
	}
}

func TestApplyRuntimeInPlace(t *testing.T) {
	allocs := []reservation.Allocation{alloc(0, 0, gpuA, "2g.10gb", 2, 2), alloc(1, 0, gpuA, "2g.10gb", 4, 2)}
	changed, err := reservation.ApplyRuntime(allocs, 1, 0, exampleIdentity)
	if err != nil || !changed {
		t.Fatalf("ApplyRuntime = %v, %v", changed, err)
	}
	if id, ok := allocs[1].Runtime(); !ok || id != exampleIdentity {
		t.Fatalf("entry 1 runtime = %v, %v", id, ok)
	}
	if _, ok := allocs[0].Runtime(); ok {
		t.Fatalf("entry 0 changed")
	}
	if got := allocs[1].Scheduled(); got != alloc(1, 0, gpuA, "2g.10gb", 4, 2) {
		t.Fatalf("Scheduled() = %+v", got)
	}
}

func TestStrings(t *testing.T) {
	a := alloc(0, 1, gpuA, "2g.10gb", 2, 2)
	if got, want := a.String(), "container 0 device 1: 2g.10gb [2,4) on "+gpuA; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	r := a.WithRuntime(exampleIdentity)
	if got, want := r.String(), "container 0 device 1: 2g.10gb [2,4) on "+gpuA+" as "+exampleIdentity.MIGUUID+" gi=4 ci=0"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (reservation.OptionalID{}).String(); got != "absent" {
		t.Errorf("absent ID = %q", got)
	}
	if got := reservation.SomeID(0).String(); got != "0" {
		t.Errorf("SomeID(0) = %q", got)
	}
	e := reservation.Entry{PodUID: "u", Namespace: "ns", Name: "p", Index: 2, Allocation: a}
	if got, want := e.String(), "ns/p (u) entry 2"; got != want {
		t.Errorf("Entry.String() = %q, want %q", got, want)
	}
}

func TestSameScheduled(t *testing.T) {
	a := reservation.Allocation{GPUUUID: "GPU-6b813aea-996a-440d-ab86-4736b86702bf", Profile: "1g.5gb",
		Placement: capability.Placement{Start: 2, Size: 1}}
	other := a
	other.Placement.Start = 3
	realized := a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 9})
	enc := func(as ...reservation.Allocation) string { return reservation.EncodeString(as) }
	for _, tc := range []struct {
		name       string
		have, want string
		same       bool
	}{
		{"identical", enc(a), enc(a), true},
		{"realized since", enc(realized), enc(a), true},
		{"other placement", enc(other), enc(a), false},
		{"extra entry", enc(a, other), enc(a), false},
		{"undecodable", "[", enc(a), false},
		{"empty", "", enc(a), false},
	} {
		if got := reservation.SameScheduled(tc.have, tc.want); got != tc.same {
			t.Errorf("%s: SameScheduled = %v, want %v", tc.name, got, tc.same)
		}
	}
}
