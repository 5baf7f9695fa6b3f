package dra_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dynmig/dynmig/bench/dra"
	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// TestRefreshedOrderIsTheDefaultPolicy checks, on random occupancies, that
// the allocator on the refreshed order (placement.PublishOrder, merged by
// cost, republished after every change) chooses exactly the device the
// default policy chooses, for every profile by name and every profile's
// memory.
func TestRefreshedOrderIsTheDefaultPolicy(t *testing.T) {
	refreshed := dra.Orders()[len(dra.Orders())-1]
	if refreshed.Name != "refreshed" {
		t.Fatalf("last order: got %s, want refreshed", refreshed)
	}
	ctx := context.Background()
	for _, model := range []string{"A100-SXM4-40GB", "A30"} {
		t.Run(model, func(t *testing.T) {
			gpus, err := dra.PlainGPUs(model, 4)
			if err != nil {
				t.Fatal(err)
			}
			m, err := dra.NewModel("node-a", gpus)
			if err != nil {
				t.Fatal(err)
			}
			seeds := 6
			if testing.Short() {
				seeds = 2
			}
			for seed := range uint64(seeds) {
				n := dra.NewNode(m, dra.NodeOptions{Order: refreshed})
				n.Fill(seed, 0.6)
				var reqs []placement.ContainerRequest
				for _, p := range m.Grids()[0].Profiles() {
					reqs = append(reqs, placement.ContainerRequest{Devices: 1, Profile: p.Name},
						placement.ContainerRequest{Devices: 1, Memory: placement.MiB(p.MemoryMB)})
				}
				for _, c := range reqs {
					claim, err := m.Claim("c", c)
					if err != nil {
						t.Fatal(err)
					}
					devs, err := n.Allocate(ctx, claim)
					if err != nil {
						t.Fatal(err)
					}
					as, selErr := placement.Select(n.State(), &placement.Request{Containers: []placement.ContainerRequest{c}}, placement.DefaultPolicy)
					switch {
					case selErr != nil && devs != nil:
						t.Errorf("seed %d, %+v: DRA chose %v, default policy: %v", seed, c, devs, selErr)
					case selErr == nil && devs == nil:
						t.Errorf("seed %d, %+v: DRA found nothing, default policy chose %v", seed, c, as)
					case selErr == nil && (devs[0].GPU != as[0].GPU || devs[0].Profile != as[0].Profile || devs[0].Placement != as[0].Placement):
						t.Errorf("seed %d, %+v: DRA chose %v, default policy %v", seed, c, devs[0], as[0])
					}
				}
			}
		})
	}
}

// TestOrdersMatchSimulator replays short traces with the allocator on every
// order of dra.Orders in every layout, and checks the counts equal the
// simulated allocator's (dra.SimRun), which the long comparison
// (cmd/publishorder) relies on.
func TestOrdersMatchSimulator(t *testing.T) {
	traces := []dra.Trace{}
	for _, tr := range dra.QualityTraces(1) {
		if tr.Mix == "skewed" && tr.Opts.Memory && (tr.Model == "A100-SXM4-40GB" || tr.Model == "A30") {
			tr.Opts.Arrivals = 150
			if testing.Short() {
				tr.Opts.Arrivals = 60
			}
			traces = append(traces, tr)
		}
	}
	ctx := context.Background()
	for _, tr := range traces {
		gpus, evs, err := tr.Events()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range dra.Orders() {
			for _, l := range dra.Layouts() {
				opts := dra.NodeOptions{Order: o, Layout: l, ShuffleSeed: 7}
				if o.Refresh && l == dra.ByProfile {
					opts.RefreshEvery = 3
				}
				want, _, err := dra.SimRun(gpus, evs, opts)
				if err != nil {
					t.Fatalf("%v, %s, %s: %v", tr, o, l, err)
				}
				got, err := dra.Run(ctx, gpus, evs, opts)
				if err != nil {
					t.Fatalf("%v, %s, %s: %v", tr, o, l, err)
				}
				if got.Accepted != want.Accepted || got.Capacity != want.Capacity || got.Fragmented != want.Fragmented || got.Utilisation != want.Utilisation {
					t.Errorf("%v, %s, %s: DRA %+v, simulator %+v", tr, o, l, got, want)
				}
			}
		}
	}
}

