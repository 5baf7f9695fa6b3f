package extender_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

func TestMain(m *testing.M) {
	flag.Parse()
	eventually = testwait.Bound()
	goleak.VerifyTestMain(m)
}

// eventually bounds a wait for an event: it ends only shortly before the
// binary's -timeout, so it catches a hung test and never fails a slow one.
var eventually time.Duration

// cluster is a fake API server with node n1 (one registered A100) and n2
// (no registration), which binds pods as the real one does.
func cluster(t testingT) *fake.Clientset {
	t.Helper()
	client := kubetest.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	)
	hw := fakehal.MustNew(fakehal.Options{})
	gpus, _, err := capability.Discover(context.Background(), hw, capability.DefaultAllowlist())
	require.NoError(t, err)
	_, err = kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(context.Background(), gpus)
	require.NoError(t, err)
	return client
}

// testingT is what cluster needs of *testing.T and *rapid.T.
type testingT interface {
	require.TestingT
	Helper()
}

func migPod(name string, gpumem string) *corev1.Pod { return migPodN(name, 1, gpumem) }

// migPodN is a MIG pod whose one container requests n devices.
func migPodN(name string, n int64, gpumem string) *corev1.Pod {
	limits := corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}
	if gpumem != "" {
		limits[kube.ResourceGPUMem] = resource.MustParse(gpumem)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}
}

func create(t *testing.T, client *fake.Clientset, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return out
}

func get(t *testing.T, client *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

// start runs an extender over client until the test ends, synced.
func start(t *testing.T, client kubernetes.Interface, opts extender.Options) *extender.Extender {
	t.Helper()
	ext := extender.New(client, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ext.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	require.NoError(t, ext.Sync(ctx))
	return ext
}

// catchUp waits until the extender has observed every write made so far.
func catchUp(t *testing.T, ext *extender.Extender) {
	t.Helper()
	require.NoError(t, ext.Sync(context.Background()))
}

// podEvents waits until n Events (events.k8s.io/v1, written
// asynchronously by the recorder) exist in namespace default and returns
// them.
func podEvents(t *testing.T, client *fake.Clientset, n int) []eventsv1.Event {
	t.Helper()
	var items []eventsv1.Event
	require.Eventually(t, func() bool {
		list, err := client.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		items = list.Items
		return len(items) >= n
	}, eventually, time.Millisecond)
	require.Len(t, items, n)
	return items
}

// bumped returns the resourceVersion after rv, for updates through the
// fake's tracker, which keeps the version the caller sends.
func bumped(rv string) string {
	n, _ := strconv.Atoi(rv)
	return strconv.Itoa(n + 1)
}

func bindArgs(pod *corev1.Pod, node string) extender.BindingArgs {
	return extender.BindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: node}
}

func names(n ...string) *[]string { return &n }

func TestFilterPrioritizeBind(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ext := start(t, client, extender.Options{Clock: clk})
	pod := create(t, client, migPod("a", "9000"))

	res := ext.Filter(ctx, extender.Args{Pod: pod, NodeNames: names("n1", "n2")})
	require.Empty(t, res.Error)
	assert.Equal(t, []string{"n1"}, *res.NodeNames)
	assert.Contains(t, res.FailedNodes, "n2")

	prio, err := ext.Prioritize(ctx, extender.Args{Pod: pod, NodeNames: names("n1", "n2")})
	require.NoError(t, err)
	require.Len(t, prio, 2)
	assert.Zero(t, prio[1].Score)
	assert.LessOrEqual(t, prio[0].Score, int64(extender.MaxExtenderPriority))

	require.NoError(t, ext.Bind(ctx, bindArgs(pod, "n1")))
	bound := get(t, client, "a")
	assert.Equal(t, "n1", bound.Spec.NodeName)
	assert.Equal(t, "1000", bound.Annotations[kube.BindTimeAnnotation])
	allocs, err := kube.PodAllocations(bound)
	require.NoError(t, err)
	require.Len(t, allocs, 1)
	assert.Equal(t, "2g.10gb", allocs[0].Profile, "the smallest profile with 9000 MiB")
	rs, assumed, ok := ext.Ledger().Pod("uid-a")
	require.True(t, ok)
	assert.False(t, assumed, "confirmed after binding")
	assert.Len(t, rs, 1)

	// The node is locked until the device plugin realized the pod.
	other := create(t, client, migPod("b", "5000"))
	res = ext.Filter(ctx, extender.Args{Pod: other, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames)
	assert.Contains(t, res.FailedNodes["n1"], "default/a")

	realized := allocs[0].WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 3})
	_, err = kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(ctx, bound, []reservation.Allocation{realized})
	require.NoError(t, err)
	catchUp(t, ext)
	res = ext.Filter(ctx, extender.Args{Pod: other, NodeNames: names("n1")})
	assert.Equal(t, []string{"n1"}, *res.NodeNames)

	// A stuck pod is reported after the timeout; it still blocks pods the
	// device plugin would confuse with it (same device count), not others.
	third := create(t, client, migPod("c", "5000"))
	require.NoError(t, ext.Bind(ctx, bindArgs(other, "n1")))
	res = ext.Filter(ctx, extender.Args{Pod: third, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames)
	clk.SetTime(clk.Now().Add(extender.DefaultLockTimeout))
	res = ext.Filter(ctx, extender.Args{Pod: third, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames, "one device, like the stuck pod's container")
	assert.Equal(t, 1.0, testutil.ToFloat64(ext.Collector()))
	events := podEvents(t, client, 1)
	assert.Equal(t, extender.StaleClaimReason, events[0].Reason)
	assert.Equal(t, "b", events[0].Regarding.Name)
	assert.Equal(t, other.UID, events[0].Regarding.UID, "a reference kubectl describe finds")
	two := create(t, client, migPodN("d", 2, "4000"))
	res = ext.Filter(ctx, extender.Args{Pod: two, NodeNames: names("n1")})
	assert.Equal(t, []string{"n1"}, *res.NodeNames, "two devices: the device plugin tells it apart from the stuck pod: %v", res.FailedNodes)
	assert.Equal(t, 1.0, testutil.ToFloat64(ext.Collector()), "reported once")

	// Deleting a pod frees its slots in the ledger once observed.
	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}))
	catchUp(t, ext)
	_, _, ok = ext.Ledger().Pod("uid-a")
	assert.False(t, ok)
}

