package dra_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dynmig/dynmig/bench/dra"
	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

func newNode(t testing.TB, model string, gpus int) *dra.Node {
	t.Helper()
	gs, err := dra.PlainGPUs(model, gpus)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dra.NewModel("node-a", gs)
	if err != nil {
		t.Fatal(err)
	}
	return dra.NewNode(m, dra.NodeOptions{})
}

// TestModelRespectsAPILimits checks the published slices against the
// resource.k8s.io/v1 limits the API server validates.
func TestModelRespectsAPILimits(t *testing.T) {
	for _, model := range dra.QualityModels {
		t.Run(model, func(t *testing.T) {
			m := newNode(t, model, 8).Model()
			sets := map[string]resourceapi.CounterSet{}
			wantDevices := 0
			for _, g := range m.Grids() {
				for _, p := range g.Profiles() {
					wantDevices += len(p.Placements)
				}
			}
			gotDevices := 0
			for _, s := range m.Slices() {
				if got, want := s.Spec.Pool.ResourceSliceCount, int64(len(m.Slices())); got != want {
					t.Errorf("slice %s: ResourceSliceCount %d, want %d", s.Name, got, want)
				}
				if s.Spec.NodeName == nil || *s.Spec.NodeName != m.Node() || s.Spec.Pool.Name != m.Node() {
					t.Errorf("slice %s: not on node %s", s.Name, m.Node())
				}
				if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
					t.Errorf("slice %s has both devices and shared counters", s.Name)
				}
				if got := len(s.Spec.SharedCounters); got > resourceapi.ResourceSliceMaxCounterSets {
					t.Errorf("slice %s: %d counter sets", s.Name, got)
				}
				for _, cs := range s.Spec.SharedCounters {
					if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
						t.Errorf("counter set %s: %d counters", cs.Name, len(cs.Counters))
					}
					sets[cs.Name] = cs
				}
				if got := len(s.Spec.Devices); got > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
					t.Errorf("slice %s: %d devices", s.Name, got)
				}
				gotDevices += len(s.Spec.Devices)
			}
			if gotDevices != wantDevices {
				t.Errorf("published %d devices, want %d (one per profile and placement)", gotDevices, wantDevices)
			}
			for _, s := range m.Slices() {
				for _, d := range s.Spec.Devices {
					if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
						t.Errorf("device name %q: %v", d.Name, errs)
					}
					if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
						t.Errorf("device %s: %d attributes and capacities", d.Name, n)
					}
					if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
						t.Errorf("device %s: %d counter consumptions", d.Name, len(d.ConsumesCounters))
					}
					for _, cc := range d.ConsumesCounters {
						cs, ok := sets[cc.CounterSet]
						if !ok {
							t.Errorf("device %s: unknown counter set %s", d.Name, cc.CounterSet)
						}
						for name := range cc.Counters {
							if _, ok := cs.Counters[name]; !ok {
								t.Errorf("device %s: counter %s not in set %s", d.Name, name, cc.CounterSet)
							}
						}
					}
				}
			}
		})
	}
}

// TestDeviceConsumesItsSlots checks that every device consumes exactly the
// memory-slice counters of its placement.
func TestDeviceConsumesItsSlots(t *testing.T) {
	m := newNode(t, "A100-SXM4-40GB", 2).Model()
	byName := map[string]resourceapi.Device{}
	for _, s := range m.Slices() {
		for _, d := range s.Spec.Devices {
			byName[d.Name] = d
		}
	}
	for _, d := range m.Devices() {
		api := byName[d.Name]
		got := map[string]bool{}
		for name := range api.ConsumesCounters[0].Counters {
			got[name] = true
		}
		for s := d.Placement.Start; s < d.Placement.End(); s++ {
			if !got[fmt.Sprintf("memory-slice-%d", s)] {
				t.Errorf("%s %v does not consume slot %d", d.Name, d.Placement, s)
			}
			delete(got, fmt.Sprintf("memory-slice-%d", s))
		}
		delete(got, dra.MultiprocessorsCounter)
		if len(got) > 0 {
			t.Errorf("%s %v consumes extra counters %v", d.Name, d.Placement, got)
		}
		if got, want := *api.Attributes["profile"].StringValue, d.Profile; got != want {
			t.Errorf("%s: profile attribute %q, want %q", d.Name, got, want)
		}
	}
}

// demands are the single-device requests the equivalence test asks for:
// every profile by name, every profile's memory, and a percentage and a
// whole GPU.
func demands(grid *placement.Grid) []placement.ContainerRequest {
	var out []placement.ContainerRequest
	for _, p := range grid.Profiles() {
		out = append(out,
			placement.ContainerRequest{Devices: 1, Profile: p.Name},
			placement.ContainerRequest{Devices: 1, Memory: placement.MiB(p.MemoryMB)})
	}
	return append(out,
		placement.ContainerRequest{Devices: 1, Memory: placement.MiB(1)},
		placement.ContainerRequest{Devices: 1, Memory: placement.Percent(30)},
		placement.ContainerRequest{Devices: 1})
}

