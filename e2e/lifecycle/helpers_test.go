package lifecycle_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// testNamespace holds the test's workload pods.
const testNamespace = "e2e"

// env is one running system: control plane, the deployed RBAC, a fake
// kubelet node over fakehal hardware, the device plugin and the scheduler
// (sched), each component with its own identity.
type env struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	admin  kubernetes.Interface
	node   *cluster.Node
	hw     *fakehal.Node
	plugin *cluster.Plugin
	sched  scheduling

	schedulerSA, pluginSA  saRef
	schedulerCfg, pluginCf *rest.Config
	schedulerName          string
}

type saRef struct{ Namespace, Name string }

func (s saRef) String() string { return s.Namespace + "/" + s.Name }

// logger writes component logs to stderr, which go test shows for failing
// packages only.
func logger(component string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", component)
}

// deployManifests applies deploy/namespace.yaml and deploy/rbac/*.yaml and
// returns the ServiceAccounts of the scheduler (from
// deploy/rbac/scheduler.yaml) and of the device plugin (from
// deploy/rbac/device-plugin.yaml).
func deployManifests(t *testing.T, ctx context.Context, c *cluster.Cluster) (schedulerSA, pluginSA saRef) {
	t.Helper()
	files := []string{cluster.DeployPath("namespace.yaml")}
	rbac, err := filepath.Glob(cluster.DeployPath("rbac", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The namespace first, then the RBAC files in name order; a policy
	// file may name the ServiceAccounts, so it goes last.
	slices.SortFunc(rbac, func(a, b string) int {
		pa, pb := strings.Contains(a, "policy"), strings.Contains(b, "policy")
		if pa != pb {
			if pa {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	files = append(files, rbac...)
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("deploy manifest: %v", err)
		}
	}
	if _, err := c.ApplyManifests(ctx, files...); err != nil {
		t.Fatalf("apply deploy manifests: %v", err)
	}
	find := func(file string) saRef {
		objs, err := cluster.ReadManifests(cluster.DeployPath("rbac", file))
		if err != nil {
			t.Fatal(err)
		}
		var sas []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "ServiceAccount" {
				sas = append(sas, o)
			}
		}
		if len(sas) != 1 {
			t.Fatalf("deploy/rbac/%s: got %d ServiceAccounts, want 1", file, len(sas))
		}
		return saRef{Namespace: sas[0].GetNamespace(), Name: sas[0].GetName()}
	}
	return find("scheduler.yaml"), find("device-plugin.yaml")
}

// startEnv starts the whole system on one node with two A100-40GB GPUs,
// scheduled by sched.
func startEnv(t *testing.T, sched scheduling) *env {
	t.Helper()
	ctx := cluster.TestContext(t, 10*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	e := &env{t: t, ctx: ctx, c: c, admin: c.Admin(), sched: sched}
	e.schedulerSA, e.pluginSA = deployManifests(t, ctx, c)
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc, err := cluster.ReadSchedulerConfig(sched.configFile())
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.SchedulerNames) > 0 {
		e.schedulerName = sc.SchedulerNames[0]
	}

	// The scheduler pod's ServiceAccount (deploy/rbac/scheduler.yaml) is
	// shared by kube-scheduler and the extender sidecar, as deployed; the
	// plugin scheduler runs under it too.
	var errCfg error
	if e.schedulerCfg, errCfg = c.ServiceAccountConfig(ctx, e.schedulerSA.Namespace, e.schedulerSA.Name, cluster.TokenOptions{}); errCfg != nil {
		t.Fatal(errCfg)
	}

	e.hw = fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	if e.node, err = c.StartNode(t, "gpu-node-1", cluster.NodeOptions{}); err != nil {
		t.Fatal(err)
	}
	// The device plugin runs as a DaemonSet pod on the node, and its token
	// is bound to that pod: the API server then names the node in the
	// token's user info, which deploy/rbac/device-plugin-node-policy.yaml
	// restricts the plugin's writes to.
	pluginPod := e.daemonPod(e.pluginSA, e.node.Name)
	if _, err := e.node.Admit(ctx, pluginPod); err != nil {
		t.Fatal(err)
	}
	if e.pluginCf, errCfg = c.ServiceAccountConfig(ctx, e.pluginSA.Namespace, e.pluginSA.Name, cluster.TokenOptions{BoundPod: pluginPod}); errCfg != nil {
		t.Fatal(errCfg)
	}
	e.startPlugin()
	sched.start(e)
	return e
}

// daemonPod creates a running pod of the ServiceAccount sa on node, as a
// DaemonSet would, and returns it.
func (e *env) daemonPod(sa saRef, node string) *corev1.Pod {
	e.t.Helper()
	return createDaemonPod(e.t, e.ctx, e.admin, sa, node)
}

func createDaemonPod(t *testing.T, ctx context.Context, admin kubernetes.Interface, sa saRef, node string) *corev1.Pod {
	t.Helper()
	pod, err := admin.CoreV1().Pods(sa.Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sa.Name + "-" + node},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: sa.Name,
			Containers:         []corev1.Container{{Name: "main", Image: sa.Name + ":e2e"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s pod on %s: %v", sa, node, err)
	}
	return pod
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// startPlugin starts a device plugin over the node's fakehal hardware with
// the plugin ServiceAccount's client.
func (e *env) startPlugin() {
	e.t.Helper()
	p, err := e.node.StartPlugin(e.ctx, e.t, deviceplugin.Config{
		Client:              clientFor(e.t, e.pluginCf),
		Hardware:            e.hw,
		ReconcileInterval:   300 * time.Millisecond,
		SocketCheckInterval: 200 * time.Millisecond,
		Logger:              logger("device-plugin"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.plugin = p
}

// migPod is a MIG pod with one container per gpumemMiB value, each
// requesting one device of that much memory.
func (e *env) migPod(name string, gpumemMiB ...int64) *corev1.Pod {
	var containers []corev1.Container
	for i, mem := range gpumemMiB {
		containers = append(containers, corev1.Container{
			Name:  "cuda-" + strconv.Itoa(i),
			Image: "cuda:latest",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				kube.ResourceGPU:    resource.MustParse("1"),
				kube.ResourceGPUMem: *resource.NewQuantity(mem, resource.DecimalSI),
			}},
		})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   testNamespace,
			Name:        name,
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG},
		},
		Spec: corev1.PodSpec{
			SchedulerName:                 e.schedulerName,
			Containers:                    containers,
			TerminationGracePeriodSeconds: new(int64(600)),
		},
	}
}

func (e *env) create(pod *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	out, err := e.admin.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return out
}

func (e *env) get(name string) (*corev1.Pod, error) {
	return e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, name, metav1.GetOptions{})
}

func (e *env) wait(what string, cond func(context.Context) (bool, error)) {
	e.t.Helper()
	if err := cluster.WaitFor(e.ctx, 100*time.Millisecond, what, cond); err != nil {
		e.t.Fatal(err)
	}
}

// waitBound waits until the pod is bound with a reservation and returns it.
// On timeout it reports the pod's conditions and the node's allocatable
// resources, which say why the scheduler did not place it.
func (e *env) waitBound(name string) *corev1.Pod {
	e.t.Helper()
	var pod *corev1.Pod
	err := cluster.WaitFor(e.ctx, 100*time.Millisecond, "pod "+name+" bound with a reservation", func(context.Context) (bool, error) {
		p, err := e.get(name)
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Spec.NodeName != "" && p.Annotations[reservation.AnnotationKey] != "", nil
	})
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n, nerr := e.admin.CoreV1().Nodes().Get(ctx, e.node.Name, metav1.GetOptions{}); nerr == nil {
			e.t.Logf("node %s allocatable: %v", n.Name, n.Status.Allocatable)
		}
		if pod != nil {
			e.t.Logf("pod %s: node %q, conditions %+v", name, pod.Spec.NodeName, pod.Status.Conditions)
		}
		e.t.Fatal(err)
	}
	return pod
}

func allocations(t *testing.T, pod *corev1.Pod) []reservation.Allocation {
	t.Helper()
	allocs, err := kube.PodAllocations(pod)
	if err != nil {
		t.Fatalf("pod %s reservation: %v", pod.Name, err)
	}
	return allocs
}

// waitPending waits until a pod is bound to the node and not yet admitted,
// and returns the name of the earliest created one.
func (e *env) waitPending() string {
	e.t.Helper()
	var name string
	e.wait("a pod bound to the node", func(ctx context.Context) (bool, error) {
		pending, err := e.node.PendingPods(ctx)
		if err != nil || len(pending) == 0 {
			return false, nil
		}
		name = pending[0].Name
		return true, nil
	})
	return name
}

// admitNext admits the node's earliest pending pod, which must be name,
// and checks that the plugin realized exactly its reservation: each
// container's NVIDIA_VISIBLE_DEVICES names a MIG device that fakehal has at
// the GPU, profile and placement reserved for that container, and the pod's
// record carries the same runtime identities. Pods here request one device
// per container. It returns the realized entries.
func (e *env) admitNext(name string) []reservation.Allocation {
	e.t.Helper()
	pending, err := e.node.PendingPods(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(pending) == 0 || pending[0].Name != name {
		var names []string
		for _, p := range pending {
			names = append(names, p.Name)
		}
		e.t.Fatalf("pending pods on the node: got %v, want %s first", names, name)
	}
	pod := pending[0]
	want := allocations(e.t, pod)
	adm, err := e.node.Admit(e.ctx, pod)
	if err != nil {
		e.t.Fatalf("admit %s: %v", name, err)
	}
	if len(want) != len(adm) {
		e.t.Fatalf("pod %s: got %d reservation entries for %d containers, want one each", name, len(want), len(adm))
	}
	// The plugin writes the runtime identities back to the pod.
	var realized []reservation.Allocation
	e.wait("runtime identities of "+name, func(context.Context) (bool, error) {
		p, err := e.get(name)
		if err != nil {
			return false, nil
		}
		realized = allocations(e.t, p)
		for _, a := range realized {
			if _, ok := a.Runtime(); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	for i, a := range adm {
		var w, r *reservation.Allocation
		for j := range want {
			if want[j].ContainerIndex == i {
				w, r = &want[j], &realized[j]
			}
		}
		if w == nil {
			e.t.Fatalf("pod %s container %s: no reservation entry", name, a.Container)
		}
		visible := a.Env[deviceplugin.VisibleDevicesEnv]
		inst := e.instanceByMIG(visible)
		if inst == nil {
			e.t.Fatalf("pod %s container %s: %s=%q names no MIG device on the node; instances: %v", name, a.Container, deviceplugin.VisibleDevicesEnv, visible, e.hw.Snapshot())
		}
		if got, want := e.gpuUUID(inst.GPU), w.GPUUUID; got != want {
			e.t.Errorf("pod %s container %s: instance on GPU %s, reserved on %s", name, a.Container, got, want)
		}
		if got, want := inst.Placement, w.Placement; got != want {
			e.t.Errorf("pod %s container %s: instance placement %v, reserved %v", name, a.Container, got, want)
		}
		if got, want := e.profileName(inst.GPU, inst.Profile), w.Profile; got != want {
			e.t.Errorf("pod %s container %s: instance profile %q, reserved %q", name, a.Container, got, want)
		}
		id, _ := r.Runtime()
		if id.MIGUUID != visible || id.GPUInstanceID != inst.GIID || id.ComputeInstanceID != inst.ComputeInstances[0].ID {
			e.t.Errorf("pod %s container %s: runtime identity %v, want %s GI %d CI %d", name, a.Container, id, visible, inst.GIID, inst.ComputeInstances[0].ID)
		}
		if got, want := r.Scheduled(), w.Scheduled(); got != want {
			e.t.Errorf("pod %s container %s: the reservation changed while it was realized: got %v, want %v", name, a.Container, got, want)
		}
	}
	return realized
}

// entryKey names one realized reservation entry: "pod/container index".
func entryKey(pod string, a reservation.Allocation) string {
	return pod + "/" + strconv.Itoa(a.ContainerIndex)
}

// podOf returns the pod name of an entryKey.
func podOf(key string) string {
	name, _, _ := strings.Cut(key, "/")
	return name
}

// record adds a pod's realized entries to realized.
func record(realized map[string]reservation.Allocation, pod string, entries []reservation.Allocation) {
	for _, a := range entries {
		realized[entryKey(pod, a)] = a
	}
}

func (e *env) instanceByMIG(uuid string) *realize.Instance {
	for _, in := range e.hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			if ci.MIGUUID == uuid && uuid != "" {
				return &in
			}
		}
	}
	return nil
}

func (e *env) gpuUUID(gpu int) string {
	d, ok := e.hw.Device(gpu)
	if !ok {
		return fmt.Sprintf("<no GPU %d>", gpu)
	}
	return d.UUID
}

func (e *env) profileName(gpu int, idx capability.GIProfileIndex) string {
	infos, err := e.hw.GIProfiles(e.ctx, gpu)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, in := range infos {
		if in.Index == idx {
			return in.Name
		}
	}
	return fmt.Sprintf("<profile index %d>", idx)
}

// waitReconciles waits until the running plugin has completed n more
// maintenance passes than it had when called.
func (e *env) waitReconciles(n uint64) {
	e.t.Helper()
	start := e.plugin.Reconciles()
	e.wait(fmt.Sprintf("%d reconcile passes", n), func(context.Context) (bool, error) {
		return e.plugin.Reconciles() >= start+n, nil
	})
}

func (e *env) deleteGracefully(name string) {
	e.t.Helper()
	if err := e.admin.CoreV1().Pods(testNamespace).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete %s: %v", name, err)
	}
}

// overlaps reports whether two reservations share a slot on the same GPU.
func overlaps(a, b reservation.Allocation) bool {
	if a.GPUUUID != b.GPUUUID {
		return false
	}
	return a.Placement.Overlaps(b.Placement)
}
