package placement_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// narrowed keeps only the named profiles of gpu, as an allowlist change
// republished in the node registration would; as a GPU decoded from the
// registration, it carries no limits.
func narrowed(gpu capability.GPU, keep ...string) capability.GPU {
	gpu.Limits = capability.Limits{}
	gpu.Profiles = slices.DeleteFunc(slices.Clone(gpu.Profiles), func(p capability.Profile) bool {
		return !slices.Contains(keep, p.Name)
	})
	return gpu
}

// A 3g.20gb pod runs at [4,8); the registration is republished with only
// 1g.5gb and 2g.10gb, whose placements span 7 slots; the grid stays the
// A100's 8 slots. The running pod keeps [4,8) taken, new pods land
// elsewhere, and the mismatch is reported.
func TestLedgerNarrowerTableKeepsRunningPods(t *testing.T) {
	gpu := plainGPU(t, "A100-SXM4-40GB", 0)
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n1", []capability.GPU{gpu}); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "running", []placement.Reservation{res(gpu.UUID, "3g.20gb", 4, 4)}); err != nil {
		t.Fatal(err)
	}
	err := l.SetNode("n1", []capability.GPU{narrowed(gpu, "1g.5gb", "2g.10gb")})
	if !errors.Is(err, placement.ErrInvalidReservation) {
		t.Errorf("SetNode with a narrower table = %v, want ErrInvalidReservation for the running pod", err)
	}
	if got, want := used(t, l, "n1", 0), placement.Occupancy(0b11110000); got != want {
		t.Errorf("used after narrowing = %v, want %v", got, want)
	}
	one := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: "1g.5gb"}}}
	for _, uid := range []string{"p1", "p2", "p3", "p4"} {
		as, err := l.Reserve("n1", uid, one)
		if err != nil {
			t.Fatalf("Reserve(%s) = %v", uid, err)
		}
		if p := as[0].Placement; p.Overlaps(capability.Placement{Start: 4, Size: 4}) {
			t.Fatalf("Reserve(%s) placed %v over the running pod's [4,8)", uid, p)
		}
	}
	if _, err := l.Reserve("n1", "p5", one); !errors.Is(err, placement.ErrUnschedulable) {
		t.Errorf("fifth 1g.5gb = %v, want unschedulable: only [0,4) is free", err)
	}
	got := l.Conflicts()
	want := []placement.Conflict{{Node: "n1", GPUUUID: gpu.UUID, PodUID: "running", Placement: capability.Placement{Start: 4, Size: 4},
		Reason: `profile "3g.20gb" not published`}}
	if !slices.Equal(got, want) {
		t.Errorf("Conflicts() = %v, want %v", got, want)
	}

	// The pod ends: its slots are free again, and nothing is reported.
	l.DeletePod("running")
	if got, want := used(t, l, "n1", 0), placement.Occupancy(0b1111); got != want {
		t.Errorf("used after the running pod ended = %v, want %v", got, want)
	}
	if c := l.Conflicts(); len(c) != 0 {
		t.Errorf("Conflicts() after the pod ended = %v, want none", c)
	}
}

// A reservation on a GPU the registration no longer lists, or with a
// profile the table no longer publishes, is reported by Conflicts; the one
// on a listed GPU keeps its slots.
func TestLedgerConflictsReportTableMismatch(t *testing.T) {
	gpus := a100Node(t, 2)
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n1", gpus); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "a", []placement.Reservation{res(gpus[0].UUID, "7g.40gb", 0, 8)}); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "b", []placement.Reservation{res(gpus[1].UUID, "1g.5gb", 0, 1)}); err != nil {
		t.Fatal(err)
	}
	_ = l.SetNode("n1", []capability.GPU{narrowed(gpus[0], "1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb")})
	got := l.Conflicts()
	if len(got) != 2 || got[0].PodUID != "a" || got[1].PodUID != "b" || got[0].Other != "" || got[1].Other != "" {
		t.Fatalf("Conflicts() = %v, want one mismatch for pod a and one for pod b", got)
	}
	if u := used(t, l, "n1", 0); u != 0xff {
		t.Errorf("used = %v, want the 7g.40gb's [0,8) still taken", u)
	}
}

// A pod placed with an engine-bearing variant keeps its media engines after
// the allowlist drops that variant: the narrowed table no longer describes
// the profile, but the instance still holds the GPU's optical-flow set, so
// another "+me" instance must not be chosen until the pod ends.
func TestLedgerNarrowerTableKeepsRunningPodsEngines(t *testing.T) {
	gpu := fullGPU(t, "A30", 0)
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n1", []capability.GPU{gpu}); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "running", []placement.Reservation{res(gpu.UUID, "1g.6gb+me", 0, 1)}); err != nil {
		t.Fatal(err)
	}
	// The republished table keeps 2g.12gb+me but no longer 1g.6gb+me.
	var keep []string
	for _, p := range gpu.Profiles {
		if p.Name != "1g.6gb+me" {
			keep = append(keep, p.Name)
		}
	}
	if err := l.SetNode("n1", []capability.GPU{narrowed(gpu, keep...)}); !errors.Is(err, placement.ErrInvalidReservation) {
		t.Errorf("SetNode with a narrower table = %v, want ErrInvalidReservation for the running pod", err)
	}
	gs, _ := l.Node("n1")
	if got, want := gs[0].Engines, (placement.Engines{OFA: 1}); got != want {
		t.Errorf("engines after narrowing = %v, want %v", got, want)
	}
	me := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: "2g.12gb+me"}}}
	if as, err := l.Reserve("n1", "second", me); !errors.Is(err, placement.ErrUnschedulable) {
		t.Errorf("2g.12gb+me beside the running 1g.6gb+me = %v, %v; want unschedulable (one optical-flow set per GPU)", as, err)
	}
	l.DeletePod("running")
	if _, err := l.Reserve("n1", "second", me); err != nil {
		t.Errorf("2g.12gb+me after the running pod ended = %v", err)
	}
}
