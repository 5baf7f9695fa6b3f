package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// unhealthyIDs counts the Unhealthy device IDs of each GPU UUID.
func unhealthyIDs(list *v1beta1.ListAndWatchResponse) map[string]int {
	out := map[string]int{}
	for _, d := range list.Devices {
		uuid, _, _ := strings.Cut(d.ID, "::")
		if d.Health == v1beta1.Unhealthy {
			out[uuid]++
		}
	}
	return out
}

// registeredHealth reads the node registration as the scheduler does and
// returns each GPU's Unhealthy flag by index.
func registeredHealth(t *testing.T, client *fake.Clientset) map[int]bool {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	gpus, err := kube.NodeGPUs(n)
	require.NoError(t, err)
	out := map[int]bool{}
	for _, g := range gpus {
		out[g.Index] = g.Unhealthy
	}
	return out
}

// nodeEvents returns the reasons of the Events (events.k8s.io/v1)
// recorded on node n1 by its UID, as kubectl describe node finds them.
func nodeEvents(t *testing.T, client *fake.Clientset) []string {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	list, err := client.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == "n1" && e.Regarding.UID == node.UID {
			out = append(out, e.Reason)
		}
	}
	return out
}

// TestPluginGPUHealth drives fakehal-injected Xids through a running plugin:
// ListAndWatch, the node registration, Events, the gauge and Allocate all
// follow the GPU's health, and nothing that runs is destroyed.
func TestPluginGPUHealth(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpu0, gpu1 := gpuOf(t, hw, 0).UUID, gpuOf(t, hw, 1).UUID
	running := boundPod("running", reservation.Allocation{GPUUUID: gpu1, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid-n1"}}, running)
	r := start(t, client, hw)
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()

	_, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	require.Len(t, hw.Snapshot(), 1)

	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	list, err := stream.Recv()
	require.NoError(t, err)
	require.Empty(t, unhealthyIDs(list))
	assert.Equal(t, map[int]bool{0: false, 1: false}, registeredHealth(t, client))

	// An application's Xid changes nothing; a critical one on GPU 1 marks
	// every device ID of GPU 1 Unhealthy.
	require.NoError(t, hw.InjectXid(1, "", 13))
	require.NoError(t, hw.InjectXid(1, "", 79))
	list, err = stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, map[string]int{gpu1: 7}, unhealthyIDs(list))
	require.Eventually(t, func() bool { return registeredHealth(t, client)[1] }, eventually, time.Millisecond,
		"the registration publishes GPU 1 unhealthy (health key absent)")
	assert.False(t, registeredHealth(t, client)[0])
	assert.Eventually(t, func() bool { return slices.Contains(nodeEvents(t, client), deviceplugin.ReasonGPUUnhealthy) }, eventually, time.Millisecond)
	assert.Len(t, hw.Snapshot(), 1, "the running pod keeps its instance")

	// A pod reserved on GPU 1 before the failure is refused: no new
	// instance on an unhealthy GPU.
	late := boundPod("late", reservation.Allocation{GPUUUID: gpu1, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}})
	_, err = client.CoreV1().Pods("default").Create(ctx, late, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = allocate(ctx, r.client, "id")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	assert.Len(t, hw.Snapshot(), 1, "nothing created on the unhealthy GPU")

	// An Xid on one MIG device of healthy GPU 0 takes one of its IDs out.
	inst, err := hw.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 0, Size: 1})
	require.NoError(t, err)
	require.NoError(t, hw.InjectXid(0, inst.ComputeInstances[0].MIGUUID, 94))
	list, err = stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, map[string]int{gpu0: 1, gpu1: 7}, unhealthyIDs(list))
	assert.False(t, registeredHealth(t, client)[0], "a MIG device's failure leaves its GPU schedulable")
	assert.Eventually(t, func() bool { return slices.Contains(nodeEvents(t, client), deviceplugin.ReasonMIGDeviceUnhealthy) }, eventually, time.Millisecond)

	// The gauge follows.
	assert.Equal(t, 4, testutil.CollectAndCount(r.p.HealthCollector()))
	assert.NoError(t, testutil.CollectAndCompare(r.p.HealthCollector(), strings.NewReader(`
# HELP dynmig_gpu_healthy 1 when the GPU takes new MIG instances, 0 when the device plugin reports it unhealthy.
# TYPE dynmig_gpu_healthy gauge
dynmig_gpu_healthy{gpu="0",node="n1",uuid="`+gpu0+`"} 1
dynmig_gpu_healthy{gpu="1",node="n1",uuid="`+gpu1+`"} 0
`), "dynmig_gpu_healthy"))

	// Recovery: GPU 1 is healthy again everywhere and takes the late pod.
	require.NoError(t, hw.Recover(1))
	list, err = stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, map[string]int{gpu0: 1}, unhealthyIDs(list))
	require.Eventually(t, func() bool { return !registeredHealth(t, client)[1] }, eventually, time.Millisecond)
	assert.Eventually(t, func() bool { return slices.Contains(nodeEvents(t, client), deviceplugin.ReasonGPUHealthy) }, eventually, time.Millisecond)
	_, err = allocate(ctx, r.client, "id")
	require.NoError(t, err)
	assert.Len(t, hw.Snapshot(), 3)
	require.NoError(t, hw.Check())
}

