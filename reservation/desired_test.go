package reservation_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

const (
	gpuA = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
	gpuB = "GPU-11111111-2222-4333-8444-555555555555"
	migA = "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	migB = "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
	migC = "MIG-cccccccc-bbbb-4ccc-8ddd-eeeeeeeeeeee"
)

func alloc(ci, di int, gpu, profile string, start, size uint32) reservation.Allocation {
	return reservation.Allocation{ContainerIndex: ci, DeviceIndex: di, GPUUUID: gpu, Profile: profile,
		Placement: capability.Placement{Start: start, Size: size}}
}

func pod(uid string, phase reservation.PodPhase, allocs ...reservation.Allocation) reservation.Pod {
	return rawPod(uid, phase, reservation.EncodeString(allocs))
}

// rawPod returns a pod whose containers request exactly the devices its
// record reserves, when the record decodes.
func rawPod(uid string, phase reservation.PodPhase, value string) reservation.Pod {
	allocs, _ := reservation.DecodeString(value)
	return reservation.Pod{UID: uid, Namespace: "ns", Name: "pod-" + uid, Phase: phase,
		Annotations: map[string]string{reservation.AnnotationKey: value}, DeviceRequests: requests(allocs)}
}

// requests returns the device requests under which every entry of allocs
// passes the trust rule: per container, its number of entries.
func requests(allocs []reservation.Allocation) []int {
	var out []int
	for _, a := range allocs {
		if a.ContainerIndex < 0 || a.ContainerIndex > 1000 {
			continue
		}
		for len(out) <= a.ContainerIndex {
			out = append(out, 0)
		}
		out[a.ContainerIndex]++
	}
	return out
}

func uids(entries []reservation.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.PodUID)
	}
	return out
}

func refs(pods []reservation.PodRef) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.UID)
	}
	return out
}

func TestDesiredActivity(t *testing.T) {
	deleting := pod("del", reservation.PodRunning, alloc(0, 0, gpuA, "1g.5gb", 0, 1))
	deleting.Deleting = true
	deleting.ContainersTerminated = true
	snap := reservation.Snapshot{Complete: true, Pods: []reservation.Pod{
		pod("run", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 2, 2), migA, 4, 0)),
		pod("pend", reservation.PodPending, alloc(0, 0, gpuA, "1g.5gb", 0, 1)),
		pod("unk", reservation.PodUnknown, alloc(1, 0, gpuB, "1g.5gb", 6, 1)),
		pod("done", reservation.PodSucceeded, alloc(0, 0, gpuA, "1g.5gb", 0, 1)),
		pod("failed", reservation.PodFailed, alloc(0, 0, gpuA, "2g.10gb", 2, 2)),
		deleting,
		rawPod("ended-bad", reservation.PodFailed, "garbage"),
		{UID: "plain", Namespace: "ns", Name: "no-annotation", Phase: reservation.PodRunning},
		rawPod("empty", reservation.PodRunning, ""),
	}}
	set := reservation.Desired(snap)
	if !set.Authorized || len(set.Reasons) != 0 || set.Verdict() != nil {
		t.Fatalf("Desired not authorised: %v", set.Verdict())
	}
	if got, want := uids(set.Active), []string{"unk", "pend", "run"}; !slices.Equal(got, want) {
		t.Fatalf("active pods = %v, want %v (sorted by GPU UUID, placement)", got, want)
	}
	if len(set.Unknown) != 0 || len(set.Withheld) != 0 {
		t.Fatalf("unknown %v withheld %v, want none", set.Unknown, set.Withheld)
	}
}

func TestDesiredIncompleteListing(t *testing.T) {
	set := reservation.Desired(reservation.Snapshot{Pods: []reservation.Pod{
		pod("a", reservation.PodRunning, alloc(0, 0, gpuA, "1g.5gb", 0, 1)),
	}})
	if set.Authorized || !errors.Is(set.Verdict(), reservation.ErrIncompleteSnapshot) || !errors.Is(set.Verdict(), reservation.ErrNotAuthorized) {
		t.Fatalf("Verdict = %v, want ErrIncompleteSnapshot", set.Verdict())
	}
	if len(set.Active) != 1 {
		t.Fatalf("active = %v, want the listed pod's reservation", set.Active)
	}
}

