package deviceplugin_test

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	// rapid defines its -rapid.* flags in its init, so only test binaries
	// that link it accept them: linked here, go test ./... -rapid.checks=N
	// runs this package too.
	_ "pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
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

// running is a plugin started for a test.
type running struct {
	p      *deviceplugin.Plugin
	client v1beta1.DevicePluginClient
	stop   func() error
}

// start runs a plugin for node "n1" over client and hw with its socket in
// a fresh temporary directory, and connects a gRPC client to it.
func start(t *testing.T, client *fake.Clientset, hw *fakehal.Node, options ...func(*deviceplugin.Config)) *running {
	t.Helper()
	cfg := deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: t.TempDir()}
	for _, o := range options {
		o(&cfg)
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := deviceplugin.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("plugin stopped during startup: %v", err)
	case <-time.After(eventually):
		t.Fatal("plugin not ready")
	}
	conn, err := grpc.NewClient("unix://"+p.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			conn.Close()
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	t.Cleanup(func() { assert.NoError(t, stop()) })
	return &running{p: p, client: v1beta1.NewDevicePluginClient(conn), stop: stop}
}

// created hands out distinct creation times, one second apart, in the
// order pods are built: the API server's order of creation.
var created atomic.Int64

// boundPod is a MIG pod bound to n1 with the given reservation, whose
// containers request (nvidia.com/gpu limit) as many devices as the
// reservation gives each. Each pod is created a second after the last.
func boundPod(name string, allocs ...reservation.Allocation) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000+created.Add(1), 0)),
			Annotations: map[string]string{
				kube.VGPUModeAnnotation:   kube.VGPUModeMIG,
				reservation.AnnotationKey: reservation.EncodeString(allocs),
			},
		},
		Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}, {Name: "side"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	count := map[int]int64{}
	for _, a := range allocs {
		count[a.ContainerIndex]++
	}
	for c, n := range count {
		if c < len(pod.Spec.Containers) {
			pod.Spec.Containers[c].Resources.Limits = corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}
		}
	}
	return pod
}

func gpuOf(t *testing.T, hw *fakehal.Node, i int) capability.DeviceInfo {
	t.Helper()
	d, ok := hw.Device(i)
	require.True(t, ok)
	return d
}

func allocate(ctx context.Context, c v1beta1.DevicePluginClient, ids ...string) (*v1beta1.AllocateResponse, error) {
	return c.Allocate(ctx, &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{{DevicesIds: ids}}})
}

func getPod(t *testing.T, client *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

func TestPluginOverGRPC(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	uuid := gpuOf(t, hw, 1).UUID
	c0 := reservation.Allocation{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: uuid, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}
	c1a := reservation.Allocation{ContainerIndex: 1, DeviceIndex: 0, GPUUUID: uuid, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}
	c1b := reservation.Allocation{ContainerIndex: 1, DeviceIndex: 1, GPUUUID: uuid, Profile: "1g.5gb", Placement: capability.Placement{Start: 1, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("p", c0, c1a, c1b))
	r := start(t, client, hw)
	ctx := context.Background()

	// Registration published.
	n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	require.NoError(t, err)
	gpus, err := kube.NodeGPUs(n)
	require.NoError(t, err)
	assert.Len(t, gpus, 2)

	opts, err := r.client.GetDevicePluginOptions(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	assert.False(t, opts.PreStartRequired)

	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	list, err := stream.Recv()
	require.NoError(t, err)
	assert.Len(t, list.Devices, 14, "7 instances per A100")

	// Container 0 (one device), then container 1 (two devices).
	resp, err := allocate(ctx, r.client, list.Devices[0].ID)
	require.NoError(t, err)
	mig0 := resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
	assert.Regexp(t, `^MIG-[0-9a-f-]{36}$`, mig0)

	resp, err = allocate(ctx, r.client, list.Devices[1].ID, list.Devices[2].ID)
	require.NoError(t, err)
	migs := resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
	assert.Regexp(t, `^MIG-[0-9a-f-]{36},MIG-[0-9a-f-]{36}$`, migs)

	allocs, err := kube.PodAllocations(getPod(t, client, "p"))
	require.NoError(t, err)
	for _, a := range allocs {
		id, ok := a.Runtime()
		require.True(t, ok, "entry %d/%d has its runtime identity", a.ContainerIndex, a.DeviceIndex)
		if a.ContainerIndex == 0 {
			assert.Equal(t, mig0, id.MIGUUID)
		} else {
			assert.Contains(t, migs, id.MIGUUID)
		}
	}
	assert.Len(t, hw.Snapshot(), 3)
	require.NoError(t, hw.Check())

	// Nothing left to allocate.
	_, err = allocate(ctx, r.client, list.Devices[3].ID)
	assert.Equal(t, codes.NotFound, status.Code(err))
}

func TestPluginRefusesWhileMIGManagerOwnsTheNode(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	leftover, err := hw.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 0, Size: 1})
	require.NoError(t, err)
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "n1", Labels: map[string]string{kube.MIGConfigLabel: "all-1g.5gb"},
	}})
	p, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: t.TempDir()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	err = p.Run(ctx)
	require.ErrorIs(t, err, kube.ErrMIGManagerOwnsNode)
	assert.Equal(t, []any{leftover.GIID}, giIDs(hw), "no instance was touched")
}

