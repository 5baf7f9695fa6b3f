package extender_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// The regression tests of the scheduler safety issue, one per scenario,
// through the extender's public API over the fake API server.

// patchPod merge-patches the pod name, as its owner may.
func patchPod(t *testing.T, client *fake.Clientset, name, body string) {
	t.Helper()
	_, err := client.CoreV1().Pods("default").Patch(context.Background(), name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	require.NoError(t, err)
}

// patchStatus merge-patches the pod name through its status subresource,
// as the kubelet does.
func patchStatus(t *testing.T, client *fake.Clientset, name, body string) {
	t.Helper()
	_, err := client.CoreV1().Pods("default").Patch(context.Background(), name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

// realize writes a runtime identity for every entry of the pod, as the
// device plugin does after creating the instances.
func realize(t *testing.T, client *fake.Clientset, name string) {
	t.Helper()
	pod := get(t, client, name)
	allocs, err := kube.PodAllocations(pod)
	require.NoError(t, err)
	for i := range allocs {
		allocs[i] = allocs[i].WithRuntime(reservation.RuntimeIdentity{
			MIGUUID: fmt.Sprintf("MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c%02d", i), GPUInstanceID: uint32(1 + i)})
	}
	_, err = kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(context.Background(), pod, allocs)
	require.NoError(t, err)
}

func placementOf(t *testing.T, client *fake.Clientset, name string) capability.Placement {
	t.Helper()
	allocs, err := kube.PodAllocations(get(t, client, name))
	require.NoError(t, err)
	require.Len(t, allocs, 1)
	return allocs[0].Placement
}

// Scenarios 1 and 2: Bind decides against the view the informers keep,
// plus its own binds, never against a listing that may predate another
// bind. Right after P is bound (before any informer event about it), a
// second pod is neither bound on P's slots nor bound to P's locked node.
func TestBindRightAfterBindNeverDoubleBooks(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	p := create(t, client, migPod("p", ""))
	z := create(t, client, migPod("z", ""))
	require.NoError(t, ext.Bind(ctx, bindArgs(p, "n1")))
	assert.ErrorIs(t, ext.Bind(ctx, bindArgs(z, "n1")), extender.ErrNodeLocked, "P is not realized: the node is locked")

	realize(t, client, "p")
	catchUp(t, ext)
	err := ext.Bind(ctx, bindArgs(z, "n1"))
	require.Error(t, err, "P holds the whole GPU")
	assert.Empty(t, get(t, client, "z").Spec.NodeName)
	assert.Empty(t, ext.Ledger().Conflicts())
	_, _, ok := ext.Ledger().Pod("uid-p")
	assert.True(t, ok)
}

// Scenario 3: a pod that ends after its bind frees its slots as soon as
// the informer reports it, although Filter is never called in between.
func TestEndedPodFreesItsSlots(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	p := create(t, client, migPod("p", ""))
	require.NoError(t, ext.Bind(ctx, bindArgs(p, "n1")))
	realize(t, client, "p")
	patchStatus(t, client, "p", `{"status":{"phase":"Succeeded"}}`)
	catchUp(t, ext)
	_, _, ok := ext.Ledger().Pod("uid-p")
	assert.False(t, ok, "a Succeeded pod holds no slots")
	z := create(t, client, migPod("z", ""))
	require.NoError(t, ext.Bind(ctx, bindArgs(z, "n1")))
}

// Scenario 4: a pod requesting no GPU, created already bound with an
// unrealized entry on a GPU that does not exist and a far-future bind
// time, neither locks the node nor takes slots.
func TestForgedPodLocksNothing(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	gpu := n1GPU(t, ext)
	for i, uuid := range []string{"GPU-00000000-0000-0000-0000-000000000000", gpu} {
		evil := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("evil-%d", i), UID: types.UID(fmt.Sprintf("uid-evil-%d", i)),
				Annotations: map[string]string{
					reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{{GPUUUID: uuid, Profile: "7g.40gb", Placement: capability.Placement{Start: 0, Size: 8}}}),
					kube.BindTimeAnnotation:   "99999999999",
				}},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}},
		}
		_, err := client.CoreV1().Pods("tenant").Create(ctx, evil, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	catchUp(t, ext)
	a := create(t, client, migPod("a", ""))
	res := ext.Filter(ctx, extender.Args{Pod: a, NodeNames: names("n1")})
	assert.Equal(t, []string{"n1"}, *res.NodeNames, "failed: %v", res.FailedNodes)
	require.NoError(t, ext.Bind(ctx, bindArgs(a, "n1")))
}

func n1GPU(t *testing.T, ext *extender.Extender) string {
	t.Helper()
	gs, ok := ext.Ledger().Node("n1")
	require.True(t, ok)
	require.NotEmpty(t, gs)
	return gs[0].Grid.UUID()
}

// Scenario 4, the timeout: a claim not realized within the lock timeout
// is reported once (event and metric) and still blocks pods the device
// plugin could confuse with it.
func TestStaleClaimIsReported(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ext := start(t, client, extender.Options{Clock: clk, LockTimeout: time.Minute})
	a := create(t, client, migPod("a", "4000"))
	b := create(t, client, migPod("b", "4000"))
	require.NoError(t, ext.Bind(ctx, bindArgs(a, "n1")))
	clk.SetTime(clk.Now().Add(time.Minute))
	require.ErrorIs(t, ext.Bind(ctx, bindArgs(b, "n1")), extender.ErrNodeLocked)
	assert.Equal(t, 1.0, testutil.ToFloat64(ext.Collector()))
	events := podEvents(t, client, 1)
	assert.Equal(t, extender.StaleClaimReason, events[0].Reason)
	assert.Equal(t, corev1.EventTypeWarning, events[0].Type)

	c := create(t, client, migPodN("c", 2, "4000"))
	require.NoError(t, ext.Bind(ctx, bindArgs(c, "n1")), "two devices: told apart from a's one")
}

