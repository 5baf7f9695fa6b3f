package kube_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// registeredNode returns node n1 as its device plugin publishes it: one
// fake A100-SXM4-40GB.
func registeredNode(t testing.TB) (*corev1.Node, string) {
	t.Helper()
	ctx := context.Background()
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	gpus, _, err := capability.Discover(ctx, fakehal.MustNew(fakehal.Options{}), capability.DefaultAllowlist())
	require.NoError(t, err)
	_, err = kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus)
	require.NoError(t, err)
	node, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	require.NoError(t, err)
	return node, gpus[0].UUID
}

// gpuPod is a pod whose one container requests devices of nvidia.com/gpu
// (none when devices is 0), at resourceVersion rv.
func gpuPod(name string, devices int64, rv int) *corev1.Pod {
	c := corev1.Container{Name: "main"}
	if devices > 0 {
		c.Resources.Limits = corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(devices, resource.DecimalSI)}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			ResourceVersion: strconv.Itoa(rv), CreationTimestamp: metav1.Unix(100, 0)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}},
	}
}

// reserved returns a copy of pod bound to node with allocs as its record.
func reserved(pod *corev1.Pod, node string, rv int, allocs ...reservation.Allocation) *corev1.Pod {
	p := pod.DeepCopy()
	p.ResourceVersion = strconv.Itoa(rv)
	p.Spec.NodeName = node
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[reservation.AnnotationKey] = reservation.EncodeString(allocs)
	return p
}

func alloc(gpu, profile string, start, size uint32) reservation.Allocation {
	return reservation.Allocation{GPUUUID: gpu, Profile: profile, Placement: capability.Placement{Start: start, Size: size}}
}

func wholeGPU() *placement.Request {
	return &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: "7g.40gb"}}}
}

func newView(t testing.TB, clk *clocktesting.FakePassiveClock) (*kube.SchedulerView, cache.ResourceEventHandler, string) {
	t.Helper()
	node, gpu := registeredNode(t)
	v := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}), kube.SchedulerViewOptions{Clock: clk})
	v.NodeHandler().OnAdd(node, true)
	return v, v.PodHandler(), gpu
}

func claimed(v *kube.SchedulerView) []string {
	var out []string
	for _, c := range v.Claims("n1") {
		out = append(out, c.Pod.Name)
	}
	return out
}

// Scenarios 1 and 2 of the scheduler safety issue: the informer lags
// behind a bind, delivering views of P older than the bind after it. They
// neither drop P's reservation (so Z cannot be placed on P's slots) nor
// P's claim on the node.
func TestSchedulerViewOlderViewsKeepABind(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, _ := newView(t, clk)
	p := gpuPod("p", 1, 5)
	as, err := v.Reserve("n1", p, wholeGPU())
	require.NoError(t, err)
	pods.OnUpdate(nil, p) // an event from before the bind, while binding
	v.Bound(p, "n1", as)
	pods.OnUpdate(nil, p) // the same stale view after the bind
	annotated := reserved(p, "", 6, schedule.Allocations(as)...)
	pods.OnUpdate(nil, annotated) // annotated but not yet bound: still older than the bind

	_, _, ok := v.Ledger().Pod("uid-p")
	assert.True(t, ok, "P's reservation survives older views")
	assert.Equal(t, []string{"p"}, claimed(v), "P still holds the node")
	_, err = v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
	assert.ErrorIs(t, err, placement.ErrUnschedulable, "Z must not get P's slots")
	assert.Empty(t, v.Ledger().Conflicts())

	// The bound view is newer and applies; an out-of-order older one after
	// it does not.
	pods.OnUpdate(nil, reserved(p, "n1", 7, schedule.Allocations(as)...))
	pods.OnUpdate(nil, reserved(p, "n1", 6))
	rs, _, ok := v.Ledger().Pod("uid-p")
	require.True(t, ok)
	assert.Len(t, rs, 1)
}