// TestAllocatorIsFirstFit drives the DRA allocator and dynmig's FirstFit on
// the same random occupancies with the same requests: both must agree on
// whether the request fits and on the device chosen. This is what makes the
// benchmark and quality comparison answer the same question.
func TestAllocatorIsFirstFit(t *testing.T) {
	ctx := context.Background()
	states := 12
	if testing.Short() {
		states = 4
	}
	for _, model := range dra.QualityModels {
		t.Run(model, func(t *testing.T) {
			placed, rejected := 0, 0
			defer func() {
				if placed == 0 || rejected == 0 {
					t.Errorf("%d placed, %d rejected: the states do not exercise both outcomes", placed, rejected)
				}
			}()
			rng := rand.New(rand.NewPCG(3, 4))
			for s := range states {
				n := newNode(t, model, 4)
				n.Fill(uint64(s), rng.Float64())
				grid := n.Model().Grids()[0]
				for _, c := range demands(grid) {
					claim, err := n.Model().Claim("c", c)
					if err != nil {
						t.Fatal(err)
					}
					devs, err := n.Allocate(ctx, claim)
					if err != nil {
						t.Fatal(err)
					}
					req := &placement.Request{Containers: []placement.ContainerRequest{c}}
					as, ferr := placement.Select(n.State(), req, placement.FirstFit{})
					switch {
					case devs == nil && ferr == nil:
						t.Fatalf("state %d %+v: DRA found nothing, first-fit placed %v", s, c, as)
					case devs != nil && ferr != nil:
						t.Fatalf("state %d %+v: DRA placed %v, first-fit: %v", s, c, devs, ferr)
					case devs == nil:
						rejected++
						if err := n.Explain(req); err == nil {
							t.Fatalf("state %d %+v: Explain returned nil", s, c)
						}
						continue
					}
					placed++
					d, a := devs[0], as[0]
					if d.GPU != a.GPU || d.Profile != a.Profile || d.Placement != a.Placement {
						t.Fatalf("state %d %+v: DRA chose %s (GPU %d %s %v), first-fit GPU %d %s %v",
							s, c, d.Name, d.GPU, d.Profile, d.Placement, a.GPU, a.Profile, a.Placement)
					}
					if !n.State()[d.GPU].Used.Fits(d.Placement) {
						t.Fatalf("DRA chose occupied slots %v on %v", d.Placement, n.State()[d.GPU].Used)
					}
				}
			}
		})
	}
}

// TestAllocatorIsFirstFitForSeveralDevices asks for two and three devices
// of one named profile: DRA (one request with a count) and dynmig's
// FirstFit must agree on feasibility and on the devices chosen. (Memory
// demands are left out: DRA gives every device of a request the same
// profile, dynmig chooses per device.)
func TestAllocatorIsFirstFitForSeveralDevices(t *testing.T) {
	ctx := context.Background()
	for _, model := range []string{"A100-SXM4-40GB", "A30"} {
		t.Run(model, func(t *testing.T) {
			placed, rejected := 0, 0
			for s := range 6 {
				n := newNode(t, model, 2)
				n.Fill(uint64(100+s), float64(s)/6)
				for _, p := range n.Model().Grids()[0].Profiles() {
					for _, count := range []int{2, 3} {
						c := placement.ContainerRequest{Devices: count, Profile: p.Name}
						claim, err := n.Model().Claim("c", c)
						if err != nil {
							t.Fatal(err)
						}
						devs, err := n.Allocate(ctx, claim)
						if err != nil {
							t.Fatal(err)
						}
						as, ferr := placement.Select(n.State(), &placement.Request{Containers: []placement.ContainerRequest{c}}, placement.FirstFit{})
						if (devs == nil) != (ferr != nil) {
							t.Fatalf("state %d %+v: DRA %v, first-fit %v, %v", s, c, devs, as, ferr)
						}
						if devs == nil {
							rejected++
							continue
						}
						placed++
						for i := range devs {
							if devs[i].GPU != as[i].GPU || devs[i].Placement != as[i].Placement {
								t.Fatalf("state %d %+v: DRA %v, first-fit %v", s, c, devs, as)
							}
						}
					}
				}
			}
			if placed == 0 || rejected == 0 {
				t.Errorf("%d placed, %d rejected: both outcomes not exercised", placed, rejected)
			}
		})
	}
}

// TestCommitRelease checks that counters come back after a release: a full
// GPU profile fits again once everything on GPU 0 is released.
func TestCommitRelease(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "A30", 1)
	whole, err := n.Model().Claim("whole", placement.ContainerRequest{Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	held := n.Fill(1, 0.75)
	if got, _ := n.Allocate(ctx, whole); got != nil {
		t.Fatalf("whole GPU allocated on a 3/4 full GPU: %v", got)
	}
	if err := n.Commit(held[:1]); err == nil {
		t.Fatalf("Commit of an allocated device succeeded")
	}
	n.Release(held)
	if got, want := n.State()[0].Used, placement.Occupancy(0); got != want {
		t.Fatalf("occupancy after release %v, want %v", got, want)
	}
	got, err := n.Allocate(ctx, whole)
	if err != nil || len(got) != 1 || got[0].Placement != (capability.Placement{Start: 0, Size: 4}) {
		t.Fatalf("whole GPU after release: %v, %v", got, err)
	}
}

func TestErrors(t *testing.T) {
	if _, err := dra.NewModel("", nil); err == nil {
		t.Error("NewModel with an empty node name succeeded")
	}
	if _, err := dra.PlainGPUs("no such GPU", 1); err == nil {
		t.Error("PlainGPUs of an unknown model succeeded")
	}
	n := newNode(t, "A30", 1)
	if _, err := n.Model().Claim("big", placement.ContainerRequest{Devices: 1, Memory: placement.MiB(1 << 30)}); err == nil {
		t.Error("Claim larger than every profile succeeded")
	}
	if _, err := n.Model().Claim("named", placement.ContainerRequest{Devices: 1, Profile: "9g.999gb"}); err == nil {
		t.Error("Claim of an unknown profile succeeded")
	}
}
