package reservation_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// jsonAllocation mirrors reservation.Allocation for encoding/json: the
// deployed writer's struct shape, with pointers marking presence.
type jsonAllocation struct {
	ContainerIndex    int                  `json:"containerIndex"`
	DeviceIndex       int                  `json:"deviceIndex"`
	GPUUUID           string               `json:"gpuUUID"`
	Profile           string               `json:"profile"`
	Placement         capability.Placement `json:"placement"`
	MIGUUID           string               `json:"migUUID,omitempty"`
	GPUInstanceID     *uint32              `json:"gpuInstanceID,omitempty"`
	ComputeInstanceID *uint32              `json:"computeInstanceID,omitempty"`
}

func toJSON(a reservation.Allocation) jsonAllocation {
	j := jsonAllocation{ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex, GPUUUID: a.GPUUUID,
		Profile: a.Profile, Placement: a.Placement, MIGUUID: a.MIGUUID}
	if a.GPUInstanceID.Valid {
		id := a.GPUInstanceID.ID
		j.GPUInstanceID = &id
	}
	if a.ComputeInstanceID.Valid {
		id := a.ComputeInstanceID.ID
		j.ComputeInstanceID = &id
	}
	return j
}

func fromJSON(j jsonAllocation) reservation.Allocation {
	a := reservation.Allocation{ContainerIndex: j.ContainerIndex, DeviceIndex: j.DeviceIndex, GPUUUID: j.GPUUUID,
		Profile: j.Profile, Placement: j.Placement, MIGUUID: j.MIGUUID}
	if j.GPUInstanceID != nil {
		a.GPUInstanceID = reservation.SomeID(*j.GPUInstanceID)
	}
	if j.ComputeInstanceID != nil {
		a.ComputeInstanceID = reservation.SomeID(*j.ComputeInstanceID)
	}
	return a
}

// seedAnnotations are the spec's valid and invalid annotations plus edge
// cases, used as the fuzz seed corpus.
var seedAnnotations = []string{
	wireExample,
	``,
	`[]`,
	`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-xxxxxxxx","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-xxxxxxxx","gpuInstanceID":4,"computeInstanceID":0}]`,
	`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"2g.10gb","placement":{"start":2,"size":2}}]`,
	`[{"containerIndex":-1,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1}}]`,
	`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"","profile":"","placement":{"start":0,"size":0}}]`,
	`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1},"migUUID":"MIG-x"}]`,
	`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1}},{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":1,"size":1}}]`,
	`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a\u003c\ud83d\ude00\ud800","profile":"1g.5gb","placement":{"start":0,"size":1},"x":[{"y":null}]}]`,
	`[{"containerIndex":0,"containerIndex":1}]`,
	`[{"containerIndex":1e3}]`,
	`[] x`,
	`{"containerIndex":0}`,
	"[\"\xff\"]",
}

func FuzzDecode(f *testing.F) {
	for _, s := range seedAnnotations {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, allowUnknown bool) {
		opts := reservation.DecodeOptions{AllowUnknownKeys: allowUnknown}
		got, err := reservation.DecodeWithOptions(data, opts)
		gotS, errS := reservation.DecodeStringWithOptions(string(data), opts)
		if (err == nil) != (errS == nil) || !reflect.DeepEqual(got, gotS) {
			t.Fatalf("Decode and DecodeString disagree: %v, %v / %v, %v", got, err, gotS, errS)
		}
		// Validation must never panic, whatever was decoded.
		_ = reservation.Validate(got)
		if err != nil {
			return
		}
		// Fixed point: decode(encode(x)) == x and encode is stable.
		enc := reservation.Encode(got)
		again, err := reservation.Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(x)) failed: %v\ninput %q\nencoded %q", err, data, enc)
		}
		if len(got) != len(again) {
			t.Fatalf("round trip changed length: %d -> %d", len(got), len(again))
		}
		for i := range got {
			if got[i] != again[i] {
				t.Fatalf("round trip changed entry %d: %+v -> %+v", i, got[i], again[i])
			}
		}
		if enc2 := reservation.Encode(again); string(enc2) != string(enc) {
			t.Fatalf("Encode not stable: %q vs %q", enc, enc2)
		}
		// Differential: whatever we accept, encoding/json accepts with the
		// same meaning (it ignores unknown keys, as AllowUnknownKeys does).
		if len(data) == 0 {
			return
		}
		var want []jsonAllocation
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("we accept %q, encoding/json rejects it: %v", data, err)
		}
		if len(want) != len(got) {
			t.Fatalf("encoding/json decoded %d entries, we %d", len(want), len(got))
		}
		for i := range want {
			if w := fromJSON(want[i]); w != got[i] {
				t.Fatalf("entry %d: encoding/json %+v, we %+v", i, w, got[i])
			}
		}
		// And our encoding is byte-identical to the deployed writer's.
		js := make([]jsonAllocation, len(got))
		for i := range got {
			js[i] = toJSON(got[i])
		}
		if std, _ := json.Marshal(js); string(std) != string(enc) {
			t.Fatalf("Encode = %s, encoding/json = %s", enc, std)
		}
	})
}