func TestNVIDIAOrder(t *testing.T) {
	for _, model := range dra.QualityModels {
		gpus, err := dra.PlainGPUs(model, 1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dra.NVIDIAOrder(&gpus[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := dra.Orders()[0].GPU(&gpus[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: NVIDIA order %v, want the current order %v (every start is one digit)", model, got, want)
		}
	}
	// Twelve one-slot placements: the names sort "10" and "11" before "2".
	var pls []capability.Placement
	for s := range uint32(12) {
		pls = append(pls, capability.Placement{Start: s, Size: 1})
	}
	g := capability.GPU{UUID: "GPU-x", Profiles: []capability.Profile{{Name: "1g.1gb", MemoryMB: 1, SliceCount: 1, Placements: pls}}}
	got, err := dra.NVIDIAOrder(&g, 0)
	if err != nil {
		t.Fatal(err)
	}
	var starts []uint32
	for _, p := range got {
		starts = append(starts, p.Placement.Start)
	}
	if want := []uint32{0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(starts, want) {
		t.Errorf("starts: got %v, want %v", starts, want)
	}
}

// TestLayoutsRespectAPILimits checks every order's slices in every layout,
// republished on a random occupancy: at most 64 devices per slice, every
// device once, one generation and the right slice count, one GPU per slice
// for PerGPU and each profile in one slice for ByProfile.
func TestLayoutsRespectAPILimits(t *testing.T) {
	for _, model := range dra.QualityModels {
		gpus, err := dra.PlainGPUs(model, 8)
		if err != nil {
			t.Fatal(err)
		}
		m, err := dra.NewModel("node-a", gpus)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range dra.Orders() {
			for _, l := range dra.Layouts() {
				n := dra.NewNode(m, dra.NodeOptions{Order: o, Layout: l})
				if _, err := n.Published(); err != nil {
					t.Fatal(err)
				}
				n.Fill(3, 0.5)
				sl, err := n.Published()
				if err != nil {
					t.Fatal(err)
				}
				seen := map[string]bool{}
				sliceOf := map[string]string{} // profile or GPU -> slice
				for _, s := range sl {
					if got, want := s.Spec.Pool.ResourceSliceCount, int64(len(sl)); got != want {
						t.Errorf("%s, %s, %s: slice count %d, want %d", model, o, l, got, want)
					}
					if s.Spec.Pool.Generation != sl[0].Spec.Pool.Generation {
						t.Errorf("%s, %s, %s: generations %d and %d", model, o, l, s.Spec.Pool.Generation, sl[0].Spec.Pool.Generation)
					}
					if len(s.Spec.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
						t.Errorf("%s, %s, %s: slice %s has %d devices", model, o, l, s.Name, len(s.Spec.Devices))
					}
					for _, d := range s.Spec.Devices {
						if seen[d.Name] {
							t.Errorf("%s, %s, %s: device %s twice", model, o, l, d.Name)
						}
						seen[d.Name] = true
						dev, _ := m.DeviceNamed(d.Name)
						var group string
						switch l {
						case dra.PerGPU:
							group = strconv.Itoa(dev.GPU)
						case dra.ByProfile:
							group = dev.Profile
						default:
							continue
						}
						if prev, ok := sliceOf[group]; ok && prev != s.Name {
							t.Errorf("%s, %s, %s: %s in slices %s and %s", model, o, l, group, prev, s.Name)
						}
						sliceOf[group] = s.Name
					}
				}
				if len(seen) != len(m.Devices()) {
					t.Errorf("%s, %s, %s: %d devices published, want %d", model, o, l, len(seen), len(m.Devices()))
				}
			}
		}
	}
}

// TestRefreshedByProfileIsPublishNode checks that the refreshed order in
// the ByProfile layout publishes exactly placement.PublishNode's list, the
// function a driver calls.
func TestRefreshedByProfileIsPublishNode(t *testing.T) {
	refreshed := dra.Orders()[len(dra.Orders())-1]
	for _, model := range dra.QualityModels {
		gpus, err := dra.PlainGPUs(model, 8)
		if err != nil {
			t.Fatal(err)
		}
		m, err := dra.NewModel("node-a", gpus)
		if err != nil {
			t.Fatal(err)
		}
		for seed := range uint64(3) {
			n := dra.NewNode(m, dra.NodeOptions{Order: refreshed, Layout: dra.ByProfile})
			n.Fill(seed, 0.5)
			sl, err := n.Published()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range sl {
				for _, d := range s.Spec.Devices {
					got = append(got, d.Name)
				}
			}
			var want []string
			for _, np := range placement.PublishNode(n.State()) {
				d, ok := m.Lookup(np.GPU, np.Profile, np.Placement)
				if !ok {
					t.Fatalf("PublishNode lists %+v, not a device", np)
				}
				want = append(want, d.Name)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, fill seed %d: published\n%v\nPublishNode\n%v", model, seed, got, want)
			}
		}
	}
}
