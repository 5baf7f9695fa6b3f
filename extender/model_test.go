package extender_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// TestExtenderModel is a rapid model of the extender over the fake API
// server: pods arrive and are filtered and bound (two calls at once,
// sometimes twice the same pod), realized, end (Succeeded, deleted,
// deleting with or without terminated containers), forged pods appear, the
// node's profile table narrows and widens, the clock moves, and the pod
// informer lags: its watch events are held back and delivered late, pods'
// events interleaved in any order (each pod's own in order, as a watch
// delivers them). After every step it asserts that
//
//   - no two reservations that count (trusted entries of bound, unreleased
//     pods, as the API server holds them) overlap, and the ledger reports
//     no overlap;
//   - every pod claiming the node requests the MIG resource;
//   - once the view has caught up, no released or deleted pod holds slots.
func TestExtenderModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := newModel(rt)
		defer m.stop()
		rt.Repeat(map[string]func(*rapid.T){
			"create":  m.create,
			"forge":   m.forge,
			"bind":    m.bind,
			"realize": m.realize,
			"end":     m.end,
			"tick":    m.tick,
			"table":   m.table,
			"deliver": m.deliver,
			"catchUp": m.catchUp,
			"":        m.check,
		})
		m.catchUp(rt)
		m.check(rt)
	})
}

type model struct {
	ctx    context.Context
	client *fake.Clientset
	clk    *clocktesting.FakePassiveClock
	ext    *extender.Extender
	gate   *watchGate
	gpus   []capability.GPU
	stop   func()

	pods    []string        // names of every pod created, in order
	forged  map[string]bool // pods created by an adversary
	created int
}

func newModel(t *rapid.T) *model {
	ctx := context.Background()
	client := cluster(t)
	gpus, _, err := capability.Discover(ctx, fakehal.MustNew(fakehal.Options{}), capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	m := &model{ctx: ctx, client: client, gpus: gpus, forged: map[string]bool{},
		clk: clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), gate: newWatchGate()}
	m.ext = extender.New(gatedClient{client, m.gate}, extender.Options{Clock: m.clk, LockTimeout: time.Minute})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = m.ext.Run(runCtx); close(done) }()
	m.stop = func() { cancel(); m.gate.close(); <-done; m.gate.pumps.Wait() }
	m.catchUp(t)
	return m
}

func (m *model) newName(prefix string) string {
	m.created++
	name := fmt.Sprintf("%s-%d", prefix, m.created)
	m.pods = append(m.pods, name)
	return name
}

func (m *model) create(t *rapid.T) {
	pod := migPodN(m.newName("p"), int64(rapid.IntRange(1, 2).Draw(t, "devices")),
		rapid.SampledFrom([]string{"", "4000", "9000", "16000"}).Draw(t, "gpumem"))
	if _, err := m.client.CoreV1().Pods("default").Create(m.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// forge creates a pod bound to n1 by its creator, with an unrealized
// record and a far-future bind time: one that requests no GPU (with an
// entry on the node's GPU), or one that requests a device on a GPU the
// node does not have.
func (m *model) forge(t *rapid.T) {
	name := m.newName("forged")
	m.forged[name] = true
	requests := rapid.Bool().Draw(t, "requests")
	gpu := m.gpus[0].UUID
	if requests {
		gpu = "GPU-00000000-0000-0000-0000-000000000000"
	}
	start := uint32(rapid.IntRange(0, 6).Draw(t, "start"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{
				reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}}),
				kube.BindTimeAnnotation:   "99999999999",
			}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}},
	}
	if requests {
		pod = migPod(name, "4000")
		pod.Spec.NodeName = "n1"
		pod.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}})
	}
	if _, err := m.client.CoreV1().Pods("default").Create(m.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pending returns the names of the model's pods that exist and are not bound.
func (m *model) pending() []string {
	var out []string
	for _, name := range m.pods {
		if p, err := m.client.CoreV1().Pods("default").Get(m.ctx, name, metav1.GetOptions{}); err == nil && p.Spec.NodeName == "" {
			out = append(out, name)
		}
	}
	return out
}

// bind runs two scheduler calls at once: Binds of two pending pods (the
// same one twice, sometimes) and a Filter.
func (m *model) bind(t *rapid.T) {
	pending := m.pending()
	if len(pending) == 0 {
		t.Skip("no pending pod")
	}
	names := []string{rapid.SampledFrom(pending).Draw(t, "first"), rapid.SampledFrom(pending).Draw(t, "second")}
	filtered, err := m.client.CoreV1().Pods("default").Get(m.ctx, names[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			_ = m.ext.Bind(m.ctx, extender.BindingArgs{PodNamespace: "default", PodName: name, Node: "n1"})
		})
	}
	wg.Go(func() { m.ext.Filter(m.ctx, extender.Args{Pod: filtered, NodeNames: &[]string{"n1", "n2"}}) })
	wg.Wait()
}

