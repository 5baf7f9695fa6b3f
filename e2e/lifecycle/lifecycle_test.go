package lifecycle_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// TestLifecycle runs dynmig's whole lifecycle through real Kubernetes
// objects: registration, scheduling, admission by the kubelet's device
// manager, realization, a two-container pod, an unschedulable pod,
// graceful deletion and reclamation, and restarts of the device plugin,
// the kubelet, the scheduler and the API server. It runs once per
// scheduler (schedulings): the upstream kube-scheduler with the extender,
// and kube-scheduler with the DynMIG framework plugin, each from its
// shipped configuration. Each run's steps share one system and run in
// order.
func TestLifecycle(t *testing.T) {
	for _, s := range schedulings {
		t.Run(s.name, func(t *testing.T) { lifecycle(t, startEnv(t, s.new())) })
	}
}

func lifecycle(t *testing.T, e *env) {
	hwGPUs := e.hw.NumGPUs()

	t.Run("registration", func(t *testing.T) {
		// The plugin publishes the node's MIG capability on the Node; the
		// kubelet's device manager publishes its device count.
		e.wait("node registration and capacity", func(ctx context.Context) (bool, error) {
			n, err := e.admin.CoreV1().Nodes().Get(ctx, e.node.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			gpus, err := kube.NodeGPUs(n)
			if err != nil || len(gpus) != hwGPUs {
				return false, nil
			}
			q, ok := n.Status.Allocatable[kube.ResourceGPU]
			if !ok || q.Value() == 0 {
				return false, nil
			}
			for _, g := range gpus {
				if got, want := g.UUID, e.gpuUUID(g.Index); got != want {
					t.Errorf("registered GPU %d: UUID %s, the hardware's is %s", g.Index, got, want)
				}
				if len(g.Profiles) == 0 || g.Unhealthy {
					t.Errorf("registered GPU %d: %d profiles, unhealthy %v", g.Index, len(g.Profiles), g.Unhealthy)
				}
			}
			return true, nil
		})
	})

	// Three pods, created in this order. The scheduler lets one unrealized
	// MIG pod at a time onto a node, so the kubelet (the test, here) always
	// has at most one MIG pod to admit: it admits whatever the scheduler
	// binds, earliest created first, and the plugin must realize exactly
	// that pod's reservation.
	sizes := []struct {
		name   string
		gpumem int64
	}{
		{name: "train-a", gpumem: 9000},  // 2g.10gb on an A100-40GB
		{name: "infer-b", gpumem: 4000},  // 1g.5gb
		{name: "train-c", gpumem: 19000}, // 3g.20gb
	}
	realized := map[string]reservation.Allocation{}
	t.Run("schedule and admit", func(t *testing.T) {
		want := map[string]bool{}
		for _, s := range sizes {
			e.create(e.migPod(s.name, s.gpumem))
			want[s.name] = true
		}
		for len(want) > 0 {
			name := e.waitPending()
			if !want[name] {
				t.Fatalf("pod %s pending on the node, want one of %v", name, want)
			}
			delete(want, name)
			record(realized, name, e.admitNext(name))
		}
		assertDisjoint(t, realized)
		assertHardwareMatches(t, e, realized)
	})

	t.Run("a pod with two MIG containers", func(t *testing.T) {
		// The kubelet calls Allocate once per container; each gets the
		// instance reserved for it.
		e.create(e.migPod("pair", 4000, 4000))
		e.waitBound("pair")
		record(realized, "pair", e.admitNext("pair"))
		assertDisjoint(t, realized)
		assertHardwareMatches(t, e, realized)
	})

	t.Run("unschedulable pod stays pending with dynmig's reason", func(t *testing.T) {
		// 100 GB on one device: no MIG profile of an A100-40GB has it.
		e.create(e.migPod("too-big", 100000))
		var cond corev1.PodCondition
		e.wait("too-big unschedulable", func(context.Context) (bool, error) {
			p, err := e.get("too-big")
			if err != nil {
				return false, nil
			}
			if p.Spec.NodeName != "" {
				t.Fatalf("too-big was bound to %s", p.Spec.NodeName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					cond = c
					return true, nil
				}
			}
			return false, nil
		})
		t.Logf("PodScheduled: %s: %s", cond.Reason, cond.Message)
		// The scheduler's own plugins ignore nvidia.com/gpumem (the
		// configuration marks it ignoredByScheduler, or lists it in
		// NodeResourcesFit's ignoredResources), so the refusal must be
		// dynmig's: the extender's filter reason for the node, or the
		// DynMIG plugin's, is in the condition.
		pod, err := e.get("too-big")
		if err != nil {
			t.Fatal(err)
		}
		reason := e.sched.refusal(e, pod, e.node.Name)
		if reason == "" {
			t.Fatalf("dynmig accepts too-big on %s", e.node.Name)
		}
		if !strings.Contains(cond.Message, reason) {
			t.Errorf("PodScheduled message %q does not carry dynmig's reason %q", cond.Message, reason)
		}
		if err := e.admin.CoreV1().Pods(testNamespace).Delete(e.ctx, "too-big", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("graceful deletion reclaims only when containers are done", func(t *testing.T) {
		const name = "train-a"
		want := realized[name+"/0"]
		e.deleteGracefully(name)
		pod, err := e.get(name)
		if err != nil {
			t.Fatalf("a graceful delete removed the pod at once: %v", err)
		}
		if pod.DeletionTimestamp == nil {
			t.Fatal("deleted pod has no deletionTimestamp")
		}
		// Its containers still run: passes of the plugin's maintenance
		// loop, which sees the deletion, must leave the instance alone.
		e.waitReconciles(3)
		if e.instanceByMIG(want.MIGUUID) == nil {
			t.Fatalf("instance %s of a deleting pod whose containers run was destroyed", want.MIGUUID)
		}
		// The kubelet stops the containers and reports them terminated.
		if err := e.node.Terminate(e.ctx, testNamespace, name, 137, false); err != nil {
			t.Fatal(err)
		}
		e.wait("reclamation of "+want.MIGUUID, func(context.Context) (bool, error) {
			return e.instanceByMIG(want.MIGUUID) == nil, nil
		})
		if err := e.node.FinishDeletion(e.ctx, pod); err != nil {
			t.Fatal(err)
		}
		delete(realized, name+"/0")
		assertHardwareMatches(t, e, realized)
	})

	t.Run("plugin restart adopts", func(t *testing.T) {
		before := e.hw.Snapshot()
		destroyed := e.hw.Calls(fakehal.OpDestroyGI) + e.hw.Calls(fakehal.OpDestroyCI)
		// As over the kubelet restart below: no status showing the
		// devices unhealthy while the plugin is down.
		e.node.PauseStatus(true)
		if err := e.plugin.Stop(); err != nil {
			t.Fatalf("plugin stopped with %v", err)
		}
		if got := e.hw.Snapshot(); !sameInstances(got, before) {
			t.Fatalf("stopping the plugin changed the hardware: got %v, want %v", got, before)
		}
		e.startPlugin()
		// Adoption and a few reconcile passes later nothing in use is gone.
		e.waitReconciles(3)
		e.wait("the plugin to register again", func(context.Context) (bool, error) {
			_, allocatable, _ := e.node.DeviceManager().GetCapacity(klog.Background())
			q, ok := allocatable[kube.ResourceGPU]
			return ok && q.Value() > 0, nil
		})
		e.node.PauseStatus(false)
		if err := e.node.SyncStatus(e.ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.hw.Snapshot(); !sameInstances(got, before) {
			t.Fatalf("after the restart: got %v, want %v", got, before)
		}
		if got := e.hw.Calls(fakehal.OpDestroyGI) + e.hw.Calls(fakehal.OpDestroyCI); got != destroyed {
			t.Errorf("the restart destroyed instances: %d destroy calls, want %d", got, destroyed)
		}
		if st := e.plugin.Manager().Managed(); len(st) != len(realized) {
			t.Errorf("the new plugin manages %d instances, want the %d it adopted", len(st), len(realized))
		}
		assertHardwareMatches(t, e, realized)
		// The new plugin registered with the kubelet again and serves
		// admissions.
		e.create(e.migPod("after-plugin-restart", 4000))
		e.waitBound("after-plugin-restart")
		record(realized, "after-plugin-restart", e.admitNext("after-plugin-restart"))
		assertDisjoint(t, realized)
	})

	t.Run("kubelet restart", func(t *testing.T) {
		before := e.hw.Snapshot()
		// The node's status is not published until the plugin has
		// registered again (see Node.PauseStatus): a status showing no
		// devices would leave a MIG pod created meanwhile Unschedulable
		// for minutes with the extender, because kube-scheduler v1.37.2
		// does not requeue it when the devices come back (its
		// NodeResourcesFit queueing hint ignores the extender's
		// ignoredByScheduler resources, so nvidia.com/gpumem never "fits"
		// a node there). Both schedulers see the same statuses.
		e.node.PauseStatus(true)
		if err := e.node.RestartKubelet(); err != nil {
			t.Fatal(err)
		}
		// The new device manager removed the plugin's socket; the plugin
		// serves a new one and registers again, and only then does the
		// manager count devices.
		e.wait("the plugin to register with the restarted kubelet", func(context.Context) (bool, error) {
			_, allocatable, _ := e.node.DeviceManager().GetCapacity(klog.Background())
			q, ok := allocatable[kube.ResourceGPU]
			return ok && q.Value() > 0, nil
		})
		if got := e.hw.Snapshot(); !sameInstances(got, before) {
			t.Fatalf("the kubelet restart changed the hardware: got %v, want %v", got, before)
		}
		e.node.PauseStatus(false)
		if err := e.node.SyncStatus(e.ctx); err != nil {
			t.Fatal(err)
		}
		e.create(e.migPod("after-kubelet-restart", 4000))
		e.waitBound("after-kubelet-restart")
		record(realized, "after-kubelet-restart", e.admitNext("after-kubelet-restart"))
		assertDisjoint(t, realized)
		assertHardwareMatches(t, e, realized)
	})

	t.Run("scheduler restart rebuilds the ledger", func(t *testing.T) {
		e.sched.stop()
		e.sched.start(e)
		// The new scheduler rebuilds its ledger from the API alone: every
		// realized reservation occupies its slots there, without conflict.
		uids := map[string]string{}
		for key := range realized {
			p, err := e.get(podOf(key))
			if err != nil {
				t.Fatal(err)
			}
			uids[key] = string(p.UID)
		}
		e.wait("the new scheduler's ledger", func(context.Context) (bool, error) {
			for key, a := range realized {
				rs, assumed, ok := e.sched.ledger().Pod(uids[key])
				if !ok || assumed {
					return false, nil
				}
				found := false
				for _, r := range rs {
					found = found || r.ContainerIndex == a.ContainerIndex && r.GPUUUID == a.GPUUUID && r.Placement == a.Placement
				}
				if !found {
					return false, nil
				}
			}
			gpus, ok := e.sched.ledger().Node(e.node.Name)
			return ok && len(gpus) == hwGPUs, nil
		})
		if c := e.sched.ledger().Conflicts(); len(c) != 0 {
			t.Errorf("ledger conflicts after the restart: %v", c)
		}
		// A new scheduler knows the reservations only from the API. A ledger
		// that forgot any would place new pods over a live instance, which
		// the disjointness check (and fakehal) refuses.
		for i, name := range []string{"after-sched-restart-1", "after-sched-restart-2"} {
			e.create(e.migPod(name, []int64{9000, 4000}[i]))
			e.waitBound(name)
			record(realized, name, e.admitNext(name))
			assertDisjoint(t, realized)
		}
		assertHardwareMatches(t, e, realized)
	})

	t.Run("API server restart", func(t *testing.T) {
		if err := e.c.RestartAPIServer(); err != nil {
			t.Fatal(err)
		}
		// Every component reconnects through its informers; a new pod goes
		// through the whole path again.
		e.create(e.migPod("after-apiserver-restart", 4000))
		e.waitBound("after-apiserver-restart")
		record(realized, "after-apiserver-restart", e.admitNext("after-apiserver-restart"))
		assertDisjoint(t, realized)
		assertHardwareMatches(t, e, realized)
	})

	t.Run("completed pods are reclaimed", func(t *testing.T) {
		var names []string
		for key := range realized {
			names = append(names, podOf(key))
		}
		slices.Sort(names)
		for _, name := range slices.Compact(names) {
			if err := e.node.Terminate(e.ctx, testNamespace, name, 0, true); err != nil {
				t.Fatal(err)
			}
		}
		e.wait("every instance reclaimed", func(context.Context) (bool, error) {
			return len(e.hw.Snapshot()) == 0, nil
		})
		if err := e.hw.Check(); err != nil {
			t.Errorf("fakehal invariants: %v", err)
		}
	})
}

// assertDisjoint fails if two realized reservations share a slot.
func assertDisjoint(t *testing.T, realized map[string]reservation.Allocation) {
	t.Helper()
	names := make([]string, 0, len(realized))
	for n := range realized {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, a := range names {
		for _, b := range names[i+1:] {
			if overlaps(realized[a], realized[b]) {
				t.Errorf("pods %s and %s share slots: %v and %v", a, b, realized[a], realized[b])
			}
		}
	}
}

// assertHardwareMatches fails unless the node's instances are exactly the
// realized reservations: one instance per pod, at its placement, under its
// runtime identity.
func assertHardwareMatches(t *testing.T, e *env, realized map[string]reservation.Allocation) {
	t.Helper()
	snap := e.hw.Snapshot()
	if len(snap) != len(realized) {
		t.Errorf("node has %d instances, want %d (one per realized pod): %v", len(snap), len(realized), snap)
	}
	for name, a := range realized {
		in := e.instanceByMIG(a.MIGUUID)
		if in == nil {
			t.Errorf("pod %s: its MIG device %s is gone", name, a.MIGUUID)
			continue
		}
		if in.Placement != a.Placement || e.gpuUUID(in.GPU) != a.GPUUUID {
			t.Errorf("pod %s: instance at GPU %s %v, reserved GPU %s %v", name, e.gpuUUID(in.GPU), in.Placement, a.GPUUUID, a.Placement)
		}
	}
}

func sameInstances(a, b []realize.Instance) bool {
	key := func(in realize.Instance) string {
		s := []string{strconv.Itoa(in.GPU), in.Placement.String()}
		for _, ci := range in.ComputeInstances {
			s = append(s, ci.MIGUUID)
		}
		return strings.Join(s, "/")
	}
	ka, kb := make([]string, 0, len(a)), make([]string, 0, len(b))
	for _, in := range a {
		ka = append(ka, key(in))
	}
	for _, in := range b {
		kb = append(kb, key(in))
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}
