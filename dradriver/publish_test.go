package dradriver_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/placement"
)

// TestAllocatorChoosesAsDefaultPolicy: with the driver republishing after
// every prepare, the real structured allocator, taking the first free
// device of the requested profile, places every claim where dynmig's
// default policy (placement.Select with placement.DefaultPolicy) would on
// the same occupancy, across two GPUs.
func TestAllocatorChoosesAsDefaultPolicy(t *testing.T) {
	for seed := range uint64(4) {
		e := newEnv(t, "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB")
		d := e.driver(t)
		gpus, _, err := capability.Discover(context.Background(), e.hw, capability.DefaultAllowlist())
		if err != nil {
			t.Fatal(err)
		}
		states := make([]placement.GPUState, len(gpus))
		for i := range gpus {
			g, err := placement.NewGrid(&gpus[i])
			if err != nil {
				t.Fatal(err)
			}
			states[i].Grid = g
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		var allocated []*resourceapi.ResourceClaim
		for step := 0; step < 40; step++ {
			ps := states[0].Grid.Profiles()
			profile := ps[rng.IntN(len(ps)-1)].Name // never the whole GPU
			want, werr := placement.Select(states, &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: profile}}}, placement.DefaultPolicy)
			c := allocate(t, d.Catalog(), profileClaim("uid-"+string(rune('a'+step)), profile, 1), allocated...)
			if (c == nil) != (werr != nil) {
				t.Fatalf("seed %d step %d %s: allocator found %v, policy %v (%v)", seed, step, profile, c != nil, want, werr)
			}
			if c == nil {
				continue
			}
			p, err := dradriver.ParseDeviceName(c.Status.Allocation.Devices.Results[0].Device)
			if err != nil {
				t.Fatal(err)
			}
			if w := want[0]; p.GPUUUID != w.GPUUUID || p.Placement != w.Placement {
				t.Fatalf("seed %d step %d %s: allocator chose %s %v, default policy %s %v", seed, step, profile, p.GPUUUID, p.Placement, w.GPUUUID, w.Placement)
			}
			states[want[0].GPU].Used = states[want[0].GPU].Used.Take(p.Placement)
			allocated = append(allocated, c)
			e.claims.set(true, allocated...)
			if r := prepareOne(t, d, c); r.Err != nil {
				t.Fatalf("prepare: %v", r.Err)
			}
		}
		if len(allocated) < 4 {
			t.Errorf("seed %d: only %d claims placed", seed, len(allocated))
		}
	}
}

// TestEngineCounters: on an A30 whose allowlist has the "+me" profiles,
// the one optical-flow set is a counter, so the allocator never puts two
// "+me" instances on the GPU, as the hardware would refuse the second.
func TestEngineCounters(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	e.allow = capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"}}}
	d := e.driver(t)
	cat := d.Catalog()
	var sets []resourceapi.CounterSet
	for _, s := range cat.ResourceSlices() {
		sets = append(sets, s.Spec.SharedCounters...)
	}
	if len(sets) != 1 {
		t.Fatalf("counter sets = %d, want 1", len(sets))
	}
	if q := sets[0].Counters[dradriver.OFACounter].Value; q.Value() != 1 {
		t.Errorf("ofa counter = %v, want 1", q.String())
	}
	a := allocate(t, cat, profileClaim("uid-a", "1g.6gb+me", 1))
	if a == nil {
		t.Fatal("1g.6gb+me not allocated on an empty A30")
	}
	if b := allocate(t, cat, profileClaim("uid-b", "2g.12gb+me", 1), a); b != nil {
		t.Errorf("allocator placed a second +me instance: %v", b.Status.Allocation.Devices.Results)
	}
	if b := allocate(t, cat, profileClaim("uid-b", "2g.12gb", 1), a); b == nil {
		t.Error("a plain 2g.12gb next to the 1g.6gb+me was refused")
	}
	e.claims.set(true, a)
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Errorf("prepare 1g.6gb+me: %v", r.Err)
	}
}

// TestSetAllowlist: narrowing the allowlist republishes without the
// dropped profile, except the device a claim is allocated, which stays
// published, retained and tainted, so that its slots stay counted; the
// claim, not prepared before, is withheld, not realized.
func TestSetAllowlist(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	c := allocate(t, d.Catalog(), profileClaim("uid-a", "2g.12gb", 1))
	e.claims.set(true, c)
	if err := d.SetAllowlist(context.Background(), capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb", "4g.24gb"}}}); err != nil {
		t.Fatal(err)
	}
	for _, dev := range d.Catalog().Devices() {
		if dev.Partition.Profile == "2g.12gb" && (!dev.Retained || dev.Name != c.Status.Allocation.Devices.Results[0].Device) {
			t.Fatalf("dropped profile still published: %s", dev.Name)
		}
	}
	if r := prepareOne(t, d, c); !errors.Is(r.Err, dradriver.ErrNotPublished) {
		t.Errorf("claim on a dropped profile: %v, want ErrNotPublished", r.Err)
	}
	if got := liveInstances(e.hw); len(got) != 0 {
		t.Errorf("live %v, want none", got)
	}
}

