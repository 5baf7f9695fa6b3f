package realize_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture is a fake node, a manager over it, and the pods the "API
// server" knows, in creation order.
type fixture struct {
	t    testing.TB
	node *fakehal.Node
	m    *realize.Manager
	pods []*reservation.Pod
	// incomplete marks the listing as incomplete (an API failure).
	incomplete bool
	// unknownTime leaves the listing's time unknown (reservation.Snapshot.Now zero).
	unknownTime bool
	clock       *fakeClock
}

// fakeClock is a manual clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newFixture(t testing.TB, gpus int) *fixture {
	t.Helper()
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(gpus, fakehal.DefaultModel), Seed: 7})
	f := &fixture{t: t, node: node, clock: newClock()}
	f.restart()
	return f
}

func (f *fixture) gpuUUID(i int) string {
	d, ok := f.node.Device(i)
	if !ok {
		f.t.Fatalf("no GPU %d", i)
	}
	return d.UUID
}

// ent builds a scheduler-written entry.
func ent(container, device int, gpuUUID, profile string, start, size uint32) reservation.Allocation {
	return reservation.Allocation{ContainerIndex: container, DeviceIndex: device, GPUUUID: gpuUUID,
		Profile: profile, Placement: capability.Placement{Start: start, Size: size}}
}

// schedule adds a running pod whose annotation holds entries and whose
// containers request exactly the devices the entries reserve.
func (f *fixture) schedule(uid string, entries ...reservation.Allocation) *reservation.Pod {
	p := &reservation.Pod{UID: uid, Namespace: "default", Name: "pod-" + uid, Phase: reservation.PodRunning,
		Annotations:    map[string]string{reservation.AnnotationKey: reservation.EncodeString(entries)},
		DeviceRequests: requestsOf(entries)}
	f.pods = append(f.pods, p)
	return p
}

// requesting makes p's first container request one device, so that a
// record p is given afterwards, whatever its shape, is one that could own
// hardware (a pod requesting none owns nothing and withholds nothing).
func requesting(p *reservation.Pod) *reservation.Pod {
	p.DeviceRequests = []int{1}
	return p
}

// requestsOf returns the device requests under which every entry passes
// the trust rule: per container, its number of entries.
func requestsOf(entries []reservation.Allocation) []int {
	var out []int
	for _, e := range entries {
		if e.ContainerIndex < 0 || e.ContainerIndex > 1000 {
			continue
		}
		for len(out) <= e.ContainerIndex {
			out = append(out, 0)
		}
		out[e.ContainerIndex]++
	}
	return out
}

func (f *fixture) pod(uid string) *reservation.Pod {
	for _, p := range f.pods {
		if p.UID == uid {
			return p
		}
	}
	f.t.Fatalf("no pod %s", uid)
	return nil
}

// snapshot is a complete listing of every pod.
func (f *fixture) snapshot() reservation.Snapshot {
	s := reservation.Snapshot{Complete: !f.incomplete}
	if !f.unknownTime {
		s.Now = f.clock.Now()
	}
	for _, p := range f.pods {
		s.Pods = append(s.Pods, *p)
	}
	return s
}

// allocate runs Allocate for a container and, like a device plugin,
// writes the patched annotation back to the pod on success.
func (f *fixture) allocate(ctx context.Context, uid string, container int) (realize.AllocateResult, error) {
	p := f.pod(uid)
	res, err := f.m.Allocate(ctx, realize.AllocateRequest{Pod: *p, ContainerIndex: container, Snapshot: f.snapshot()})
	if err == nil && res.Patch != nil {
		p.Annotations[reservation.AnnotationKey] = res.Annotation
	}
	return res, err
}

func (f *fixture) mustAllocate(uid string, container int) realize.AllocateResult {
	f.t.Helper()
	res, err := f.allocate(context.Background(), uid, container)
	if err != nil {
		f.t.Fatalf("Allocate(%s, container %d): %v", uid, container, err)
	}
	return res
}

func (f *fixture) terminate(uid string) { f.pod(uid).Phase = reservation.PodSucceeded }

// restart replaces the manager, as a device-plugin restart does: the
// hardware keeps its state, the manager's memory is lost.
func (f *fixture) restart() {
	f.m = realize.NewManager(f.node, realize.Options{Now: f.clock.Now})
}

// live returns the MIG UUIDs of every live compute instance.
func (f *fixture) live() []string {
	var out []string
	for _, in := range f.node.Snapshot() {
		for _, ci := range in.ComputeInstances {
			out = append(out, ci.MIGUUID)
		}
	}
	slices.Sort(out)
	return out
}

func migUUIDs(res realize.AllocateResult) []string {
	var out []string
	for _, d := range res.Devices {
		out = append(out, d.Runtime.MIGUUID)
	}
	return out
}

func (f *fixture) checkHardware() {
	f.t.Helper()
	if err := f.node.Check(); err != nil {
		f.t.Fatalf("hardware invariants: %v", err)
	}
}

// destroyCI destroys the compute instance rt names on GPU 0 behind the
// manager's back, as an operator or a failed release would.
func (f *fixture) destroyCI(rt reservation.RuntimeIdentity) {
	f.t.Helper()
	if err := f.node.DestroyComputeInstance(context.Background(), 0, rt.GPUInstanceID, rt.ComputeInstanceID); err != nil {
		f.t.Fatal(err)
	}
}

// destroyInstance destroys rt's compute and GPU instance on GPU 0 behind
// the manager's back, as a GPU reset would.
func (f *fixture) destroyInstance(rt reservation.RuntimeIdentity) {
	f.t.Helper()
	f.destroyCI(rt)
	if err := f.node.DestroyGPUInstance(context.Background(), 0, rt.GPUInstanceID); err != nil {
		f.t.Fatal(err)
	}
}