func TestDesiredWithholds(t *testing.T) {
	good := pod("good", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 3, 0))
	tests := []struct {
		name         string
		pods         []reservation.Pod
		wantReason   error
		wantUnknown  []string
		wantActive   []string
		wantWithheld []string
		wantIndex    int // PodError entry index; -2 when the reason is not a PodError
	}{
		{
			name:        "malformed record",
			pods:        []reservation.Pod{good, requesting(rawPod("bad", reservation.PodRunning, `[{"containerIndex":0,`), 1)},
			wantReason:  reservation.ErrMalformed,
			wantUnknown: []string{"bad"}, wantActive: []string{"good"}, wantIndex: 0,
		},
		{
			name: "partial runtime identity",
			pods: []reservation.Pod{good, pod("partial", reservation.PodRunning,
				alloc(0, 0, gpuB, "1g.5gb", 0, 1),
				reservation.Allocation{ContainerIndex: 0, DeviceIndex: 1, GPUUUID: gpuB, Profile: "1g.5gb", Placement: capability.Placement{Start: 1, Size: 1}, MIGUUID: migB})},
			wantReason:  reservation.ErrPartialRuntime,
			wantUnknown: []string{"partial"}, wantActive: []string{"good"}, wantWithheld: []string{"partial", "partial"}, wantIndex: 1,
		},
		{
			name:        "invalid record",
			pods:        []reservation.Pod{good, pod("sizeless", reservation.PodPending, alloc(0, 0, gpuB, "1g.5gb", 0, 0))},
			wantReason:  reservation.ErrPlacement,
			wantUnknown: []string{"sizeless"}, wantActive: []string{"good"}, wantWithheld: []string{"sizeless"}, wantIndex: 0,
		},
		{
			name:        "overlap across pods",
			pods:        []reservation.Pod{good, pod("thief", reservation.PodPending, alloc(0, 0, gpuA, "1g.5gb", 1, 1))},
			wantReason:  reservation.ErrOverlap,
			wantUnknown: []string{"good", "thief"}, wantWithheld: []string{"good", "thief"}, wantIndex: -2,
		},
		{
			name:        "same MIG UUID across pods",
			pods:        []reservation.Pod{good, pod("copy", reservation.PodRunning, realized(alloc(0, 0, gpuB, "2g.10gb", 0, 2), migA, 3, 0))},
			wantReason:  reservation.ErrRuntimeConflict,
			wantUnknown: []string{"copy", "good"}, wantWithheld: []string{"copy", "good"}, wantIndex: -2,
		},
		{
			name:        "same GPU instance across pods",
			pods:        []reservation.Pod{good, pod("gi", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 4, 2), migB, 3, 0))},
			wantReason:  reservation.ErrRuntimeConflict,
			wantUnknown: []string{"gi", "good"}, wantWithheld: []string{"good", "gi"}, wantIndex: -2,
		},
		{
			name: "legacy identifiers",
			pods: []reservation.Pod{good, {UID: "old", Namespace: "ns", Name: "v29", Phase: reservation.PodRunning, DeviceRequests: []int{1},
				Annotations: map[string]string{reservation.LegacyDevicesAnnotationKey: gpuB + "[1-3],NVIDIA,4864,0:;"}}},
			wantReason:  reservation.ErrLegacyIdentifier,
			wantUnknown: []string{"old"}, wantActive: []string{"good"}, wantIndex: -1,
		},
		{
			name:       "duplicate pod UID",
			pods:       []reservation.Pod{good, pod("good", reservation.PodRunning, alloc(0, 0, gpuB, "1g.5gb", 0, 1))},
			wantReason: reservation.ErrPodIdentity,
			// Which of the two owns what cannot be told: both are withheld.
			wantUnknown: []string{"good"}, wantWithheld: []string{"good", "good"}, wantIndex: -1,
		},
		{
			name:        "empty pod UID",
			pods:        []reservation.Pod{good, pod("", reservation.PodRunning, alloc(0, 0, gpuB, "1g.5gb", 0, 1))},
			wantReason:  reservation.ErrPodIdentity,
			wantUnknown: []string{""}, wantActive: []string{"good"}, wantWithheld: []string{""}, wantIndex: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: tt.pods})
			if set.Authorized {
				t.Fatalf("authorised, want withheld")
			}
			if v := set.Verdict(); !errors.Is(v, tt.wantReason) || !errors.Is(v, reservation.ErrNotAuthorized) {
				t.Fatalf("Verdict = %v, want %v", v, tt.wantReason)
			}
			if got := refs(set.Unknown); !slices.Equal(got, tt.wantUnknown) {
				t.Errorf("unknown = %v, want %v", got, tt.wantUnknown)
			}
			if got := uids(set.Active); !slices.Equal(got, tt.wantActive) {
				t.Errorf("active = %v, want %v", got, tt.wantActive)
			}
			if got := uids(set.Withheld); !slices.Equal(got, tt.wantWithheld) {
				t.Errorf("withheld = %v, want %v", got, tt.wantWithheld)
			}
			for _, r := range set.Reasons {
				if !errors.Is(r, tt.wantReason) {
					continue
				}
				var pe *reservation.PodError
				var ce *reservation.ConflictError
				switch {
				case errors.As(r, &pe):
					if pe.Index != tt.wantIndex || pe.Pod.Namespace != "ns" || pe.Pod.Name == "" {
						t.Errorf("PodError %+v, want entry %d naming the pod", pe, tt.wantIndex)
					}
				case errors.As(r, &ce):
					if tt.wantIndex != -2 || !errors.Is(r, reservation.ErrConflict) || ce.First.PodUID == ce.Second.PodUID {
						t.Errorf("ConflictError %+v unexpected", ce)
					}
				default:
					t.Errorf("reason %T %v is neither a PodError nor a ConflictError", r, r)
				}
				return
			}
			t.Fatalf("no reason matches %v: %v", tt.wantReason, set.Reasons)
		})
	}
}

