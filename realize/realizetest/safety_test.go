package realizetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
	"github.com/dynmig/dynmig/reservation"
)

// loop is a small device-plugin loop over realize.Manager and a fake
// node, the way an embedder would drive its own.
type loop struct {
	node   *fakehal.Node
	m      *realize.Manager
	safety *realizetest.Safety
	pods   []*reservation.Pod
	procs  []uint32
	n      int
}

func newLoop() *loop {
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel), Seed: 3})
	return &loop{node: node, m: realize.NewManager(node, realize.Options{}), safety: realizetest.NewSafety()}
}

func (l *loop) snapshot() reservation.Snapshot {
	s := reservation.Snapshot{Complete: true}
	for _, p := range l.pods {
		s.Pods = append(s.Pods, *p)
	}
	return s
}

// schedule adds a running pod with one device at a free placement, as a
// scheduler would (free of every listed pod's entries).
func (l *loop) schedule(t *rapid.T) {
	gpu := rapid.IntRange(0, 1).Draw(t, "gpu")
	dev, _ := l.node.Device(gpu)
	profs, _ := l.node.GIProfiles(context.Background(), gpu)
	p := rapid.SampledFrom(profs).Draw(t, "profile")
	at := rapid.SampledFrom(p.Placements).Draw(t, "placement")
	for _, q := range l.pods {
		as, _ := reservation.DecodeString(q.Annotations[reservation.AnnotationKey])
		for _, a := range as {
			if a.GPUUUID == dev.UUID && a.Placement.Overlaps(at) {
				t.Skip("placement taken")
			}
		}
	}
	l.n++
	uid := fmt.Sprintf("pod-%d", l.n)
	a := reservation.Allocation{GPUUUID: dev.UUID, Profile: p.Name, Placement: at}
	l.pods = append(l.pods, &reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning,
		DeviceRequests: []int{1}, Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{a})}})
}

func (l *loop) allocate(t *rapid.T, p *reservation.Pod) {
	res, err := l.m.Allocate(context.Background(), realize.AllocateRequest{Pod: *p, Snapshot: l.snapshot()})
	if err != nil {
		return // refused: nothing granted
	}
	if err := l.safety.Grant(*p, res.Devices); err != nil {
		t.Fatal(err)
	}
	if res.Patch != nil {
		p.Annotations[reservation.AnnotationKey] = res.Annotation
	}
}

func (l *loop) pick(t *rapid.T) *reservation.Pod {
	if len(l.pods) == 0 {
		t.Skip("no pod")
	}
	return rapid.SampledFrom(l.pods).Draw(t, "pod")
}

// forge adds a pod that copies another pod's record and requests as much.
func (l *loop) forge(t *rapid.T) {
	v := l.pick(t)
	l.n++
	uid := fmt.Sprintf("forger-%d", l.n)
	f := &reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning, DeviceRequests: []int{1},
		Annotations: map[string]string{reservation.AnnotationKey: v.Annotations[reservation.AnnotationKey]}}
	l.pods = append(l.pods, f)
	l.allocate(t, f)
}

func (l *loop) end(t *rapid.T) {
	p := l.pick(t)
	p.Phase = reservation.PodSucceeded
	l.safety.Release(p.UID)
}

func (l *loop) process(t *rapid.T) {
	for _, in := range l.node.Snapshot() {
		for _, ci := range in.ComputeInstances {
			if pid, err := l.node.StartProcess(in.GPU, ci.MIGUUID); err == nil && rapid.Bool().Draw(t, "start here") {
				l.procs = append(l.procs, pid)
				return
			} else if err == nil {
				_ = l.node.StopProcess(pid)
			}
		}
	}
}

func (l *loop) stop(t *rapid.T) {
	if len(l.procs) == 0 {
		t.Skip("no process")
	}
	k := rapid.IntRange(0, len(l.procs)-1).Draw(t, "process")
	if err := l.node.StopProcess(l.procs[k]); err != nil {
		t.Fatal(err)
	}
	l.procs = append(l.procs[:k], l.procs[k+1:]...)
}

func (l *loop) observe(t *rapid.T) {
	if err := l.safety.Observe(context.Background(), l.node); err != nil {
		t.Fatal(err)
	}
}