func FuzzEncode(f *testing.F) {
	f.Add(0, 0, "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f", "2g.10gb", uint32(2), uint32(2), "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", uint32(4), true, uint32(0), true)
	f.Add(3, 1, "GPU-<&>\u2028\u2029\x00\x1f\"\\", "1g.5gb+me", uint32(0), uint32(1), "", uint32(0), false, uint32(0), false)
	f.Add(-1, 7, "\xff\xfe", "é", uint32(4294967295), uint32(0), "MIG-\ud7ff", uint32(1), true, uint32(9), false)
	f.Fuzz(func(t *testing.T, ci, di int, gpu, profile string, start, size uint32, mig string, gi uint32, giOK bool, cid uint32, ciOK bool) {
		// An absent ID carries no value on the wire; keep it canonical.
		if !giOK {
			gi = 0
		}
		if !ciOK {
			cid = 0
		}
		a := reservation.Allocation{ContainerIndex: ci, DeviceIndex: di, GPUUUID: gpu, Profile: profile,
			Placement: capability.Placement{Start: start, Size: size}, MIGUUID: mig,
			GPUInstanceID: reservation.OptionalID{ID: gi, Valid: giOK}, ComputeInstanceID: reservation.OptionalID{ID: cid, Valid: ciOK}}
		enc := reservation.Encode([]reservation.Allocation{a})
		std, err := json.Marshal([]jsonAllocation{toJSON(a)})
		if err != nil {
			t.Fatal(err)
		}
		if string(enc) != string(std) {
			t.Fatalf("Encode = %s\nencoding/json = %s", enc, std)
		}
		if app := reservation.AppendEncode([]byte("prefix"), []reservation.Allocation{a}); string(app) != "prefix"+string(enc) {
			t.Fatalf("AppendEncode = %s", app)
		}
		got, err := reservation.Decode(enc)
		if ci < 0 || di < 0 || ci > reservation.MaxIndex || di > reservation.MaxIndex {
			if err == nil {
				t.Fatalf("Decode accepted out-of-range index: %s", enc)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(Encode(a)) = %v for %s", err, enc)
		}
		want := a
		if !utf8.ValidString(gpu) || !utf8.ValidString(profile) || !utf8.ValidString(mig) {
			var std []jsonAllocation
			if err := json.Unmarshal(enc, &std); err != nil {
				t.Fatal(err)
			}
			want = fromJSON(std[0])
		}
		if got[0] != want {
			t.Fatalf("Decode(Encode(a)) = %+v, want %+v", got[0], want)
		}
	})
}

// FuzzDesired feeds Desired two pods whose allocation and legacy
// annotations are arbitrary: it never panics, authorises exactly when it
// gives no reason, and never lets an untrusted pod's entry into Active or
// two active pods claim one slot.
func FuzzDesired(f *testing.F) {
	for _, s := range seedAnnotations {
		f.Add(s, wireExample, "", false)
	}
	f.Add(wireExample, wireExample, "", true)
	f.Add(wireExample, scheduledExample, "GPU-a[1-2],NVIDIA,0,0:", true)
	f.Fuzz(func(t *testing.T, a, b, legacy string, deleting bool) {
		decodedA, _ := reservation.DecodeString(a)
		snap := reservation.Snapshot{Complete: true, Pods: []reservation.Pod{
			// a's containers request what its record reserves; b's one
			// container requests one device, whatever its record says.
			{UID: "a", Phase: reservation.PodRunning, Annotations: map[string]string{reservation.AnnotationKey: a},
				DeviceRequests: requests(decodedA)},
			{UID: "b", Phase: reservation.PodPending, Deleting: deleting, Annotations: map[string]string{
				reservation.AnnotationKey: b, reservation.LegacyDevicesAnnotationKey: legacy}, DeviceRequests: []int{1}},
		}}
		set := reservation.Desired(snap)
		if set.Authorized != (len(set.Reasons) == 0) {
			t.Fatalf("Authorized %v with %d reasons", set.Authorized, len(set.Reasons))
		}
		if len(set.Reasons) > 0 && set.Verdict() == nil {
			t.Fatal("reasons but a nil verdict")
		}
		for i, e := range set.Active {
			if set.IsUnknown(e.PodUID) {
				t.Fatalf("active entry %v of an unknown pod", e)
			}
			if e.PodUID == "b" && (e.ContainerIndex != 0 || e.DeviceIndex != 0) {
				t.Fatalf("active entry %v that b's spec does not request", e)
			}
			for _, o := range set.Active[:i] {
				if o.PodUID != e.PodUID && o.GPUUUID == e.GPUUUID && o.Placement.Overlaps(e.Placement) {
					t.Fatalf("active entries %v and %v overlap", o, e)
				}
			}
		}
	})
}