// requesting returns p with its first container requesting n devices.
func requesting(p reservation.Pod, n int) reservation.Pod {
	p.DeviceRequests = []int{n}
	return p
}

// A pod that requests no MIG device owns none: an undecodable, invalid or
// legacy record of such a pod (one created with spec.nodeName preset, say)
// is untrusted and withholds no authorisation, so it cannot stop
// reclamation on its node. Its decodable entries are still respected.
func TestDesiredNoRequestCannotWithhold(t *testing.T) {
	good := pod("good", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 3, 0))
	noRequest := func(uid, value string, legacy string) reservation.Pod {
		p := rawPod(uid, reservation.PodRunning, value)
		p.DeviceRequests = nil
		if legacy != "" {
			p.Annotations[reservation.LegacyDevicesAnnotationKey] = legacy
		}
		return p
	}
	tests := []struct {
		name         string
		pod          reservation.Pod
		wantErr      error
		wantIndex    int // of the first Untrusted error
		wantWithheld []string
	}{
		{"undecodable", noRequest("x", `[{"containerIndex":0,`, ""), reservation.ErrMalformed, -1, nil},
		{"invalid", noRequest("x", reservation.EncodeString([]reservation.Allocation{alloc(0, 0, gpuB, "1g.5gb", 0, 0)}), ""),
			reservation.ErrNotRequested, 0, []string{"x"}},
		{"copy of another's realized record", noRequest("x", reservation.EncodeString([]reservation.Allocation{
			realized(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 3, 0), realized(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 3, 0)}), ""),
			reservation.ErrNotRequested, 0, []string{"x", "x"}},
		{"legacy identifiers", noRequest("x", "", gpuB+"[1-3],NVIDIA,4864,0:;"), reservation.ErrLegacyIdentifier, -1, nil},
		{"legacy and undecodable", noRequest("x", "{", gpuB+"[1-3],NVIDIA,4864,0:;"), reservation.ErrLegacyIdentifier, -1, nil},
		{"requests zero devices", func() reservation.Pod {
			p := noRequest("x", "{", "")
			p.DeviceRequests = []int{0, 0}
			return p
		}(), reservation.ErrMalformed, -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: []reservation.Pod{good, tt.pod}})
			if !set.Authorized || set.Verdict() != nil {
				t.Fatalf("Verdict = %v, want authorised", set.Verdict())
			}
			if len(set.Unknown) != 0 {
				t.Errorf("unknown = %v, want none", set.Unknown)
			}
			if got := uids(set.Active); !slices.Equal(got, []string{"good"}) {
				t.Errorf("active = %v, want good's", got)
			}
			if got := uids(set.Withheld); !slices.Equal(got, tt.wantWithheld) {
				t.Errorf("withheld = %v, want %v", got, tt.wantWithheld)
			}
			if len(set.Untrusted) == 0 {
				t.Fatal("nothing reported untrusted")
			}
			var pe *reservation.PodError
			if !errors.As(set.Untrusted[0], &pe) || pe.Pod.UID != "x" || pe.Index != tt.wantIndex || !errors.Is(pe, tt.wantErr) {
				t.Errorf("Untrusted[0] = %v, want x's entry %d matching %v", set.Untrusted[0], tt.wantIndex, tt.wantErr)
			}
		})
	}
	// A pod that requests a device still withholds with the same record.
	bad := rawPod("x", reservation.PodRunning, "{")
	bad.DeviceRequests = []int{1}
	if set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: []reservation.Pod{good, bad}}); set.Authorized || !errors.Is(set.Verdict(), reservation.ErrMalformed) {
		t.Fatalf("Verdict = %v, want ErrMalformed", set.Verdict())
	}
}

