package reservation_test

import (
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

var (
	propGPUs     = []string{gpuA, gpuB}
	propMIGs     = []string{"", migA, migB, migC}
	propProfiles = []string{"1g.5gb", "2g.10gb", "bad"}
	propPhases   = []reservation.PodPhase{reservation.PodPending, reservation.PodRunning, reservation.PodSucceeded, reservation.PodFailed, reservation.PodUnknown}
)

func drawAllocation(t *rapid.T, label string) reservation.Allocation {
	a := reservation.Allocation{
		ContainerIndex: rapid.IntRange(0, 1).Draw(t, label+".container"),
		DeviceIndex:    rapid.IntRange(0, 1).Draw(t, label+".device"),
		GPUUUID:        rapid.SampledFrom(propGPUs).Draw(t, label+".gpu"),
		Profile:        rapid.SampledFrom(propProfiles).Draw(t, label+".profile"),
		Placement: capability.Placement{
			Start: rapid.Uint32Range(0, 7).Draw(t, label+".start"),
			Size:  rapid.Uint32Range(0, 2).Draw(t, label+".size"),
		},
		MIGUUID: rapid.SampledFrom(propMIGs).Draw(t, label+".mig"),
	}
	if rapid.Bool().Draw(t, label+".gi") {
		a.GPUInstanceID = reservation.SomeID(rapid.Uint32Range(0, 3).Draw(t, label+".giid"))
	}
	if rapid.Bool().Draw(t, label+".ci") {
		a.ComputeInstanceID = reservation.SomeID(0)
	}
	return a
}

// TestDesiredProperties checks Desired against a direct restatement of the
// spec on random node listings.
func TestDesiredProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := reservation.Snapshot{Complete: rapid.Float64Range(0, 1).Draw(t, "complete") < 0.8}
		nPods := rapid.IntRange(0, 5).Draw(t, "pods")
		for i := range nPods {
			uid := rapid.SampledFrom([]string{"p0", "p1", "p2", "p3", "p4"}).Draw(t, "uid")
			p := reservation.Pod{UID: uid, Namespace: "ns", Name: "n" + uid, Phase: rapid.SampledFrom(propPhases).Draw(t, "phase"),
				Deleting: rapid.Float64Range(0, 1).Draw(t, "deleting") < 0.2}
			if rapid.Float64Range(0, 1).Draw(t, "garbage") < 0.1 {
				p.Annotations = map[string]string{reservation.AnnotationKey: "[{"}
			} else {
				allocs := make([]reservation.Allocation, rapid.IntRange(0, 3).Draw(t, "allocs"))
				for j := range allocs {
					allocs[j] = drawAllocation(t, "a")
				}
				p.Annotations = map[string]string{reservation.AnnotationKey: reservation.EncodeString(allocs)}
			}
			_ = i
			snap.Pods = append(snap.Pods, p)
		}
		set := reservation.Desired(snap)

		// Restate the rules.
		uidCount := map[string]int{}
		for _, p := range snap.Pods {
			uidCount[p.UID]++
		}
		wantAuthorized := snap.Complete
		var valid []reservation.Entry
		for _, p := range snap.Pods {
			if p.Deleting || p.Phase == reservation.PodSucceeded || p.Phase == reservation.PodFailed {
				continue
			}
			allocs, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
			if err != nil || reservation.Validate(allocs) != nil || uidCount[p.UID] > 1 {
				wantAuthorized = false
				if set.Authorized || !set.IsUnknown(p.UID) {
					t.Fatalf("pod %s has a bad record but is trusted", p.UID)
				}
				continue
			}
			for i, a := range allocs {
				valid = append(valid, reservation.Entry{PodUID: p.UID, Namespace: p.Namespace, Name: p.Name, Index: i, Allocation: a})
			}
		}
		for i := range valid {
			for j := range i {
				a, b := valid[i], valid[j]
				if a.PodUID != b.PodUID && (a.GPUUUID == b.GPUUUID && a.Placement.Overlaps(b.Placement) ||
					a.MIGUUID != "" && a.MIGUUID == b.MIGUUID ||
					a.GPUUUID == b.GPUUUID && a.GPUInstanceID.Valid && a.GPUInstanceID == b.GPUInstanceID) {
					wantAuthorized = false
					if !set.IsUnknown(a.PodUID) || !set.IsUnknown(b.PodUID) {
						t.Fatalf("conflicting pods %s and %s not both unknown", a.PodUID, b.PodUID)
					}
				}
			}
		}
		if set.Authorized != wantAuthorized || set.Authorized != (len(set.Reasons) == 0) {
			t.Fatalf("authorised = %v with %d reasons, want %v: %v", set.Authorized, len(set.Reasons), wantAuthorized, set.Reasons)
		}
		if !snap.Complete && !errors.Is(set.Verdict(), reservation.ErrIncompleteSnapshot) {
			t.Fatalf("incomplete listing not reported")
		}
		// Every valid entry of a trusted pod is active; nothing else is.
		nTrusted := 0
		for _, e := range valid {
			if set.IsUnknown(e.PodUID) {
				continue
			}
			nTrusted++
			if got, ok := set.Lookup(e.PodUID, e.ContainerIndex, e.DeviceIndex); !ok || got != e {
				t.Fatalf("trusted entry %v missing from Active (got %v)", e, got)
			}
		}
		if len(set.Active) != nTrusted {
			t.Fatalf("active has %d entries, want %d", len(set.Active), nTrusted)
		}
		// Active entries never overlap on one GPU.
		for i := range set.Active {
			for j := range i {
				a, b := set.Active[i], set.Active[j]
				if a.GPUUUID == b.GPUUUID && a.Placement.Overlaps(b.Placement) {
					t.Fatalf("active entries overlap: %v and %v", a, b)
				}
			}
		}
		// Every claim of an unknown pod is respected.
		for _, e := range set.Withheld {
			if !set.IsUnknown(e.PodUID) || (e.Placement.Size > 0 && !set.Claimed(e.GPUUUID, e.Placement)) {
				t.Fatalf("withheld entry %v not protected", e)
			}
		}
	})
}

func FuzzParseLegacyDevices(f *testing.F) {
	f.Add(gpuA + "[0-1],NVIDIA,9984,28:;;" + gpuA + ",NVIDIA,100,0:")
	f.Add("")
	f.Add(";;::,,[]GPU-[")
	f.Fuzz(func(t *testing.T, value string) {
		devs, err := reservation.ParseLegacyDevices(value)
		if (len(devs) > 0) != (err != nil) {
			t.Fatalf("devices %v but error %v", devs, err)
		}
		for _, d := range devs {
			if !reservation.IsLegacyIdentifier(d.ID) || !errors.Is(err, reservation.ErrLegacyIdentifier) {
				t.Fatalf("reported %q which is not a legacy identifier", d.ID)
			}
		}
	})
}