func TestFilterMalformedRequest(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pod := migPod("bad", "")
	pod.Spec.Containers[0].Resources.Limits[kube.ResourceGPUMemPercentage] = resource.MustParse("250")
	res := ext.Filter(context.Background(), extender.Args{Pod: pod, NodeNames: names("n1", "n2")})
	assert.Empty(t, res.Error)
	assert.Empty(t, *res.NodeNames)
	assert.Contains(t, res.FailedAndUnresolvableNodes["n1"], "nvidia.com/gpumem-percentage")
	assert.Len(t, res.FailedAndUnresolvableNodes, 2)
}

func TestFilterNonMIGPod(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pod := create(t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain", UID: "u"}})
	res := ext.Filter(context.Background(), extender.Args{Pod: pod, NodeNames: names("n1", "n2")})
	assert.Equal(t, []string{"n1", "n2"}, *res.NodeNames)
	require.NoError(t, ext.Bind(context.Background(), bindArgs(pod, "n2")))
	assert.Equal(t, "n2", get(t, client, "plain").Spec.NodeName)
	assert.NotContains(t, get(t, client, "plain").Annotations, reservation.AnnotationKey)
}

// A pod that asks for no MIG device but carries a reservation record
// (copied from another pod, say) is not bound: the device plugin believes
// records that arrive with this scheduler's binding.
func TestBindRefusesForeignRecord(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	record := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-00000000-0000-0000-0000-000000000001","profile":"1g.5gb","placement":{"start":0,"size":1}}]`
	pod := create(t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "copy", UID: "u",
		Annotations: map[string]string{reservation.AnnotationKey: record}}})
	err := ext.Bind(context.Background(), bindArgs(pod, "n1"))
	require.ErrorIs(t, err, extender.ErrForeignRecord)
	assert.Empty(t, get(t, client, "copy").Spec.NodeName)
}

// Two binds racing for the last whole GPU: the ledger reserves before
// binding, so exactly one wins.
func TestConcurrentBindsNeverShareSlots(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pods := []*corev1.Pod{create(t, client, migPod("x", "")), create(t, client, migPod("y", ""))}
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { errs[i] = ext.Bind(context.Background(), bindArgs(p, "n1")) })
	}
	wg.Wait()
	assert.True(t, (errs[0] == nil) != (errs[1] == nil), "exactly one bind succeeds: %v", errs)
	assert.Empty(t, ext.Ledger().Conflicts())
}

func TestBindFailuresForget(t *testing.T) {
	tests := []struct {
		name    string
		reactor k8stesting.ReactionFunc
		verb    string
	}{
		{name: "binding conflict", verb: "create", reactor: func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() == "binding" {
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods/binding"}, "a", errors.New("changed"))
			}
			return false, nil, nil
		}},
		{name: "binding fails", verb: "create", reactor: func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() == "binding" {
				return true, nil, apierrors.NewInternalError(errors.New("etcd"))
			}
			return false, nil, nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := cluster(t)
			ext := start(t, client, extender.Options{})
			pod := create(t, client, migPod("a", "9000"))
			client.PrependReactor(tt.verb, "pods", tt.reactor)
			require.Error(t, ext.Bind(context.Background(), bindArgs(pod, "n1")))
			_, _, ok := ext.Ledger().Pod("uid-a")
			assert.False(t, ok, "the assumption is forgotten")
			after := get(t, client, "a")
			assert.Empty(t, after.Spec.NodeName)
			assert.NotContains(t, after.Annotations, reservation.AnnotationKey, "no reservation is left on an unbound pod")
			// The slots are free again.
			catchUp(t, ext)
			_, err := ext.Ledger().Evaluate("n1", mustRequest(t, migPod("z", "")))
			assert.NoError(t, err)
		})
	}
}