func TestDesiredIgnoresEndedPodsInConflicts(t *testing.T) {
	set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: []reservation.Pod{
		pod("old", reservation.PodSucceeded, realized(alloc(0, 0, gpuA, "2g.10gb", 2, 2), migA, 4, 0)),
		pod("new", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 2, 2), migB, 4, 0)),
	}})
	if !set.Authorized || len(set.Active) != 1 || set.Active[0].PodUID != "new" {
		t.Fatalf("Desired = %+v, want only the running pod, authorised", set)
	}
}

func TestDesiredLookups(t *testing.T) {
	set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: []reservation.Pod{
		pod("a", reservation.PodRunning,
			realized(alloc(1, 1, gpuA, "1g.5gb", 6, 1), migB, 13, 0),
			realized(alloc(1, 0, gpuA, "2g.10gb", 2, 2), migA, 4, 0),
			alloc(0, 0, gpuB, "3g.20gb", 4, 4)),
		pod("b", reservation.PodPending, alloc(0, 0, gpuB, "1g.5gb", 0, 1)),
		rawPod("bad", reservation.PodRunning, `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"`+gpuB+`","profile":"1g.5gb","placement":{"start":1,"size":1},"migUUID":"`+migC+`"}]`),
	}})
	if e, ok := set.Lookup("a", 1, 0); !ok || e.Placement != (capability.Placement{Start: 2, Size: 2}) || e.Index != 1 || e.Name != "pod-a" {
		t.Fatalf("Lookup(a,1,0) = %+v, %v", e, ok)
	}
	if _, ok := set.Lookup("a", 2, 0); ok {
		t.Fatalf("Lookup(a,2,0) found an entry")
	}
	if got := set.Container("a", 1); len(got) != 2 || got[0].DeviceIndex != 0 || got[1].DeviceIndex != 1 {
		t.Fatalf("Container(a,1) = %+v", got)
	}
	if got := set.Pod("a"); len(got) != 3 || got[0].ContainerIndex != 0 {
		t.Fatalf("Pod(a) = %+v", got)
	}
	if e, ok := set.At(gpuB, capability.Placement{Start: 0, Size: 1}); !ok || e.PodUID != "b" {
		t.Fatalf("At(gpuB,[0,1)) = %+v, %v", e, ok)
	}
	if _, ok := set.At(gpuB, capability.Placement{Start: 4, Size: 2}); ok {
		t.Fatalf("At matched a placement that is not exactly reserved")
	}
	if !set.Claimed(gpuB, capability.Placement{Start: 5, Size: 1}) {
		t.Fatalf("slot 5 of the 3g reservation not claimed")
	}
	if !set.Claimed(gpuB, capability.Placement{Start: 1, Size: 1}) || !set.ClaimedMIG(migC) {
		t.Fatalf("the malformed pod's claims are not respected")
	}
	if set.Claimed(gpuB, capability.Placement{Start: 2, Size: 2}) || set.ClaimedMIG("") {
		t.Fatalf("unclaimed placement reported as claimed")
	}
	if !set.IsUnknown("bad") || set.IsUnknown("a") {
		t.Fatalf("IsUnknown wrong: %v", set.Unknown)
	}
	if _, ok := set.Lookup("bad", 0, 0); ok {
		t.Fatalf("a malformed pod's entry was handed out")
	}
}

func TestDesiredZeroValue(t *testing.T) {
	var set reservation.DesiredSet
	if !errors.Is(set.Verdict(), reservation.ErrNotAuthorized) {
		t.Fatalf("zero DesiredSet Verdict = %v, want ErrNotAuthorized", set.Verdict())
	}
	if _, ok := set.Lookup("x", 0, 0); ok || set.Claimed(gpuA, capability.Placement{Size: 8}) {
		t.Fatalf("zero DesiredSet claims something")
	}
}

// Pods whose large, individually valid records claim the same hardware
// are all unknown, and reporting them stays bounded: at most MaxProblems
// conflicts are listed, however many pairs conflict.
func TestDesiredBoundsConflicts(t *testing.T) {
	allocs := make([]reservation.Allocation, 2400)
	for i := range allocs {
		allocs[i] = alloc(0, i, "GPU-"+strconv.Itoa(i), "1g.5gb", 0, 1)
	}
	value := reservation.EncodeString(allocs)
	var pods []reservation.Pod
	for p := range 5 {
		pods = append(pods, reservation.Pod{UID: "u" + strconv.Itoa(p), Phase: reservation.PodRunning,
			Annotations: map[string]string{reservation.AnnotationKey: value}, DeviceRequests: requests(allocs)})
	}
	set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: pods})
	if set.Authorized || len(set.Active) != 0 || len(set.Unknown) != len(pods) {
		t.Fatalf("authorized %v, %d active, %d unknown; want all %d pods unknown", set.Authorized, len(set.Active), len(set.Unknown), len(pods))
	}
	if got := len(set.Reasons); got != reservation.MaxProblems {
		t.Errorf("%d reasons, want MaxProblems (%d)", got, reservation.MaxProblems)
	}
	for _, r := range set.Reasons {
		if !errors.Is(r, reservation.ErrConflict) || !errors.Is(r, reservation.ErrOverlap) {
			t.Fatalf("reason %v, want an overlap conflict", r)
		}
	}
}