func giIDs(hw *fakehal.Node) []any {
	var out []any
	for _, in := range hw.Snapshot() {
		out = append(out, in.GIID)
	}
	return out
}

// A pod that vanishes from the listing without ever being seen deleting
// (a missed event) is reclaimed once the manager's grace has passed; with
// the grace disabled, at the next pass.
func TestPluginReclaimsVanishedPod(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	uuid := gpuOf(t, hw, 0).UUID
	a := reservation.Allocation{GPUUUID: uuid, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("p", a))
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.Manager.AbsentPodGrace = -1 })
	ctx := context.Background()
	_, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	require.Len(t, hw.Snapshot(), 1)

	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return len(hw.Snapshot()) == 0 }, eventually, time.Millisecond)
	assert.Positive(t, r.p.Reconciles())
}

// An invalid reservation on any active pod blocks destructive
// reconciliation: nothing is reclaimed until it is fixed.
func TestPluginKeepsInstancesWhileARecordIsInvalid(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	uuid := gpuOf(t, hw, 0).UUID
	a := reservation.Allocation{GPUUUID: uuid, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	admitted := boundPod("p", a) // created first: the kubelet admits it first
	// broken requests a device, so what its unreadable record claims may
	// be its own (a pod that requests none owns nothing).
	broken := boundPod("broken", reservation.Allocation{GPUUUID: uuid, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}})
	broken.Annotations[reservation.AnnotationKey] = `[{"containerIndex":0}]`
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, admitted, broken)
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.Manager.AbsentPodGrace = -1 })
	ctx := context.Background()
	_, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)

	before := r.p.Reconciles()
	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return r.p.Reconciles() > before }, eventually, time.Millisecond)
	assert.Len(t, hw.Snapshot(), 1, "not authorised: the instance stays")

	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "broken", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return len(hw.Snapshot()) == 0 }, eventually, time.Millisecond)
}

// A GPU with MIG disabled is left out of the registration and the
// advertised devices; the others are served.
func TestPluginSkipsGPUsWithoutMIG(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	require.NoError(t, hw.ForceMIGMode(0, capability.MIGDisabled))
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	r := start(t, client, hw)
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	gpus, err := kube.NodeGPUs(n)
	require.NoError(t, err)
	require.Len(t, gpus, 1)
	assert.Equal(t, gpuOf(t, hw, 1).UUID, gpus[0].UUID)

	stream, err := r.client.ListAndWatch(context.Background(), &v1beta1.Empty{})
	require.NoError(t, err)
	list, err := stream.Recv()
	require.NoError(t, err)
	assert.Len(t, list.Devices, 7)
}