// TestNarrowedAllowlistKeepsCounting: a prepared device whose profile
// leaves the allowlist stays published (retained, tainted NoSchedule)
// until it is unprepared and deallocated, so the allocator never hands
// out its slots again; the prepared claim is handed its device again.
func TestNarrowedAllowlistKeepsCounting(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	c := allocate(t, d.Catalog(), profileClaim("uid-a", "2g.12gb", 1))
	e.claims.set(true, c)
	if r := prepareOne(t, d, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := d.SetAllowlist(context.Background(), capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb"}}}); err != nil {
		t.Fatal(err)
	}
	name := c.Status.Allocation.Devices.Results[0].Device
	var retained []string
	for _, dev := range d.Catalog().Devices() {
		if dev.Retained {
			retained = append(retained, dev.Name)
		}
	}
	if len(retained) != 1 || retained[0] != name {
		t.Fatalf("retained devices %v, want the prepared %s", retained, name)
	}
	tainted := false
	for _, s := range d.Catalog().ResourceSlices() {
		for _, dev := range s.Spec.Devices {
			if dev.Name == name {
				tainted = len(dev.Taints) == 1 && dev.Taints[0].Key == dradriver.RetainedTaintKey && dev.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule
			}
		}
	}
	if !tainted {
		t.Errorf("retained device %s is not tainted NoSchedule", name)
	}
	// Two 1g.6gb fit beside the 2g.12gb, never a third.
	allocated := []*resourceapi.ResourceClaim{c}
	for i := range 3 {
		n := allocate(t, d.Catalog(), profileClaim("uid-n"+strconv.Itoa(i), "1g.6gb", 1), allocated...)
		if (n != nil) != (i < 2) {
			t.Fatalf("1g.6gb #%d beside the retained 2g.12gb: allocated %t", i+1, n != nil)
		}
		if n != nil {
			allocated = append(allocated, n)
		}
	}
	if r := prepareOne(t, d, c); r.Err != nil {
		t.Errorf("prepare again after narrowing: %v", r.Err)
	}
	if err := unprepareOne(t, d, c); err != nil {
		t.Fatal(err)
	}
	e.claims.set(true)
	if err := d.Rediscover(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, dev := range d.Catalog().Devices() {
		if dev.Partition.Profile != "1g.6gb" {
			t.Errorf("%s still published after its claim was released", dev.Name)
		}
	}
}

// TestCountersFromTheGPU: the counter sets are sized from the GPU's full
// profile table, whatever the allowlist publishes: a narrowed allowlist
// fits as many devices as the hardware does.
func TestCountersFromTheGPU(t *testing.T) {
	for _, tc := range []struct {
		model    string
		profiles []string
		want     int
	}{
		{"NVIDIA A30", []string{"1g.6gb"}, 4},
		{"NVIDIA A100-SXM4-40GB", []string{"1g.5gb"}, 7},
		{"NVIDIA H100 80GB HBM3", []string{"1g.10gb", "2g.20gb"}, 7},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", []string{"1g.24gb"}, 4},
	} {
		t.Run(tc.model, func(t *testing.T) {
			e := newEnv(t, tc.model)
			e.allow = capability.Allowlist{{Models: []string{tc.model}, Profiles: tc.profiles}}
			d := e.driver(t)
			var allocated []*resourceapi.ResourceClaim
			for i := range tc.want + 1 {
				c := allocate(t, d.Catalog(), profileClaim("uid-"+strconv.Itoa(i), tc.profiles[0], 1), allocated...)
				if c == nil {
					break
				}
				allocated = append(allocated, c)
			}
			if len(allocated) != tc.want {
				t.Errorf("%s fit %d times, want %d", tc.profiles[0], len(allocated), tc.want)
			}
			e.claims.set(true, allocated...)
			for _, c := range allocated {
				if r := prepareOne(t, d, c); r.Err != nil {
					t.Fatalf("prepare %s: %v", c.UID, r.Err)
				}
			}
		})
	}
}

// TestCatalogLimits: every device slice holds one profile and at most the
// API's device limit, and counter slices come first.
func TestCatalogLimits(t *testing.T) {
	e := newEnv(t, "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB",
		"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB")
	d := e.driver(t)
	slices := d.Catalog().ResourceSlices()
	counters, devices := 0, 0
	for i, s := range slices {
		if len(s.Spec.SharedCounters) > 0 {
			if devices > 0 || len(s.Spec.Devices) > 0 {
				t.Errorf("slice %d: counters after devices, or mixed", i)
			}
			if len(s.Spec.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
				t.Errorf("slice %d: %d counter sets", i, len(s.Spec.SharedCounters))
			}
			counters += len(s.Spec.SharedCounters)
			continue
		}
		if n := len(s.Spec.Devices); n == 0 || n > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %d: %d devices", i, n)
		}
		profile := s.Spec.Devices[0].Attributes[dradriver.AttrProfile].StringValue
		for _, dev := range s.Spec.Devices {
			if *dev.Attributes[dradriver.AttrProfile].StringValue != *profile {
				t.Errorf("slice %d mixes profiles %s and %s", i, *profile, *dev.Attributes[dradriver.AttrProfile].StringValue)
			}
		}
		devices += len(s.Spec.Devices)
	}
	if counters != 9 || devices != len(d.Catalog().Devices()) {
		t.Errorf("counter sets %d, devices %d; want 9, %d", counters, devices, len(d.Catalog().Devices()))
	}
}