func TestConflicts(t *testing.T) {
	entry := func(uid string, a reservation.Allocation) reservation.Entry {
		return reservation.Entry{PodUID: uid, Namespace: "ns", Name: "claim-" + uid, Allocation: a}
	}
	withMIG := func(a reservation.Allocation, mig string, gi uint32) reservation.Allocation {
		return a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: mig, GPUInstanceID: gi})
	}
	tests := []struct {
		name        string
		entries     []reservation.Entry
		wantHolders []string
		wantProblem error
	}{
		{name: "disjoint", entries: []reservation.Entry{
			entry("x", alloc(0, 0, gpuA, "2g.10gb", 0, 2)), entry("y", alloc(0, 0, gpuA, "2g.10gb", 2, 2)),
		}},
		{name: "same holder overlapping is Validate's", entries: []reservation.Entry{
			entry("x", alloc(0, 0, gpuA, "2g.10gb", 0, 2)), entry("x", alloc(0, 1, gpuA, "2g.10gb", 0, 2)),
		}},
		{name: "overlap", entries: []reservation.Entry{
			entry("y", alloc(0, 0, gpuA, "3g.20gb", 0, 4)), entry("x", alloc(0, 0, gpuA, "2g.10gb", 2, 2)),
			entry("z", alloc(0, 0, gpuB, "3g.20gb", 0, 4)),
		}, wantHolders: []string{"x", "y"}, wantProblem: reservation.ErrOverlap},
		{name: "same MIG UUID on two GPUs", entries: []reservation.Entry{
			entry("x", withMIG(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 1)), entry("y", withMIG(alloc(0, 0, gpuB, "2g.10gb", 0, 2), migA, 1)),
		}, wantHolders: []string{"x", "y"}, wantProblem: reservation.ErrRuntimeConflict},
		{name: "same GPU instance ID", entries: []reservation.Entry{
			entry("x", withMIG(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 3)), entry("y", withMIG(alloc(0, 0, gpuA, "2g.10gb", 2, 2), migB, 3)),
		}, wantHolders: []string{"x", "y"}, wantProblem: reservation.ErrRuntimeConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			holders, conflicts := reservation.Conflicts(tt.entries)
			var got []string
			for _, h := range holders {
				got = append(got, h.UID)
			}
			if !slices.Equal(got, tt.wantHolders) {
				t.Errorf("holders = %v, want %v", got, tt.wantHolders)
			}
			if tt.wantProblem == nil {
				if len(conflicts) != 0 {
					t.Errorf("conflicts = %v, want none", conflicts)
				}
				return
			}
			if len(conflicts) != 1 || !errors.Is(conflicts[0], tt.wantProblem) || !errors.Is(conflicts[0], reservation.ErrConflict) {
				t.Errorf("conflicts = %v, want one matching %v", conflicts, tt.wantProblem)
			}
		})
	}
}