// bound returns the model's pods bound to n1 that are not forged.
func (m *model) bound() []*corev1.Pod {
	var out []*corev1.Pod
	for _, name := range m.pods {
		if p, err := m.client.CoreV1().Pods("default").Get(m.ctx, name, metav1.GetOptions{}); err == nil && p.Spec.NodeName != "" && !m.forged[name] {
			out = append(out, p)
		}
	}
	return out
}

func (m *model) realize(t *rapid.T) {
	pods := m.bound()
	if len(pods) == 0 {
		t.Skip("no bound pod")
	}
	pod := pods[rapid.IntRange(0, len(pods)-1).Draw(t, "pod")]
	allocs, err := kube.PodAllocations(pod)
	if err != nil {
		t.Fatal(err)
	}
	for i := range allocs {
		allocs[i] = allocs[i].WithRuntime(reservation.RuntimeIdentity{
			MIGUUID: fmt.Sprintf("MIG-1a2b3c4d-5e6f-4a7b-8c9d-%012d", m.created*16+i), GPUInstanceID: uint32(1 + i)})
	}
	_, _ = kube.NewAnnotationWriter(m.client, kube.AnnotationWriterOptions{}).WriteRuntime(m.ctx, pod, allocs)
}

func (m *model) end(t *rapid.T) {
	// Only running pods end: the API server never moves a deletion
	// deadline later or brings a terminal pod back.
	pods := slices.DeleteFunc(m.bound(), kube.Terminal)
	if len(pods) == 0 {
		t.Skip("no running pod")
	}
	pod := pods[rapid.IntRange(0, len(pods)-1).Draw(t, "pod")]
	deadline := m.clk.Now().Add(time.Duration(rapid.IntRange(0, 60).Draw(t, "grace")) * time.Second).UTC().Format(time.RFC3339)
	var body string
	switch rapid.IntRange(0, 3).Draw(t, "how") {
	case 0:
		body = `{"status":{"phase":"Succeeded"}}`
	case 1:
		if err := m.client.CoreV1().Pods("default").Delete(m.ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	case 2:
		body = `{"metadata":{"deletionTimestamp":"` + deadline + `"},"status":{"containerStatuses":[{"name":"main","state":{"running":{}}}]}}`
	default:
		body = `{"metadata":{"deletionTimestamp":"` + deadline + `"},"status":{"containerStatuses":[{"name":"main","state":{"terminated":{"exitCode":0}}}]}}`
	}
	// The kubelet's write: through the status subresource.
	if _, err := m.client.CoreV1().Pods("default").Patch(m.ctx, pod.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

func (m *model) tick(t *rapid.T) {
	m.clk.SetTime(m.clk.Now().Add(time.Duration(rapid.IntRange(1, 90).Draw(t, "seconds")) * time.Second))
}

// table republishes n1's registration, narrowed to the small profiles or
// whole again.
func (m *model) table(t *rapid.T) {
	gpus := slices.Clone(m.gpus)
	if rapid.Bool().Draw(t, "narrow") {
		for i := range gpus {
			gpus[i].Profiles = slices.DeleteFunc(slices.Clone(gpus[i].Profiles), func(p capability.Profile) bool {
				return p.Name != "1g.5gb" && p.Name != "2g.10gb"
			})
		}
	}
	if _, err := kube.NewRegistrationPublisher(m.client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(m.ctx, gpus); err != nil {
		t.Fatal(err)
	}
}

func (m *model) deliver(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "events")
	for range n {
		ready := m.gate.ready()
		if len(ready) == 0 {
			return
		}
		m.gate.release(rapid.SampledFrom(ready).Draw(t, "event"))
	}
}

// catchUp delivers every held event and waits until the view reflects the
// API server.
func (m *model) catchUp(t *rapid.T) {
	m.gate.setOpen(true)
	defer m.gate.setOpen(false)
	if err := m.ext.Sync(m.ctx); err != nil {
		t.Fatal(err)
	}
	m.checkCaughtUp(t)
}

// check asserts the invariants that hold whatever the informer's lag.
func (m *model) check(t *rapid.T) {
	now := m.clk.Now()
	type counted struct {
		pod string
		a   reservation.Allocation
	}
	var live []counted
	pods, err := m.client.CoreV1().Pods("default").List(m.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		view := kube.PodView(p)
		if p.Spec.NodeName == "" || view.Released(now) {
			continue
		}
		allocs, err := kube.PodAllocations(p)
		if err != nil || reservation.ValidateRequests(allocs, view.DeviceRequests) != nil {
			continue
		}
		for _, a := range allocs {
			if !slices.ContainsFunc(m.gpus, func(g capability.GPU) bool { return g.UUID == a.GPUUUID }) {
				continue // not a slot of the node: forged, and the device plugin never realizes it
			}
			for _, o := range live {
				if o.a.GPUUUID == a.GPUUUID && o.a.Placement.Overlaps(a.Placement) {
					t.Fatalf("pods %s %v and %s %v overlap on %s", o.pod, o.a.Placement, p.Name, a.Placement, a.GPUUUID)
				}
			}
			live = append(live, counted{p.Name, a})
		}
	}
	for _, c := range m.ext.Ledger().Conflicts() {
		if c.Other != "" {
			t.Fatalf("ledger overlap: %v", c)
		}
	}
	for _, c := range m.ext.View().Claims("n1") {
		if m.forged[c.Pod.Name] {
			t.Fatalf("forged pod %s claims the node", c.Pod.Name)
		}
		pod := migPod("probe", "")
		if p, err := m.client.CoreV1().Pods("default").Get(m.ctx, c.Pod.Name, metav1.GetOptions{}); err == nil {
			pod = p
		}
		if kube.PodView(pod).DeviceRequests == nil {
			t.Fatalf("pod %s claims the node but requests no device", c.Pod.Name)
		}
	}
}

// checkCaughtUp asserts that no ended pod holds slots once the view has
// seen everything.
func (m *model) checkCaughtUp(t *rapid.T) {
	now := m.clk.Now()
	for _, name := range m.pods {
		_, _, held := m.ext.Ledger().Pod("uid-" + name)
		if !held {
			continue
		}
		p, err := m.client.CoreV1().Pods("default").Get(m.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("deleted pod %s holds slots", name)
		}
		if v := kube.PodView(p); v.Released(now) {
			t.Fatalf("released pod %s (phase %v, deleting %v) holds slots", name, v.Phase, v.Deleting)
		}
	}
	m.check(t)
}

// gatedClient hands the pod informer watches whose events a watchGate
// holds back.
type gatedClient struct {
	*fake.Clientset
	gate *watchGate
}

func (c gatedClient) CoreV1() corev1client.CoreV1Interface {
	return gatedCore{c.Clientset.CoreV1(), c.gate}
}

type gatedCore struct {
	corev1client.CoreV1Interface
	gate *watchGate
}

func (c gatedCore) Pods(namespace string) corev1client.PodInterface {
	return gatedPods{c.CoreV1Interface.Pods(namespace), c.gate}
}

type gatedPods struct {
	corev1client.PodInterface
	gate *watchGate
}

func (p gatedPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := p.PodInterface.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return p.gate.wrap(w), nil
}

// watchGate holds the events of the watches it wraps until released, or
// passes them through while open.
type watchGate struct {
	mu     sync.Mutex
	open   bool
	held   []heldEvent
	done   chan struct{}
	closed bool
	pumps  sync.WaitGroup
}

type heldEvent struct {
	w  *gatedWatch
	ev watch.Event
}

type gatedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func newWatchGate() *watchGate { return &watchGate{done: make(chan struct{})} }

func (g *watchGate) wrap(inner watch.Interface) watch.Interface {
	w := &gatedWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	g.pumps.Go(func() { g.pump(w) })
	return w
}

func (w *gatedWatch) ResultChan() <-chan watch.Event { return w.out }
func (w *gatedWatch) Stop() {
	w.once.Do(func() { close(w.stop); w.inner.Stop() })
}

// pump moves the inner watch's events into the gate.
func (g *watchGate) pump(w *gatedWatch) {
	for ev := range w.inner.ResultChan() {
		g.mu.Lock()
		if !g.open {
			g.held = append(g.held, heldEvent{w, ev})
			g.mu.Unlock()
			continue
		}
		g.mu.Unlock()
		g.send(w, ev)
	}
}

func (g *watchGate) send(w *gatedWatch, ev watch.Event) {
	select {
	case w.out <- ev:
	case <-w.stop:
	case <-g.done:
	}
}

// ready returns the indexes of held events that may go next: the first
// held event of each pod.
func (g *watchGate) ready() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	seen := map[types.UID]bool{}
	for i, h := range g.held {
		uid := uidOf(h.ev)
		if !seen[uid] {
			seen[uid] = true
			out = append(out, i)
		}
	}
	return out
}

func uidOf(ev watch.Event) types.UID {
	if p, ok := ev.Object.(*corev1.Pod); ok {
		return p.UID
	}
	return ""
}

func (g *watchGate) release(i int) {
	g.mu.Lock()
	h := g.held[i]
	g.held = slices.Delete(g.held, i, i+1)
	g.mu.Unlock()
	g.send(h.w, h.ev)
}

// setOpen opens the gate (delivering everything held, in order) or closes
// it again.
func (g *watchGate) setOpen(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
	if !open {
		return
	}
	// Under the lock, so that a pump cannot send a newer event first.
	for _, h := range g.held {
		g.send(h.w, h.ev)
	}
	g.held = nil
}

// close stops the pumps' deliveries; the informers stop their watches.
func (g *watchGate) close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.done)
	}
	g.mu.Unlock()
}
