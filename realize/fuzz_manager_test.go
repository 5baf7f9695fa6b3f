package realize_test

import (
	"context"
	"testing"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// fuzzInputWorld is the node a FuzzManagerInput run starts from: two A100
// GPUs, a manager, and a victim pod whose two reservations are realized
// and patched into its annotation.
type fuzzInputWorld struct {
	node   *fakehal.Node
	m      *realize.Manager
	victim *reservation.Pod
	// owned are the victim's realized identities.
	owned []reservation.RuntimeIdentity
	now   time.Time
}

func newFuzzInputWorld(tb testing.TB) *fuzzInputWorld {
	tb.Helper()
	w := &fuzzInputWorld{node: fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel), Seed: 3}),
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w.m = realize.NewManager(w.node, realize.Options{Now: func() time.Time { return w.now }})
	g0, g1 := w.gpu(0), w.gpu(1)
	entries := []reservation.Allocation{
		{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: g0, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}},
		{ContainerIndex: 0, DeviceIndex: 1, GPUUUID: g1, Profile: "3g.20gb", Placement: capability.Placement{Start: 0, Size: 4}},
	}
	w.victim = &reservation.Pod{UID: "victim", Namespace: "ns", Name: "victim", Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString(entries)}, DeviceRequests: []int{2}}
	res, err := w.m.Allocate(context.Background(), realize.AllocateRequest{Pod: *w.victim,
		Snapshot: reservation.Snapshot{Pods: []reservation.Pod{*w.victim}, Complete: true}})
	if err != nil {
		tb.Fatalf("victim Allocate: %v", err)
	}
	w.victim.Annotations = map[string]string{reservation.AnnotationKey: res.Annotation}
	for _, d := range res.Devices {
		w.owned = append(w.owned, d.Runtime)
	}
	return w
}

func (w *fuzzInputWorld) gpu(i int) string {
	d, _ := w.node.Device(i)
	return d.UUID
}