func TestDesiredEarlierRecordWins(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seenAt := func(p reservation.Pod, at time.Time) reservation.Pod {
		p.RecordSeen = at
		return p
	}
	bound := func(p reservation.Pod) reservation.Pod {
		p.RecordScheduled = true
		return p
	}
	started := func(p reservation.Pod) reservation.Pod {
		p.Phase, p.RecordStarted = reservation.PodRunning, true
		return p
	}
	owner := pod("owner", reservation.PodPending, alloc(0, 0, gpuA, "2g.10gb", 0, 2))
	forged := pod("forged", reservation.PodPending, alloc(0, 0, gpuA, "2g.10gb", 0, 2))
	third := pod("third", reservation.PodPending, alloc(0, 0, gpuA, "1g.5gb", 1, 1))
	other := pod("other", reservation.PodRunning, alloc(0, 0, gpuB, "1g.5gb", 0, 1))
	tests := []struct {
		name           string
		pods           []reservation.Pod
		wantAuthorized bool
		wantActive     []string
		wantWithheld   []string
		wantUnknown    []string
		wantLosers     []string // pods of the Untrusted errors, in order
		// wantUnscheduled: every loser lost by RecordScheduled.
		wantUnscheduled bool
	}{
		{
			name:           "scheduled record wins over an earlier unscheduled one",
			pods:           []reservation.Pod{seenAt(bound(owner), t0.Add(time.Second)), seenAt(forged, t0)},
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged"}, wantLosers: []string{"forged"},
			wantUnscheduled: true,
		},
		{
			// After the observer lost its node-local record: the running
			// pod may hold a device handed to it at its claim.
			name:        "scheduled record does not outrank one first seen started: equal times, both unknown",
			pods:        []reservation.Pod{seenAt(bound(owner), t0), seenAt(started(forged), t0)},
			wantUnknown: []string{"forged", "owner"}, wantWithheld: []string{"forged", "owner"},
		},
		{
			name:           "scheduled record later than one first seen started loses",
			pods:           []reservation.Pod{seenAt(bound(owner), t0.Add(time.Second)), seenAt(started(forged), t0)},
			wantAuthorized: true,
			wantActive:     []string{"forged"}, wantWithheld: []string{"owner"}, wantLosers: []string{"owner"},
		},
		{
			name:           "scheduled and first seen started wins over unscheduled",
			pods:           []reservation.Pod{seenAt(started(bound(owner)), t0.Add(time.Second)), seenAt(forged, t0)},
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged"}, wantLosers: []string{"forged"},
			wantUnscheduled: true,
		},
		{
			name:           "scheduled record wins without times",
			pods:           []reservation.Pod{forged, bound(owner)},
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged"}, wantLosers: []string{"forged"},
			wantUnscheduled: true,
		},
		{
			name:           "both scheduled: the earlier wins",
			pods:           []reservation.Pod{seenAt(bound(forged), t0.Add(time.Second)), seenAt(bound(owner), t0)},
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged"}, wantLosers: []string{"forged"},
		},
		{
			name:        "both scheduled, equal times: both unknown",
			pods:        []reservation.Pod{seenAt(bound(owner), t0), seenAt(bound(forged), t0)},
			wantUnknown: []string{"forged", "owner"}, wantWithheld: []string{"forged", "owner"},
		},
		{
			name: "three-way: the scheduled one wins over two earlier ones",
			pods: []reservation.Pod{seenAt(bound(owner), t0.Add(2*time.Second)), seenAt(third, t0), seenAt(forged, t0.Add(time.Second))},
			// third and forged both lose to owner; third's earlier time
			// over forged no longer matters.
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged", "third"}, wantLosers: []string{"third", "forged"},
			wantUnscheduled: true,
		},
		{
			name: "runtime identity conflicts are not resolved by binding",
			pods: []reservation.Pod{
				bound(pod("owner", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 3, 0))),
				pod("copy", reservation.PodRunning, realized(alloc(0, 0, gpuB, "2g.10gb", 0, 2), migA, 3, 0)),
			},
			wantUnknown: []string{"copy", "owner"}, wantWithheld: []string{"copy", "owner"},
		},
		{
			name:           "earlier record wins",
			pods:           []reservation.Pod{seenAt(owner, t0), seenAt(forged, t0.Add(time.Second)), seenAt(other, t0.Add(time.Hour))},
			wantAuthorized: true,
			wantActive:     []string{"other", "owner"}, wantWithheld: []string{"forged"}, wantLosers: []string{"forged"},
		},
		{
			name:           "listing order does not matter",
			pods:           []reservation.Pod{seenAt(forged, t0.Add(time.Nanosecond)), seenAt(owner, t0)},
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged"}, wantLosers: []string{"forged"},
		},
		{
			name:        "equal times: both unknown",
			pods:        []reservation.Pod{seenAt(owner, t0), seenAt(forged, t0), seenAt(other, t0)},
			wantActive:  []string{"other"},
			wantUnknown: []string{"forged", "owner"}, wantWithheld: []string{"forged", "owner"},
		},
		{
			name:        "one time unknown: both unknown",
			pods:        []reservation.Pod{owner, seenAt(forged, t0)},
			wantUnknown: []string{"forged", "owner"}, wantWithheld: []string{"forged", "owner"},
		},
		{
			name:        "no history: both unknown",
			pods:        []reservation.Pod{owner, forged},
			wantUnknown: []string{"forged", "owner"}, wantWithheld: []string{"forged", "owner"},
		},
		{
			name: "runtime identity conflicts are not resolved by time",
			pods: []reservation.Pod{
				seenAt(pod("owner", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 0, 2), migA, 3, 0)), t0),
				seenAt(pod("copy", reservation.PodRunning, realized(alloc(0, 0, gpuB, "2g.10gb", 0, 2), migA, 3, 0)), t0.Add(time.Second)),
			},
			wantUnknown: []string{"copy", "owner"}, wantWithheld: []string{"copy", "owner"},
		},
		{
			name: "three-way: the earliest wins",
			pods: []reservation.Pod{seenAt(third, t0.Add(2*time.Second)), seenAt(forged, t0.Add(time.Second)), seenAt(owner, t0)},
			// forged loses to owner, third to both.
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged", "third"}, wantLosers: []string{"third", "forged"},
		},
		{
			name: "three-way: losers tied with each other",
			pods: []reservation.Pod{seenAt(third, t0.Add(time.Second)), seenAt(forged, t0.Add(time.Second)), seenAt(owner, t0)},
			// Both lost to owner; their own tie no longer matters.
			wantAuthorized: true,
			wantActive:     []string{"owner"}, wantWithheld: []string{"forged", "third"}, wantLosers: []string{"third", "forged"},
		},
		{
			name: "three-way: winner's rival tied",
			pods: []reservation.Pod{seenAt(third, t0), seenAt(forged, t0.Add(time.Second)), seenAt(owner, t0)},
			// owner and third overlap with one time: both unknown;
			// forged lost to both.
			wantActive:  nil,
			wantUnknown: []string{"owner", "third"}, wantWithheld: []string{"forged", "owner", "third"}, wantLosers: []string{"forged"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: tt.pods})
			if set.Authorized != tt.wantAuthorized {
				t.Fatalf("Authorized = %t (%v), want %t", set.Authorized, set.Verdict(), tt.wantAuthorized)
			}
			if !tt.wantAuthorized && !errors.Is(set.Verdict(), reservation.ErrConflict) {
				t.Errorf("Verdict = %v, want a conflict", set.Verdict())
			}
			if got := uids(set.Active); !slices.Equal(got, tt.wantActive) {
				t.Errorf("active = %v, want %v", got, tt.wantActive)
			}
			if got := uids(set.Withheld); !slices.Equal(got, tt.wantWithheld) {
				t.Errorf("withheld = %v, want %v", got, tt.wantWithheld)
			}
			if got := refs(set.Unknown); !slices.Equal(got, tt.wantUnknown) {
				t.Errorf("unknown = %v, want %v", got, tt.wantUnknown)
			}
			var losers []string
			for _, err := range set.Untrusted {
				var pe *reservation.PodError
				var ce *reservation.ConflictError
				if !errors.As(err, &pe) || !errors.As(err, &ce) {
					t.Fatalf("untrusted %v: not a *PodError wrapping a *ConflictError", err)
				}
				if !errors.Is(err, reservation.ErrLaterConflict) || !errors.Is(err, reservation.ErrConflict) || !errors.Is(err, reservation.ErrOverlap) {
					t.Errorf("untrusted %v does not match ErrLaterConflict, ErrConflict and ErrOverlap", err)
				}
				if errors.Is(err, reservation.ErrNotRequested) {
					t.Errorf("untrusted %v matches ErrNotRequested", err)
				}
				if got, want := ce.Second.PodUID, pe.Pod.UID; got != want {
					t.Errorf("conflict's second = %s, want the loser %s", got, want)
				}
				if got, want := pe.Index, ce.Second.Index; got != want {
					t.Errorf("PodError index = %d, want %d", got, want)
				}
				if !ce.Later {
					t.Errorf("conflict %v: Later not set", ce)
				}
				if got := errors.Is(err, reservation.ErrUnscheduledConflict); got != tt.wantUnscheduled || ce.Unscheduled != got {
					t.Errorf("untrusted %v: matches ErrUnscheduledConflict = %t, Unscheduled = %t, want %t", err, got, ce.Unscheduled, tt.wantUnscheduled)
				}
				losers = append(losers, pe.Pod.UID)
			}
			if !slices.Equal(losers, tt.wantLosers) {
				t.Errorf("losers = %v, want %v", losers, tt.wantLosers)
			}
			for _, r := range set.Reasons {
				if errors.Is(r, reservation.ErrLaterConflict) {
					t.Errorf("reason %v is a resolved conflict", r)
				}
			}
			for _, e := range set.Withheld {
				if _, ok := set.Lookup(e.PodUID, e.ContainerIndex, e.DeviceIndex); ok {
					t.Errorf("withheld %v is also active", e)
				}
				if !set.Claimed(e.GPUUUID, e.Placement) {
					t.Errorf("withheld %v is not claimed", e)
				}
			}
		})
	}
}