func mustRequest(t *testing.T, pod *corev1.Pod) *placement.Request {
	t.Helper()
	r, err := kube.ParseRequest(pod)
	require.NoError(t, err)
	return &r
}

func TestHandler(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	srv := httptest.NewServer(ext.Handler())
	defer srv.Close()
	pod := create(t, client, migPod("a", "9000"))

	post := func(path string, body, out any) {
		t.Helper()
		b, err := json.Marshal(body)
		require.NoError(t, err)
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	var fr extender.FilterResult
	post("/filter", extender.Args{Pod: pod, NodeNames: names("n1", "n2")}, &fr)
	assert.Equal(t, []string{"n1"}, *fr.NodeNames)
	var hp []extender.HostPriority
	post("/prioritize", extender.Args{Pod: pod, NodeNames: names("n1")}, &hp)
	assert.Len(t, hp, 1)
	var br extender.BindingResult
	post("/bind", bindArgs(pod, "n1"), &br)
	assert.Empty(t, br.Error)
	assert.Equal(t, "n1", get(t, client, "a").Spec.NodeName)

	resp, err := http.Post(srv.URL+"/filter", "application/json", bytes.NewReader([]byte("{")))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// Without nodeCacheCapable the scheduler sends whole nodes and expects
// whole nodes back.
func TestFilterNodeObjects(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pod := create(t, client, migPod("a", "9000"))
	nodes := &corev1.NodeList{Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "n2"}}}}
	res := ext.Filter(context.Background(), extender.Args{Pod: pod, Nodes: nodes})
	require.NotNil(t, res.Nodes)
	require.Len(t, res.Nodes.Items, 1)
	assert.Equal(t, "n1", res.Nodes.Items[0].Name)
	assert.Contains(t, res.FailedNodes, "n2")
}

// Bind enforces the node lock Filter applies: a second MIG pod is refused
// while the first is bound but unrealized, even when the scheduler did not
// filter in between, and nothing is written for it.
func TestBindRefusesLockedNode(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	a := create(t, client, migPod("a", "5000"))
	b := create(t, client, migPod("b", "5000"))
	require.NoError(t, ext.Bind(ctx, bindArgs(a, "n1")))

	err := ext.Bind(ctx, bindArgs(b, "n1"))
	require.ErrorIs(t, err, extender.ErrNodeLocked)
	after := get(t, client, "b")
	assert.Empty(t, after.Spec.NodeName)
	assert.NotContains(t, after.Annotations, reservation.AnnotationKey)
	_, _, ok := ext.Ledger().Pod("uid-b")
	assert.False(t, ok, "nothing is reserved for a refused pod")
}

// Two MIG binds racing for one node that has room for both: the second to
// claim the node is refused, so at most one unrealized pod is ever bound
// there.
func TestConcurrentBindsLockTheNode(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pods := []*corev1.Pod{create(t, client, migPod("x", "5000")), create(t, client, migPod("y", "5000"))}
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { errs[i] = ext.Bind(context.Background(), bindArgs(p, "n1")) })
	}
	wg.Wait()
	require.True(t, (errs[0] == nil) != (errs[1] == nil), "exactly one bind succeeds: %v", errs)
	for _, err := range errs {
		if err != nil {
			assert.ErrorIs(t, err, extender.ErrNodeLocked)
		}
	}
}

// A registration that is briefly unusable (a device plugin mid-restart, a
// bad write) takes the node out of scheduling, but the ledger must not
// forget the pods running there: when the registration is back, their
// slots are still taken.
func TestUnusableRegistrationKeepsRunningPods(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	a := create(t, client, migPod("a", ""))
	require.NoError(t, ext.Bind(ctx, bindArgs(a, "n1")))
	allocs, err := kube.PodAllocations(get(t, client, "a"))
	require.NoError(t, err)
	realized := allocs[0].WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 0})
	_, err = kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(ctx, get(t, client, "a"), []reservation.Allocation{realized})
	require.NoError(t, err)
	require.NoError(t, ext.Sync(ctx)) // the ledger has seen pod a's current record

	n1, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	require.NoError(t, err)
	good := n1.Annotations[capability.NodeRegisterAnnotation]
	setRegistration := func(v string) {
		t.Helper()
		n1.Annotations[capability.NodeRegisterAnnotation] = v
		n1.ResourceVersion = bumped(n1.ResourceVersion) // as a real API server would
		_, err := client.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.NoError(t, ext.Sync(ctx))
	}
	setRegistration("[{") // malformed
	b := create(t, client, migPod("b", ""))
	res := ext.Filter(ctx, extender.Args{Pod: b, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames, "no MIG pods for a node without a usable registration")

	setRegistration(good)
	_, _, ok := ext.Ledger().Pod("uid-a")
	assert.True(t, ok, "the running pod's reservation survived")
	res = ext.Filter(ctx, extender.Args{Pod: b, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames, "the whole GPU is still taken by pod a")
	assert.Empty(t, ext.Ledger().Conflicts())
}