// Scenario 3: a pod that ends after its bind frees its slots as soon as
// that is observed, with no listing needed.
func TestSchedulerViewEndedPodFreesSlots(t *testing.T) {
	tests := []struct {
		name string
		end  func(p *corev1.Pod, h cache.ResourceEventHandler)
	}{
		{name: "succeeded", end: func(p *corev1.Pod, h cache.ResourceEventHandler) {
			p.Status.Phase = corev1.PodSucceeded
			h.OnUpdate(nil, p)
		}},
		{name: "deleted", end: func(p *corev1.Pod, h cache.ResourceEventHandler) { h.OnDelete(p) }},
		{name: "deleted, final state unknown", end: func(p *corev1.Pod, h cache.ResourceEventHandler) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "default/p", Obj: p})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, pods, _ := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
			p := gpuPod("p", 1, 5)
			as, err := v.Reserve("n1", p, wholeGPU())
			require.NoError(t, err)
			v.Bound(p, "n1", as)
			tt.end(reserved(p, "n1", 9, schedule.Allocations(as)...), pods)
			_, _, ok := v.Ledger().Pod("uid-p")
			assert.False(t, ok)
			assert.Empty(t, claimed(v))
			_, err = v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
			assert.NoError(t, err)
		})
	}
}

// A pod deleted while it is being bound is not brought back by Bound.
func TestSchedulerViewDeletedWhileBinding(t *testing.T) {
	v, pods, _ := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
	p := gpuPod("p", 1, 5)
	as, err := v.Reserve("n1", p, wholeGPU())
	require.NoError(t, err)
	pods.OnDelete(p)
	v.Bound(p, "n1", as)
	_, _, ok := v.Ledger().Pod("uid-p")
	assert.False(t, ok)
	assert.Empty(t, claimed(v))
}

// A failed bind forgets the reservation and applies what was held back.
func TestSchedulerViewForgetAppliesHeldEvent(t *testing.T) {
	v, pods, gpu := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
	p := gpuPod("p", 1, 5)
	_, err := v.Reserve("n1", p, wholeGPU())
	require.NoError(t, err)
	_, err = v.Reserve("n1", p, wholeGPU())
	require.ErrorIs(t, err, kube.ErrBindInProgress)
	// Meanwhile another scheduler bound the pod with a 1g.5gb.
	pods.OnUpdate(nil, reserved(p, "n1", 8, alloc(gpu, "1g.5gb", 6, 1)))
	v.Forget("uid-p")
	rs, assumed, ok := v.Ledger().Pod("uid-p")
	require.True(t, ok)
	assert.False(t, assumed)
	assert.Equal(t, "1g.5gb", rs[0].Profile)
}

// Scenario 4: annotations alone never claim a node or occupy slots. A pod
// that requests no GPU, bound by its creator with an unrealized entry and
// a far-future bind time, is ignored; so is a pod that requests one device
// but names a GPU the node does not have.
func TestSchedulerViewForgedPodsClaimNothing(t *testing.T) {
	v, pods, gpu := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
	evil := reserved(gpuPod("evil", 0, 1), "n1", 2, alloc(gpu, "7g.40gb", 0, 8))
	evil.Annotations[kube.BindTimeAnnotation] = "99999999999"
	pods.OnAdd(evil, false)
	elsewhere := reserved(gpuPod("elsewhere", 1, 1), "n1", 2, alloc("GPU-00000000-0000-0000-0000-000000000000", "1g.5gb", 0, 1))
	pods.OnAdd(elsewhere, false)
	assert.Empty(t, claimed(v))
	gs, _ := v.Ledger().Node("n1")
	assert.Zero(t, gs[0].Used, "the untrusted entry occupies nothing")
	_, err := v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
	assert.NoError(t, err)

	// A pod that does request the device, on this node's GPU, does claim
	// it until its reservation is realized.
	honest := reserved(gpuPod("honest", 1, 1), "n1", 2, alloc(gpu, "1g.5gb", 0, 1))
	pods.OnAdd(honest, false)
	assert.Equal(t, []string{"honest"}, claimed(v))
	realized := alloc(gpu, "1g.5gb", 0, 1).WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 13})
	pods.OnUpdate(nil, reserved(honest, "n1", 3, realized))
	assert.Empty(t, claimed(v))
}

