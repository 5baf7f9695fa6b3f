package nvmlhal_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// node is a realize Manager over nvmlhal over a strict mock, with the pods
// an API server would list.
type node struct {
	t    *testing.T
	b    *nvmlhal.Backend
	srv  *nvmlmock.Server
	m    *realize.Manager
	gpu0 capability.GPU
	pods []*reservation.Pod
}

func newNode(t *testing.T, model nvmlmock.Model) *node {
	b, srv := newBackend(t, model, nvmlmock.Options{})
	return &node{t: t, b: b, srv: srv, m: realize.NewManager(b, realize.Options{}), gpu0: discoverGPU0(t, b)}
}

// entry reserves the profile of index p at placement pl on GPU 0.
func (n *node) entry(container, device int, p capability.GIProfileIndex, pl capability.Placement) reservation.Allocation {
	for _, pr := range n.gpu0.Profiles {
		if pr.GIProfileIndex == p {
			return reservation.Allocation{ContainerIndex: container, DeviceIndex: device, GPUUUID: n.gpu0.UUID, Profile: pr.Name, Placement: pl}
		}
	}
	n.t.Fatalf("GPU 0 has no profile index %d", p)
	return reservation.Allocation{}
}

func (n *node) schedule(uid string, entries ...reservation.Allocation) {
	// The pod's containers request exactly the devices its record
	// reserves, so every entry passes reservation's trust rule.
	var requests []int
	for _, e := range entries {
		for len(requests) <= e.ContainerIndex {
			requests = append(requests, 0)
		}
		requests[e.ContainerIndex]++
	}
	n.pods = append(n.pods, &reservation.Pod{UID: uid, Namespace: "default", Name: "pod-" + uid, Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString(entries)}, DeviceRequests: requests})
}

func (n *node) snapshot() reservation.Snapshot {
	s := reservation.Snapshot{Complete: true}
	for _, p := range n.pods {
		s.Pods = append(s.Pods, *p)
	}
	return s
}

func (n *node) pod(uid string) *reservation.Pod {
	for _, p := range n.pods {
		if p.UID == uid {
			return p
		}
	}
	n.t.Fatalf("no pod %s", uid)
	return nil
}

func (n *node) allocate(uid string) []string {
	n.t.Helper()
	p := n.pod(uid)
	res, err := n.m.Allocate(context.Background(), realize.AllocateRequest{Pod: *p, Snapshot: n.snapshot()})
	if err != nil {
		n.t.Fatalf("Allocate(%s): %v", uid, err)
	}
	if res.Patch != nil {
		p.Annotations[reservation.AnnotationKey] = res.Annotation
	}
	var uuids []string
	for _, d := range res.Devices {
		uuids = append(uuids, d.Runtime.MIGUUID)
	}
	return uuids
}

// live lists the MIG UUIDs on GPU 0 as NVML reports them.
func (n *node) live() []string {
	var out []string
	for _, in := range mustInstances(n.t, n.b, 0) {
		for _, ci := range in.ComputeInstances {
			out = append(out, ci.MIGUUID)
		}
	}
	slices.Sort(out)
	return out
}

func sorted(s ...[]string) []string {
	out := slices.Concat(s...)
	slices.Sort(out)
	return out
}

// The realize Manager's lifecycle over the real backend: allocate,
// idempotent re-allocate, reclaim on termination, restart adoption.
func TestManagerLifecycle(t *testing.T) {
	for _, model := range nvmlmock.DGXModels {
		t.Run(model.String(), func(t *testing.T) {
			ctx := context.Background()
			n := newNode(t, model)
			n.schedule("a", n.entry(0, 0, p3g, at(4, 4)), n.entry(0, 1, p1gR2, at(0, 2)))
			n.schedule("b", n.entry(0, 0, p2g, at(2, 2)))

			a := n.allocate("a")
			b := n.allocate("b")
			if got, want := n.live(), sorted(a, b); !slices.Equal(got, want) {
				t.Fatalf("live = %v, want %v", got, want)
			}
			if again := n.allocate("a"); !slices.Equal(again, a) {
				t.Errorf("re-allocate = %v, want the same %v", again, a)
			}

			n.pod("a").Phase = reservation.PodSucceeded
			rep, err := n.m.Reconcile(ctx, n.snapshot())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Released) != 2 {
				t.Errorf("released %+v, want pod a's 2 instances", rep.Released)
			}
			if got := n.live(); !slices.Equal(got, b) {
				t.Fatalf("live after reclaim = %v, want pod b's %v", got, b)
			}

			// A device-plugin restart: the new manager adopts pod b's
			// instance from its annotation and NVML.
			n.m = realize.NewManager(n.b, realize.Options{})
			adopt, err := n.m.Adopt(ctx, n.snapshot())
			if err != nil {
				t.Fatal(err)
			}
			if len(adopt.Adopted) != 1 || adopt.Adopted[0].Runtime.MIGUUID != b[0] {
				t.Errorf("adopted %+v, want pod b's %s", adopt.Adopted, b[0])
			}
			if again := n.allocate("b"); !slices.Equal(again, b) {
				t.Errorf("allocate after adoption = %v, want %v", again, b)
			}
			n.pod("b").Phase = reservation.PodSucceeded
			if _, err := n.m.Reconcile(ctx, n.snapshot()); err != nil {
				t.Fatal(err)
			}
			if got := n.live(); len(got) != 0 {
				t.Errorf("live at the end = %v", got)
			}
		})
	}
}