// FuzzManagerInput feeds arbitrary bytes as a pod's
// hami.io/vgpu-mig-allocations annotation through the manager's input path
// (Desired, Allocate of several containers, Reconcile, a restart with
// Adopt, CollectLeaks), on complete and incomplete listings, next to a
// victim pod whose instances are realized. ops selects the listing
// (complete, incomplete, partial without the victim), the pod's phase,
// whether its containers request what its record reserves (0x10 clear),
// whether the plugin restarts and whether the pod is gone at the end. Whatever the bytes, the
// manager must not panic, must keep the hardware legal, must never destroy
// or hand out the victim's instances, and must create instances only at
// placements that a validated reservation of the pod names.
func FuzzManagerInput(f *testing.F) {
	w := newFuzzInputWorld(f)
	victimValue := w.victim.Annotations[reservation.AnnotationKey]
	g0, g1 := w.gpu(0), w.gpu(1)
	valid := reservation.EncodeString([]reservation.Allocation{
		{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: g0, Profile: "2g.10gb", Placement: capability.Placement{Start: 0, Size: 2}},
		{ContainerIndex: 1, DeviceIndex: 0, GPUUUID: g1, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}},
	})
	stolen := reservation.EncodeString([]reservation.Allocation{
		{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: g0, Profile: "1g.5gb", Placement: capability.Placement{Start: 5, Size: 1},
			MIGUUID: w.owned[0].MIGUUID, GPUInstanceID: reservation.SomeID(w.owned[0].GPUInstanceID), ComputeInstanceID: reservation.SomeID(0)},
	})
	for _, seed := range []string{
		"", "[]", valid, victimValue, stolen,
		victimValue[:len(victimValue)/2],
		`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + g0 + `","profile":"1g.5gb","placement":{"start":6,"size":1}}]`,
		`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + g0 + `","profile":"7g.40gb","placement":{"start":0,"size":8}}]`,
		`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + g0 + `","profile":"1g.5gb","placement":{"start":6,"size":1},"migUUID":"` + w.owned[0].MIGUUID + `"}]`,
		`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + g1 + `","profile":"4g.20gb","placement":{"start":4,"size":4},"gpuInstanceID":0,"computeInstanceID":0}]`,
		`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d","gpuInstanceID":4,"computeInstanceID":0}]`,
		`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + g0 + `[0-1]","profile":"1g.5gb","placement":{"start":0,"size":1}}]`,
		`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + g0 + `","profile":"1g.5gb","placement":{"start":4294967295,"size":2}}]`,
	} {
		for _, ops := range []uint8{0, 1, 2, 7, 0x43, 0xff} {
			f.Add([]byte(seed), ops)
		}
	}
	f.Fuzz(func(t *testing.T, value []byte, ops uint8) {
		w := newFuzzInputWorld(t)
		ctx := context.Background()
		pod := &reservation.Pod{UID: "fuzz", Namespace: "ns", Name: "fuzz", Phase: reservation.PodRunning,
			Annotations: map[string]string{reservation.AnnotationKey: string(value)}}
		if ops&0x10 == 0 {
			// The containers request what the record reserves; otherwise
			// the pod requests no device and every entry is untrusted.
			decoded, _ := reservation.DecodeString(string(value))
			pod.DeviceRequests = requestsOf(decoded)
		}
		if ops&4 != 0 {
			pod.Phase = reservation.PodPending
		}
		snap := reservation.Snapshot{Pods: []reservation.Pod{*w.victim, *pod}, Complete: ops&1 == 0}
		if !snap.Complete && ops&0x40 != 0 {
			snap.Pods = snap.Pods[1:] // a partial listing, without the victim
		}
		_ = reservation.Desired(snap)

		// The places an instance may be created: the victim's, and the
		// fuzzed pod's own entries when its record validates and its
		// containers request them.
		allowed := map[[2]any]bool{}
		for _, in := range w.node.Snapshot() {
			allowed[[2]any{in.GPU, in.Placement}] = true
		}
		if entries, err := reservation.DecodeString(string(value)); err == nil && reservation.Validate(entries) == nil &&
			reservation.ValidateRequests(entries, pod.DeviceRequests) == nil {
			for _, e := range entries {
				for i := range 2 {
					if w.gpu(i) == e.GPUUUID {
						allowed[[2]any{i, e.Placement}] = true
					}
				}
			}
		}
		check := func(step string) {
			t.Helper()
			if err := w.node.Check(); err != nil {
				t.Fatalf("%s: hardware invariants: %v", step, err)
			}
			live := map[string]bool{}
			for _, in := range w.node.Snapshot() {
				if !allowed[[2]any{in.GPU, in.Placement}] {
					t.Fatalf("%s: GPU %d GI %d at %v, which no validated reservation names", step, in.GPU, in.GIID, in.Placement)
				}
				for _, ci := range in.ComputeInstances {
					live[ci.MIGUUID] = true
				}
			}
			for _, id := range w.owned {
				if !live[id.MIGUUID] {
					t.Fatalf("%s: the victim's instance %s was destroyed", step, id.MIGUUID)
				}
			}
		}
		allocate := func(step string, container int) {
			t.Helper()
			res, err := w.m.Allocate(ctx, realize.AllocateRequest{Pod: *pod, ContainerIndex: container, Snapshot: snap})
			if err == nil {
				for _, d := range res.Devices {
					for _, id := range w.owned {
						if d.Runtime.MIGUUID == id.MIGUUID {
							t.Fatalf("%s: the fuzzed pod received the victim's device %s", step, id.MIGUUID)
						}
					}
				}
				if res.Patch != nil {
					if _, err := reservation.DecodeString(res.Annotation); err != nil {
						t.Fatalf("%s: patched annotation %q does not decode: %v", step, res.Annotation, err)
					}
				}
			}
			check(step)
		}

		allocate("Allocate container 0", 0)
		allocate("Allocate container 1", 1)
		allocate("repeated Allocate container 0", 0)
		if _, err := w.m.Reconcile(ctx, snap); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		check("Reconcile")
		if ops&2 != 0 {
			w.m = realize.NewManager(w.node, realize.Options{Now: func() time.Time { return w.now }})
			if _, err := w.m.Adopt(ctx, snap); err != nil {
				t.Fatalf("Adopt: %v", err)
			}
			check("Adopt")
			allocate("Allocate after restart", int(ops>>4&3)%3)
		}
		if _, err := w.m.CollectLeaks(ctx, snap); err != nil {
			t.Fatalf("CollectLeaks: %v", err)
		}
		check("CollectLeaks")

		// The fuzzed pod ends; the listing is complete; time passes.
		pod.Deleting = true
		pod.DeletionDeadline = w.now.Add(30 * time.Second)
		w.now = w.now.Add(time.Hour)
		end := reservation.Snapshot{Pods: []reservation.Pod{*w.victim, *pod}, Complete: true, Now: w.now}
		if ops&8 != 0 {
			end.Pods = end.Pods[:1] // gone from the API
		}
		if _, err := w.m.Reconcile(ctx, end); err != nil {
			t.Fatalf("final Reconcile: %v", err)
		}
		if _, err := w.m.CollectLeaks(ctx, end); err != nil {
			t.Fatalf("final CollectLeaks: %v", err)
		}
		check("final passes")
		if got := len(w.node.Snapshot()); got != len(w.owned) {
			t.Fatalf("after the fuzzed pod ended, %d instances are live (%v), want the victim's %d", got, w.node.Snapshot(), len(w.owned))
		}
	})
}