// Scenario 7: a deleting pod keeps its slots until the device plugin may
// reclaim them: its containers are terminated or its grace period ended.
func TestSchedulerViewDeletingPodKeepsSlotsUntilReleased(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, gpu := newView(t, clk)
	p := reserved(gpuPod("p", 1, 1), "n1", 2, alloc(gpu, "7g.40gb", 0, 8))
	p.Status.Phase = corev1.PodRunning
	pods.OnAdd(p, false)
	deleting := p.DeepCopy()
	deleting.ResourceVersion = "3"
	deadline := metav1.NewTime(clk.Now().Add(30 * time.Second))
	deleting.DeletionTimestamp = &deadline
	deleting.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	pods.OnUpdate(p, deleting)
	v.Refresh()
	_, _, ok := v.Ledger().Pod("uid-p")
	assert.True(t, ok, "containers still run within the grace period")

	clk.SetTime(deadline.Add(-time.Nanosecond))
	v.Refresh()
	_, _, ok = v.Ledger().Pod("uid-p")
	assert.True(t, ok, "just before the deadline")
	clk.SetTime(deadline.Time)
	v.Refresh()
	_, _, ok = v.Ledger().Pod("uid-p")
	assert.False(t, ok, "at the deadline the device plugin reclaims, so the slots are free")

	// Terminated containers release the pod at once.
	q := reserved(gpuPod("q", 1, 1), "n1", 2, alloc(gpu, "7g.40gb", 0, 8))
	pods.OnAdd(q, false)
	q = q.DeepCopy()
	q.ResourceVersion = "3"
	later := metav1.NewTime(clk.Now().Add(time.Hour))
	q.DeletionTimestamp = &later
	q.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	pods.OnUpdate(nil, q)
	_, _, ok = v.Ledger().Pod("uid-q")
	assert.False(t, ok)
}

// Registered with real informers over the fake API server, the view
// follows writes, and Reflects says when it has caught up.
func TestSchedulerViewInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	node, gpu := registeredNode(t)
	client := kubetest.NewClientset(node)
	factory := informers.NewSharedInformerFactory(client, 0)
	v := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}), kube.SchedulerViewOptions{})
	require.NoError(t, v.Register(factory))
	assert.False(t, v.HasSynced())
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), v.HasSynced))

	p := reserved(gpuPod("p", 1, 0), "n1", 0, alloc(gpu, "3g.20gb", 4, 4))
	p.ResourceVersion = ""
	_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	caughtUp(t, client, v)
	rs, _, ok := v.Ledger().Pod("uid-p")
	require.True(t, ok)
	assert.Len(t, rs, 1)

	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}))
	caughtUp(t, client, v)
	_, _, ok = v.Ledger().Pod("uid-p")
	assert.False(t, ok)

	// Synced is remembered, but only for the registrations it was
	// decided on.
	late := informers.NewSharedInformerFactory(client, 0)
	require.NoError(t, v.Register(late))
	assert.False(t, v.HasSynced(), "a registration added after the sync has not synced")
	late.Start(ctx.Done())
	defer func() { cancel(); late.Shutdown() }()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), v.HasSynced))
}

// caughtUp waits until v reflects the API server as listed now.
func caughtUp(t *testing.T, client *fake.Clientset, v *kube.SchedulerView) {
	t.Helper()
	ctx := context.Background()
	for {
		pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		ok, changed := v.Reflects(pods.Items, nodes.Items)
		if ok {
			return
		}
		<-changed
	}
}

// The trust rule decides what occupies slots: entries of a container that
// requests a different number of devices are ignored.
func TestSchedulerViewTrustRule(t *testing.T) {
	v, pods, gpu := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
	two := alloc(gpu, "1g.5gb", 1, 1)
	two.DeviceIndex = 1
	pods.OnAdd(reserved(gpuPod("p", 1, 1), "n1", 2, alloc(gpu, "1g.5gb", 0, 1), two), false)
	gs, _ := v.Ledger().Node("n1")
	assert.Zero(t, gs[0].Used, "one device requested, two entries: neither counts")
}

// Pods created with spec.nodeName naming nodes that do not exist leave
// nothing behind once deleted: neither a ledger node per name (which
// would grow without bound with user-created objects) nor a view entry.
// A deleted node without pods is forgotten too.
func TestSchedulerViewForgetsNodesOnlyPodsNamed(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, gpu := newView(t, clk)
	for i := range 50 {
		p := reserved(gpuPod("ghost-"+strconv.Itoa(i), 1, 1), "ghost-node-"+strconv.Itoa(i), 2, alloc(gpu, "1g.5gb", 0, 1))
		pods.OnAdd(p, false)
		pods.OnDelete(p)
	}
	assert.Equal(t, []string{"n1"}, v.Ledger().Nodes())

	node, _ := registeredNode(t)
	node.Name = "n2"
	v.NodeHandler().OnAdd(node, false)
	v.NodeHandler().OnDelete(node)
	assert.Equal(t, []string{"n1"}, v.Ledger().Nodes())
	ok, _ := v.Reflects(nil, []corev1.Node{})
	assert.True(t, ok)
}