// fakeKubelet records device plugin registrations.
type fakeKubelet struct {
	v1beta1.UnimplementedRegistrationServer
	got    chan *v1beta1.RegisterRequest
	refuse atomic.Bool // answer Unavailable, as a kubelet still starting
}

func (k *fakeKubelet) Register(_ context.Context, r *v1beta1.RegisterRequest) (*v1beta1.Empty, error) {
	if k.refuse.Load() {
		return nil, status.Error(codes.Unavailable, "kubelet starting")
	}
	k.got <- r
	return &v1beta1.Empty{}, nil
}

func TestPluginRegistersWithKubelet(t *testing.T) {
	dir := t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	require.NoError(t, err)
	kubelet := &fakeKubelet{got: make(chan *v1beta1.RegisterRequest, 1)}
	srv := grpc.NewServer()
	v1beta1.RegisterRegistrationServer(srv, kubelet)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	r := start(t, client, fakehal.MustNew(fakehal.Options{}), func(c *deviceplugin.Config) {
		c.SocketDir = dir
		c.KubeletSocket = filepath.Join(dir, "kubelet.sock")
		c.SocketCheckInterval = time.Millisecond
	})
	registered := func() {
		t.Helper()
		select {
		case r := <-kubelet.got:
			assert.Equal(t, v1beta1.Version, r.Version)
			assert.Equal(t, "dynmig-mig.sock", r.Endpoint)
			assert.Equal(t, "nvidia.com/gpu", r.ResourceName)
		case <-time.After(eventually):
			t.Fatal("no registration")
		}
	}
	registered()
	assert.True(t, r.p.Serving())

	// A restarting kubelet clears the plugin directory and refuses
	// registrations for a while: the plugin is not serving until it has
	// served a new socket and the kubelet accepted it.
	kubelet.refuse.Store(true)
	require.NoError(t, os.Remove(r.p.SocketPath()))
	require.Eventually(t, func() bool { return !r.p.Serving() }, eventually, time.Millisecond, "serving while unregistered")
	kubelet.refuse.Store(false)
	registered()
	require.Eventually(t, r.p.Serving, eventually, time.Millisecond, "not serving once registered again")
	_, err = r.client.GetDevicePluginOptions(context.Background(), &v1beta1.Empty{})
	assert.NoError(t, err, "the new socket is served")
}

// MIG Manager taking the node over after startup makes Allocate refuse
// before touching the hardware.
func TestAllocateRefusesOnceMIGManagerAppears(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	a := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("p", a))
	r := start(t, client, hw)
	mm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "nvidia-mig-manager-7xk2p", Labels: map[string]string{"app": "nvidia-mig-manager"}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
	}
	_, err := client.CoreV1().Pods(mm.Namespace).Create(context.Background(), mm, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = allocate(context.Background(), r.client, "id")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "nvidia-mig-manager-7xk2p")
	assert.Empty(t, hw.Snapshot())
}

// Concurrent Allocate calls never pick the same container: selection is
// serialised, realization is not.
func TestConcurrentAllocate(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	names := []string{"p0", "p1", "p2", "p3"}
	for i, name := range names {
		a := reservation.Allocation{GPUUUID: gpuOf(t, hw, i%2).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: uint32(i / 2), Size: 1}}
		objs = append(objs, boundPod(name, a))
	}
	client := kubetest.NewClientset(objs...)
	r := start(t, client, hw)
	var wg sync.WaitGroup
	got := make([]string, len(names))
	for i := range names {
		wg.Go(func() {
			resp, err := allocate(context.Background(), r.client, "id")
			if assert.NoError(t, err) {
				got[i] = resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
			}
		})
	}
	wg.Wait()
	var stored []string
	for _, name := range names {
		allocs, err := kube.PodAllocations(getPod(t, client, name))
		require.NoError(t, err)
		id, ok := allocs[0].Runtime()
		require.True(t, ok, "pod %s realized", name)
		stored = append(stored, id.MIGUUID)
	}
	assert.ElementsMatch(t, got, stored, "each call got a different pod's device")
	assert.Len(t, hw.Snapshot(), 4)
	require.NoError(t, hw.Check())
}