// A critical Xid on GPU 0 turns its device IDs Unhealthy in ListAndWatch
// and its gauge to 0; the application Xid 31 before it changes nothing.
func ExamplePlugin_HealthCollector() {
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	dir, err := os.MkdirTemp("", "plugin")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	p, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-p.Ready()
	conn, err := grpc.NewClient("unix://"+p.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	stream, err := v1beta1.NewDevicePluginClient(conn).ListAndWatch(ctx, &v1beta1.Empty{})
	if err != nil {
		fmt.Println(err)
		return
	}
	show := func() {
		list, err := stream.Recv()
		if err != nil {
			fmt.Println(err)
			return
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(p.HealthCollector())
		families, _ := reg.Gather()
		bad := 0
		for _, d := range list.Devices {
			if d.Health == v1beta1.Unhealthy {
				bad++
			}
		}
		for _, f := range families {
			if f.GetName() == "dynmig_gpu_healthy" {
				fmt.Printf("unhealthy IDs %d of %d, dynmig_gpu_healthy %v\n", bad, len(list.Devices), f.GetMetric()[0].GetGauge().GetValue())
			}
		}
	}
	show()
	_ = hw.InjectXid(0, "", 31) // GPU memory page fault: the application's
	_ = hw.InjectXid(0, "", 79) // fallen off the bus
	show()
	// Output:
	// unhealthy IDs 0 of 7, dynmig_gpu_healthy 1
	// unhealthy IDs 7 of 7, dynmig_gpu_healthy 0
}

// A MIG device marked unhealthy is forgotten once its instance is gone
// (its pod ended and the instance was reclaimed), so the GPU's device IDs
// all come back.
func TestPluginForgetsVanishedUnhealthyMIGDevice(t *testing.T) {
	t.Cleanup(deviceplugin.SetPruneInterval(time.Millisecond)) // registered first: restored after the plugin stops
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	r := start(t, client, hw)
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	inst, err := hw.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 0, Size: 1})
	require.NoError(t, err)
	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)

	require.NoError(t, hw.InjectXid(0, inst.ComputeInstances[0].MIGUUID, 94))
	list, err := stream.Recv()
	require.NoError(t, err)
	gpu := gpuOf(t, hw, 0).UUID
	assert.Equal(t, map[string]int{gpu: 1}, unhealthyIDs(list))
	assert.Len(t, hw.Snapshot(), 1, "the failed MIG device stays while in use")

	require.NoError(t, hw.DestroyComputeInstance(ctx, 0, inst.GIID, inst.ComputeInstances[0].ID))
	require.NoError(t, hw.DestroyGPUInstance(ctx, 0, inst.GIID))
	list, err = stream.Recv()
	require.NoError(t, err)
	assert.Empty(t, unhealthyIDs(list))
}

// noEventSet is fakehal whose first health watch cannot be opened (as
// when NVML cannot create an event set); the second attempt waits for
// release and then opens.
type noEventSet struct {
	*fakehal.Node
	mu       sync.Mutex
	attempts int
	release  chan struct{}
}

func (h *noEventSet) WatchHealth(ctx context.Context, checks realize.HealthChecks) (realize.HealthWatch, error) {
	h.mu.Lock()
	h.attempts++
	n := h.attempts
	h.mu.Unlock()
	if n == 1 {
		return nil, &realize.HardwareError{Op: "EventSetCreate", GPU: -1, Cause: errors.New("test: no event set")}
	}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Node.WatchHealth(ctx, checks)
}

// A GPU whose health cannot be watched is reported unmonitored, not
// healthy: its device IDs are Unhealthy, the registration marks it and an
// Event says why; the watch is retried and, once it opens, the GPUs are
// healthy and watched again (issue 29 point 5).
func TestPluginUnmonitoredUntilWatchOpens(t *testing.T) {
	hw := &noEventSet{Node: fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)}), release: make(chan struct{})}
	gpu0, gpu1 := gpuOf(t, hw.Node, 0).UUID, gpuOf(t, hw.Node, 1).UUID
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	r := start(t, client, hw.Node, func(c *deviceplugin.Config) { c.Hardware = hw })
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	defer close(hw.release) // before the plugin stops: registered after start's cleanup
	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	for {
		list, err := stream.Recv()
		require.NoError(t, err)
		if len(unhealthyIDs(list)) == 2 {
			assert.Equal(t, map[string]int{gpu0: 7, gpu1: 7}, unhealthyIDs(list))
			break
		}
	}
	require.Eventually(t, func() bool { h := registeredHealth(t, client); return h[0] && h[1] }, eventually, time.Millisecond)
	assert.Eventually(t, func() bool { return slices.Contains(nodeEvents(t, client), deviceplugin.ReasonGPUUnmonitored) }, eventually, time.Millisecond)

	hw.release <- struct{}{} // the retry opens the watch
	for {
		list, err := stream.Recv()
		require.NoError(t, err)
		if len(unhealthyIDs(list)) == 0 {
			break
		}
	}
	require.Eventually(t, func() bool { h := registeredHealth(t, client); return !h[0] && !h[1] }, eventually, time.Millisecond)
	assert.Eventually(t, func() bool { return slices.Contains(nodeEvents(t, client), deviceplugin.ReasonGPUMonitored) }, eventually, time.Millisecond)
	require.NoError(t, hw.InjectXid(1, "", 79))
	list, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, map[string]int{gpu1: 7}, unhealthyIDs(list))
}

// Config.HealthChecks reach the backend's watch: a disabled Xid changes
// nothing, another one marks the GPU.
func TestPluginHealthChecks(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	checks, err := realize.ParseHealthChecks("79", "")
	require.NoError(t, err)
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.HealthChecks = checks })
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, hw.InjectXid(0, "", 79)) // disabled
	require.NoError(t, hw.InjectXid(0, "", 48))
	list, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, map[string]int{gpuOf(t, hw, 0).UUID: 7}, unhealthyIDs(list))
	why, _ := r.p.GPUHealth(0)
	assert.Equal(t, uint64(48), why.Xid, "the disabled Xid 79 is not the cause")
}