// TestDesiredRecordSeenProperties: whatever the records and their first
// observations, the active entries never conflict, a resolved conflict's
// loser was seen strictly after its winner, and pods without observations
// are judged as before (no conflict resolved).
func TestDesiredRecordSeenProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		snap := reservation.Snapshot{Complete: true}
		seen := map[string]time.Time{}
		scheduled := map[string]bool{}
		started := map[string]bool{}
		anySeen, anyScheduled := false, false
		for i := range rapid.IntRange(0, 5).Draw(t, "pods") {
			uid := "p" + strconv.Itoa(i)
			r := propRecords.Draw(t, "record")
			p := reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning,
				Annotations:    map[string]string{reservation.AnnotationKey: r.Value()},
				DeviceRequests: r.DeviceRequests}
			if n := rapid.IntRange(-1, 2).Draw(t, "seen"); n >= 0 {
				p.RecordSeen = t0.Add(time.Duration(n) * time.Second)
				anySeen = true
			}
			p.RecordScheduled = rapid.Bool().Draw(t, "scheduled")
			anyScheduled = anyScheduled || p.RecordScheduled
			p.RecordStarted = rapid.Bool().Draw(t, "started")
			seen[uid] = p.RecordSeen
			scheduled[uid] = p.RecordScheduled
			started[uid] = p.RecordStarted
			snap.Pods = append(snap.Pods, p)
		}
		set := reservation.Desired(snap)
		if _, conflicts := reservation.Conflicts(set.Active); len(conflicts) > 0 {
			t.Fatalf("active entries conflict: %v", conflicts[0])
		}
		if set.Authorized != (len(set.Reasons) == 0) {
			t.Fatalf("Authorized = %t with reasons %v", set.Authorized, set.Reasons)
		}
		for _, r := range set.Reasons {
			if errors.Is(r, reservation.ErrLaterConflict) {
				t.Fatalf("resolved conflict among the reasons: %v", r)
			}
		}
		type entryKey struct {
			uid   string
			index int
		}
		losers := map[entryKey]bool{}
		for _, err := range set.Untrusted {
			var ce *reservation.ConflictError
			if !errors.As(err, &ce) {
				continue
			}
			k := entryKey{ce.Second.PodUID, ce.Second.Index}
			if losers[k] {
				t.Fatalf("loser %v reported twice", ce.Second)
			}
			losers[k] = true
			if !anySeen && !anyScheduled {
				t.Fatalf("conflict %v resolved without observations", ce)
			}
			if !errors.Is(ce, reservation.ErrOverlap) || !errors.Is(ce, reservation.ErrLaterConflict) {
				t.Fatalf("conflict %v resolved but not an overlap matching ErrLaterConflict", ce)
			}
			win, lose := seen[ce.First.PodUID], seen[ce.Second.PodUID]
			schedWin, schedLose := scheduled[ce.First.PodUID], scheduled[ce.Second.PodUID]
			switch {
			case ce.Unscheduled != errors.Is(ce, reservation.ErrUnscheduledConflict):
				t.Fatalf("conflict %v: Unscheduled = %t but ErrUnscheduledConflict match differs", ce, ce.Unscheduled)
			case ce.Unscheduled && (!schedWin || schedLose || started[ce.Second.PodUID]):
				t.Fatalf("conflict %v resolved by binding for %s (scheduled %t) over %s (scheduled %t, started %t)", ce, ce.First.PodUID, schedWin, ce.Second.PodUID, schedLose, started[ce.Second.PodUID])
			case !ce.Unscheduled && (bindingDecides(schedWin, started[ce.First.PodUID], schedLose, started[ce.Second.PodUID]) || win.IsZero() || !win.Before(lose)):
				t.Fatalf("conflict %v resolved for %s seen %v over %s seen %v", ce, ce.First.PodUID, win, ce.Second.PodUID, lose)
			}
			if _, ok := set.Lookup(ce.Second.PodUID, ce.Second.ContainerIndex, ce.Second.DeviceIndex); ok {
				t.Fatalf("loser %v is active", ce.Second)
			}
		}
		// Every unreleased pod's decodable entries are active or withheld.
		var all int
		for _, p := range snap.Pods {
			if allocs, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey]); err == nil {
				all += len(allocs)
			}
		}
		if got := len(set.Active) + len(set.Withheld); got != all {
			t.Fatalf("%d entries active or withheld, want %d", got, all)
		}
	})
}

// bindingDecides reports whether the binding alone resolves an overlap of
// two pods' records (Desired): exactly one is scheduled, and the other was
// not first seen on a started pod.
func bindingDecides(schedA, startedA, schedB, startedB bool) bool {
	return schedA && !schedB && !startedB || schedB && !schedA && !startedA
}