// The manager keeps the safety invariants on a plugin loop with forgers,
// endings, processes and reconciliation.
func TestSafetyOnManager(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := newLoop()
		t.Repeat(map[string]func(*rapid.T){
			"schedule": l.schedule,
			"allocate": func(t *rapid.T) { l.allocate(t, l.pick(t)) },
			"forge":    l.forge,
			"end":      l.end,
			"process":  l.process,
			"stop":     l.stop,
			"reconcile": func(t *rapid.T) {
				_, _ = l.m.Reconcile(context.Background(), l.snapshot())
			},
			"": l.observe,
		})
	})
}

// The model catches each broken invariant.
func TestSafetyCatches(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*loop, *reservation.Pod, realize.Device) {
		l := newLoop()
		dev, _ := l.node.Device(0)
		a := reservation.Allocation{GPUUUID: dev.UUID, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}
		p := &reservation.Pod{UID: "a", Phase: reservation.PodRunning, DeviceRequests: []int{1},
			Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{a})}}
		l.pods = append(l.pods, p)
		res, err := l.m.Allocate(ctx, realize.AllocateRequest{Pod: *p, Snapshot: l.snapshot()})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.safety.Grant(*p, res.Devices); err != nil {
			t.Fatal(err)
		}
		p.Annotations[reservation.AnnotationKey] = res.Annotation
		if err := l.safety.Observe(ctx, l.node); err != nil {
			t.Fatal(err)
		}
		return l, p, res.Devices[0]
	}
	t.Run("second owner", func(t *testing.T) {
		l, p, d := setup(t)
		forger := *p
		forger.UID = "b"
		if err := l.safety.Grant(forger, []realize.Device{d}); !errors.Is(err, realizetest.ErrUnsafe) {
			t.Fatalf("Grant to a second owner = %v, want ErrUnsafe", err)
		}
	})
	t.Run("second owner after release", func(t *testing.T) {
		l, p, d := setup(t)
		l.safety.Release(p.UID)
		next := *p
		next.UID = "b"
		if err := l.safety.Grant(next, []realize.Device{d}); !errors.Is(err, realizetest.ErrUnsafe) {
			t.Fatalf("Grant of a released pod's device to another pod = %v, want ErrUnsafe", err)
		}
	})
	t.Run("untrusted record", func(t *testing.T) {
		l, p, d := setup(t)
		l.safety.Release(p.UID)
		p.DeviceRequests = nil
		if err := l.safety.Grant(*p, []realize.Device{d}); !errors.Is(err, realizetest.ErrUnsafe) {
			t.Fatalf("Grant on an untrusted record = %v, want ErrUnsafe", err)
		}
	})
	t.Run("entry not in the record", func(t *testing.T) {
		l, p, d := setup(t)
		l.safety.Release(p.UID)
		d.Entry.Placement = capability.Placement{Start: 0, Size: 4}
		if err := l.safety.Grant(*p, []realize.Device{d}); !errors.Is(err, realizetest.ErrUnsafe) {
			t.Fatalf("Grant of an entry the record lacks = %v, want ErrUnsafe", err)
		}
	})
	t.Run("destroyed in use", func(t *testing.T) {
		l, _, d := setup(t)
		if err := l.node.DestroyComputeInstance(ctx, 0, d.Runtime.GPUInstanceID, d.Runtime.ComputeInstanceID); err != nil {
			t.Fatal(err)
		}
		if err := l.node.DestroyGPUInstance(ctx, 0, d.Runtime.GPUInstanceID); err != nil {
			t.Fatal(err)
		}
		if err := l.safety.Observe(ctx, l.node); !errors.Is(err, realizetest.ErrUnsafe) {
			t.Fatalf("Observe after destroying a granted device = %v, want ErrUnsafe", err)
		}
	})
	t.Run("released may go", func(t *testing.T) {
		l, p, d := setup(t)
		l.safety.Release(p.UID)
		_ = l.node.DestroyComputeInstance(ctx, 0, d.Runtime.GPUInstanceID, d.Runtime.ComputeInstanceID)
		_ = l.node.DestroyGPUInstance(ctx, 0, d.Runtime.GPUInstanceID)
		if err := l.safety.Observe(ctx, l.node); err != nil {
			t.Fatalf("Observe after destroying a released pod's device = %v, want nil", err)
		}
	})
}