// A node event older than the one applied is ignored, so a registration
// applied ahead of the informer (as a scheduler's queueing hint does) is
// not undone when the informer delivers the events before it.
func TestSchedulerViewOlderNodeEventIgnored(t *testing.T) {
	node, _ := registeredNode(t)
	v := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}), kube.SchedulerViewOptions{})
	nodes := v.NodeHandler()
	bare := node.DeepCopy()
	bare.ResourceVersion = "10"
	delete(bare.Annotations, capability.NodeRegisterAnnotation)
	current := node.DeepCopy()
	current.ResourceVersion = "11"

	nodes.OnAdd(current, false)
	nodes.OnUpdate(nil, bare) // delivered late
	gpus, annotated := v.RegisteredGPUs("n1")
	assert.True(t, annotated)
	assert.Equal(t, 1, gpus)

	nodes.OnUpdate(current, current) // the same event again changes nothing
	gpus, _ = v.RegisteredGPUs("n1")
	assert.Equal(t, 1, gpus)

	newer := bare.DeepCopy()
	newer.ResourceVersion = "12"
	nodes.OnUpdate(current, newer)
	gpus, annotated = v.RegisteredGPUs("n1")
	assert.False(t, annotated)
	assert.Zero(t, gpus)
}

// A pod the kubelet admitted holds no claim on its node, whatever its
// record says: an owner who strips the runtime identity from a running
// pod's record cannot lock the node against later pods.
func TestSchedulerViewAdmittedPodClaimsNothing(t *testing.T) {
	v, pods, gpu := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
	p := reserved(gpuPod("p", 1, 1), "n1", 2, alloc(gpu, "1g.5gb", 0, 1))
	pods.OnAdd(p, false)
	require.Equal(t, []string{"p"}, claimed(v), "bound, not yet admitted: it claims the node")
	tests := []struct {
		name  string
		admit func(*corev1.Pod)
	}{
		{name: "running", admit: func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }},
		{name: "container created", admit: func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://abc"}}
		}},
		{name: "init container ran", admit: func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stripped := reserved(p, "n1", 3+i, alloc(gpu, "1g.5gb", 0, 1))
			tt.admit(stripped)
			require.True(t, kube.Admitted(stripped))
			pods.OnUpdate(p, stripped)
			assert.Empty(t, claimed(v), "an admitted pod claims nothing")
			assert.False(t, v.Unrealized("uid-p"))
		})
	}
}

// Blocking: a young claim blocks every other pod; a stale one is reported
// and blocks only a pod with a container of one of its pending sizes; the
// pod's own claim never blocks it.
func TestBlocking(t *testing.T) {
	now := time.Unix(1000, 0)
	young := kube.NodeClaim{Pod: reservation.PodRef{UID: "young"}, Since: now.Add(-time.Second), Pending: []int{1}}
	old := kube.NodeClaim{Pod: reservation.PodRef{UID: "old"}, Since: now.Add(-time.Hour), Pending: []int{2}}
	req := func(devices ...int) *placement.Request {
		r := &placement.Request{}
		for _, d := range devices {
			r.Containers = append(r.Containers, placement.ContainerRequest{Devices: d})
		}
		return r
	}
	tests := []struct {
		name   string
		claims []kube.NodeClaim
		uid    string
		req    *placement.Request
		want   string // UID of the blocking claim, "" for none
		stale  []string
	}{
		{name: "none", req: req(1)},
		{name: "young blocks all", claims: []kube.NodeClaim{young}, uid: "p", req: req(3), want: "young"},
		{name: "own claim", claims: []kube.NodeClaim{young}, uid: "young", req: req(1)},
		{name: "stale, other size", claims: []kube.NodeClaim{old}, uid: "p", req: req(1, 3), stale: []string{"old"}},
		{name: "stale, confusable", claims: []kube.NodeClaim{old}, uid: "p", req: req(1, 2), want: "old", stale: []string{"old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stale []string
			c, ok := kube.Blocking(tt.claims, tt.uid, tt.req, now, time.Minute, func(c kube.NodeClaim) { stale = append(stale, c.Pod.UID) })
			assert.Equal(t, tt.want != "", ok)
			assert.Equal(t, tt.want, c.Pod.UID)
			assert.Equal(t, tt.stale, stale)
		})
	}
	_, ok := kube.Blocking([]kube.NodeClaim{old}, "p", req(2), now, time.Minute, nil)
	assert.True(t, ok, "a nil stale reporter is allowed")
}
