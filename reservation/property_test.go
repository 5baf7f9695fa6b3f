package reservation_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/reservation/reservationtest"
)

var (
	propGPUs   = []string{gpuA, gpuB}
	propPhases = []reservation.PodPhase{reservation.PodPending, reservation.PodRunning, reservation.PodSucceeded, reservation.PodFailed, reservation.PodUnknown}
	// Records of different pods share the two GPUs, so they overlap and
	// share MIG UUIDs and GPU instance IDs now and then; mutants are
	// records a strict reader refuses.
	propRecords = reservationtest.RecordGenOn(propGPUs, 3)
	propMutants = reservationtest.MutantGenOn(propGPUs)
)

var propNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestDesiredProperties checks Desired against a direct restatement of the
// spec on random node listings.
func TestDesiredProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := reservation.Snapshot{Complete: rapid.Float64Range(0, 1).Draw(t, "complete") < 0.8}
		if rapid.Bool().Draw(t, "clock") {
			snap.Now = propNow
		}
		nPods := rapid.IntRange(0, 5).Draw(t, "pods")
		for i := range nPods {
			uid := rapid.SampledFrom([]string{"p0", "p1", "p2", "p3", "p4"}).Draw(t, "uid")
			p := reservation.Pod{UID: uid, Namespace: "ns", Name: "n" + uid, Phase: rapid.SampledFrom(propPhases).Draw(t, "phase"),
				Deleting: rapid.Float64Range(0, 1).Draw(t, "deleting") < 0.2}
			if p.Deleting {
				p.ContainersTerminated = rapid.Bool().Draw(t, "terminated")
				p.DeletionDeadline = propNow.Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "deadline")) * time.Second)
			}
			if rapid.IntRange(0, 4).Draw(t, "bad record") == 0 {
				m := propMutants.Draw(t, "mutant")
				p.Annotations = map[string]string{reservation.AnnotationKey: m.Value}
				p.DeviceRequests = m.DeviceRequests
			} else {
				r := propRecords.Draw(t, "record")
				p.Annotations = map[string]string{reservation.AnnotationKey: r.Value()}
				p.DeviceRequests = r.DeviceRequests
			}
			if rapid.Float64Range(0, 1).Draw(t, "forged") < 0.3 {
				// The record reserves what the spec does not request.
				p.DeviceRequests = rapid.SliceOfN(rapid.IntRange(0, 2), 0, 2).Draw(t, "requests")
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
		var valid, untrusted []reservation.Entry
		for _, p := range snap.Pods {
			ended := p.Phase == reservation.PodSucceeded || p.Phase == reservation.PodFailed ||
				p.Deleting && (p.ContainersTerminated || !snap.Now.IsZero() && !snap.Now.Before(p.DeletionDeadline))
			if ended != p.Released(snap.Now) {
				t.Fatalf("pod %s Released(%v) = %v, want %v", p.UID, snap.Now, !ended, ended)
			}
			if ended {
				continue
			}
			allocs, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
			if (err != nil || reservation.Validate(allocs) != nil) && uidCount[p.UID] == 1 && !p.RequestsDevices() {
				// A pod that requests no device owns none, whatever its
				// record: untrusted, never withholding.
				if set.IsUnknown(p.UID) {
					t.Fatalf("pod %s requests no device but is unknown", p.UID)
				}
				for i, a := range allocs {
					if err == nil {
						untrusted = append(untrusted, reservation.Entry{PodUID: p.UID, Namespace: p.Namespace, Name: p.Name, Index: i, Allocation: a})
					}
				}
				continue
			}
			if err != nil || reservation.Validate(allocs) != nil || uidCount[p.UID] > 1 {
				wantAuthorized = false
				if set.Authorized || !set.IsUnknown(p.UID) {
					t.Fatalf("pod %s has a bad record but is trusted", p.UID)
				}
				continue
			}
			perContainer := map[int]int{}
			inRange := map[int]bool{} // every entry of the container is below its request
			for _, a := range allocs {
				c := a.ContainerIndex
				if perContainer[c] == 0 {
					inRange[c] = true
				}
				perContainer[c]++
				inRange[c] = inRange[c] && c < len(p.DeviceRequests) && a.DeviceIndex < p.DeviceRequests[c]
			}
			for i, a := range allocs {
				e := reservation.Entry{PodUID: p.UID, Namespace: p.Namespace, Name: p.Name, Index: i, Allocation: a}
				// Validate refuses duplicates, so n entries of a container
				// requesting n devices are indexes 0..n-1 exactly when all
				// of them are below n; otherwise none of them counts.
				c := a.ContainerIndex
				if c < len(p.DeviceRequests) && p.DeviceRequests[c] > 0 && perContainer[c] == p.DeviceRequests[c] && inRange[c] {
					valid = append(valid, e)
				} else {
					untrusted = append(untrusted, e)
				}
			}
		}
		// Entries the trust rule refuses are withheld and reported, never
		// active, and alone never withhold authorisation.
		var perEntry []error // the reports that name an entry
		for _, u := range set.Untrusted {
			var pe *reservation.PodError
			if errors.As(u, &pe) && pe.Index < 0 {
				if !errors.Is(pe, reservation.ErrMalformed) && !errors.Is(pe, reservation.ErrLegacyIdentifier) {
					t.Fatalf("untrusted whole-record report %v is neither malformed nor legacy", u)
				}
				continue
			}
			perEntry = append(perEntry, u)
		}
		if len(perEntry) != len(untrusted) {
			t.Fatalf("%d untrusted reports, want %d: %v", len(perEntry), len(untrusted), set.Untrusted)
		}
		for i, e := range untrusted {
			var pe *reservation.PodError
			if !errors.As(perEntry[i], &pe) || pe.Pod != e.Pod() || pe.Index != e.Index ||
				!errors.Is(pe, reservation.ErrNotRequested) || !errors.Is(pe, reservation.ErrInvalid) {
				t.Fatalf("untrusted report %d = %v, want entry %v not requested", i, perEntry[i], e)
			}
			if _, ok := set.Lookup(e.PodUID, e.ContainerIndex, e.DeviceIndex); ok {
				t.Fatalf("untrusted entry %v is active", e)
			}
			if !slices.Contains(set.Withheld, e) {
				t.Fatalf("untrusted entry %v not withheld", e)
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
		// Every claim of an unknown pod or an untrusted entry is respected.
		for _, e := range set.Withheld {
			if !set.IsUnknown(e.PodUID) && !slices.Contains(untrusted, e) || (e.Placement.Size > 0 && !set.Claimed(e.GPUUUID, e.Placement)) {
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