// Scenario 5: a narrower profile table (an allowlist change) leaves a
// running pod's slots taken and reports the reservation it no longer
// describes.
func TestNarrowerTableKeepsRunningPod(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	big := create(t, client, migPod("big", "16000")) // 3g.20gb
	require.NoError(t, ext.Bind(ctx, bindArgs(big, "n1")))
	realize(t, client, "big")
	held := placementOf(t, client, "big")

	gpus, _, err := capability.Discover(ctx, fakehal.MustNew(fakehal.Options{}), capability.DefaultAllowlist())
	require.NoError(t, err)
	for i := range gpus {
		gpus[i].Profiles = slices.DeleteFunc(gpus[i].Profiles, func(p capability.Profile) bool {
			return p.Name != "1g.5gb" && p.Name != "2g.10gb"
		})
	}
	_, err = kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus)
	require.NoError(t, err)
	catchUp(t, ext)

	for i := range 4 {
		name := fmt.Sprintf("small-%d", i)
		pod := create(t, client, migPod(name, "4000"))
		require.NoError(t, ext.Bind(ctx, bindArgs(pod, "n1")), name)
		got := placementOf(t, client, name)
		assert.False(t, got.Overlaps(held), "%s placed at %v over the running pod's %v", name, got, held)
		realize(t, client, name)
		catchUp(t, ext)
	}
	conflicts := ext.Ledger().Conflicts()
	require.Len(t, conflicts, 1)
	assert.Equal(t, "uid-big", conflicts[0].PodUID)
	assert.Empty(t, conflicts[0].Other)
}

// Scenario 6: a retried Bind of a pod whose first Bind is still running
// neither fails the first nor releases its claim on the node.
func TestRetriedBindKeepsTheNodeClaim(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	a := create(t, client, migPod("a", "4000"))
	b := create(t, client, migPod("b", "4000"))
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// The fake clientset holds its lock while a reactor runs, so the
	// first Bind is held up in a client wrapper instead.
	ext := start(t, hookedClient{client, func(name string) {
		if name == "a" {
			once.Do(func() { close(entered); <-proceed })
		}
	}}, extender.Options{})
	first := make(chan error, 1)
	go func() { first <- ext.Bind(ctx, bindArgs(a, "n1")) }()
	<-entered
	assert.ErrorIs(t, ext.Bind(ctx, bindArgs(a, "n1")), extender.ErrBindInProgress)
	assert.ErrorIs(t, ext.Bind(ctx, bindArgs(b, "n1")), extender.ErrNodeLocked, "the first call still holds the node")
	close(proceed)
	require.NoError(t, <-first)
	assert.NoError(t, ext.Bind(ctx, bindArgs(a, "n1")), "a retry after success is a no-op")
	assert.ErrorIs(t, ext.Bind(ctx, bindArgs(b, "n1")), extender.ErrNodeLocked, "a is bound and unrealized")
	assert.Empty(t, get(t, client, "b").Spec.NodeName)
}

// Scenario 7: a deleting pod keeps its slots until the device plugin may
// reclaim them (containers terminated or the grace period over).
func TestDeletingPodKeepsSlotsUntilReleased(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ext := start(t, client, extender.Options{Clock: clk})
	p := create(t, client, migPod("p", ""))
	require.NoError(t, ext.Bind(ctx, bindArgs(p, "n1")))
	realize(t, client, "p")
	deadline := clk.Now().Add(30 * time.Second).UTC().Format(time.RFC3339)
	patchStatus(t, client, "p", `{"metadata":{"deletionTimestamp":"`+deadline+`"},"status":{"phase":"Running","containerStatuses":[{"name":"main","state":{"running":{}}}]}}`)
	catchUp(t, ext)

	z := create(t, client, migPod("z", ""))
	res := ext.Filter(ctx, extender.Args{Pod: z, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames, "p's containers may still run")
	clk.SetTime(clk.Now().Add(30 * time.Second))
	res = ext.Filter(ctx, extender.Args{Pod: z, NodeNames: names("n1")})
	assert.Equal(t, []string{"n1"}, *res.NodeNames, "the grace period is over: %v", res.FailedNodes)
	require.NoError(t, ext.Bind(ctx, bindArgs(z, "n1")))
}

// hookedClient calls patched with the pod's name before each pod patch
// and binding.
type hookedClient struct {
	*fake.Clientset
	patched func(name string)
}

func (c hookedClient) CoreV1() corev1client.CoreV1Interface {
	return hookedCore{c.Clientset.CoreV1(), c.patched}
}

type hookedCore struct {
	corev1client.CoreV1Interface
	patched func(name string)
}

func (c hookedCore) Pods(namespace string) corev1client.PodInterface {
	return hookedPods{c.CoreV1Interface.Pods(namespace), c.patched}
}

type hookedPods struct {
	corev1client.PodInterface
	patched func(name string)
}

func (p hookedPods) Bind(ctx context.Context, b *corev1.Binding, opts metav1.CreateOptions) error {
	p.patched(b.Name)
	return p.PodInterface.Bind(ctx, b, opts)
}

func (p hookedPods) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Pod, error) {
	p.patched(name)
	return p.PodInterface.Patch(ctx, name, pt, data, opts, sub...)
}