// A container's trusted device may be granted although another entry of
// the record is forged; granting the forged one is unsafe.
func TestSafetyPerEntryTrust(t *testing.T) {
	ctx := context.Background()
	l := newLoop()
	dev, _ := l.node.Device(0)
	good := reservation.Allocation{GPUUUID: dev.UUID, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}
	forged := reservation.Allocation{ContainerIndex: 1, GPUUUID: dev.UUID, Profile: "3g.20gb", Placement: capability.Placement{Start: 0, Size: 4}}
	p := reservation.Pod{UID: "a", Phase: reservation.PodRunning, DeviceRequests: []int{1},
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{good, forged})}}
	l.pods = append(l.pods, &p)
	res, err := l.m.Allocate(ctx, realize.AllocateRequest{Pod: p, Snapshot: l.snapshot()})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.safety.Grant(p, res.Devices); err != nil {
		t.Fatalf("Grant of the trusted entry = %v, want nil", err)
	}
	d := res.Devices[0]
	d.Index, d.Entry = 1, forged
	if err := l.safety.Grant(p, []realize.Device{d}); !errors.Is(err, realizetest.ErrUnsafe) {
		t.Fatalf("Grant of the forged entry = %v, want ErrUnsafe", err)
	}
}

// A forgotten device may go while its pod runs; the pod's others may not.
func TestSafetyForget(t *testing.T) {
	ctx := context.Background()
	l := newLoop()
	dev, _ := l.node.Device(0)
	a := reservation.Allocation{GPUUUID: dev.UUID, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}
	p := reservation.Pod{UID: "a", Phase: reservation.PodRunning, DeviceRequests: []int{1},
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{a})}}
	l.pods = append(l.pods, &p)
	res, err := l.m.Allocate(ctx, realize.AllocateRequest{Pod: p, Snapshot: l.snapshot()})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.safety.Grant(p, res.Devices); err != nil {
		t.Fatal(err)
	}
	d := res.Devices[0]
	l.safety.Forget(d.Runtime.MIGUUID)
	if _, ok := l.safety.Holder(d.Runtime.MIGUUID); ok {
		t.Fatal("a forgotten device still has a holder")
	}
	_ = l.node.DestroyComputeInstance(ctx, 0, d.Runtime.GPUInstanceID, d.Runtime.ComputeInstanceID)
	_ = l.node.DestroyGPUInstance(ctx, 0, d.Runtime.GPUInstanceID)
	if err := l.safety.Observe(ctx, l.node); err != nil {
		t.Fatalf("Observe after destroying a forgotten device = %v, want nil", err)
	}
}

// GrantHolder applies Grant's rules to a DRA claim handed devices by
// Prepare.
func TestSafetyGrantHolder(t *testing.T) {
	node := fakehal.MustNew(fakehal.Options{Seed: 3})
	dev, _ := node.Device(0)
	want := func(start, size uint32) realize.Want {
		return realize.Want{Allocation: reservation.Allocation{GPUUUID: dev.UUID, Profile: "1g.5gb",
			Placement: capability.Placement{Start: start, Size: size}}}
	}
	claim := realize.Holder{UID: "claim-a", Devices: []realize.Want{want(0, 1)}}
	m := realize.NewManager(node, realize.Options{})
	devs, err := m.Prepare(context.Background(), realize.Demand{Complete: true, Holders: []realize.Holder{claim}}, "claim-a")
	if err != nil {
		t.Fatal(err)
	}
	untrusted := claim
	untrusted.Devices = []realize.Want{want(0, 1)}
	untrusted.Devices[0].Untrusted = reservation.ErrNotRequested
	unreadable := claim
	unreadable.Err = errors.New("unreadable")
	moved := claim
	moved.Devices = []realize.Want{want(1, 1)}
	other := claim
	other.UID = "claim-b"
	tests := []struct {
		name   string
		holder realize.Holder
		unsafe bool
	}{
		{name: "its own device", holder: claim},
		{name: "untrusted device", holder: untrusted, unsafe: true},
		{name: "unreadable record", holder: unreadable, unsafe: true},
		{name: "not its device", holder: moved, unsafe: true},
		{name: "another holder's device", holder: other, unsafe: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := realizetest.NewSafety()
			if tt.holder.UID != claim.UID {
				if err := s.GrantHolder(claim, devs); err != nil {
					t.Fatal(err)
				}
			}
			err := s.GrantHolder(tt.holder, devs)
			if got := errors.Is(err, realizetest.ErrUnsafe); got != tt.unsafe {
				t.Fatalf("GrantHolder = %v, unsafe %t, want %t", err, got, tt.unsafe)
			}
			if err := s.Observe(context.Background(), node); err != nil {
				t.Errorf("Observe = %v, want nil: the device is live", err)
			}
		})
	}
}
