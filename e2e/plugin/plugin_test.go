package plugin_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedplugin"
)

const testNamespace = "e2e"

// trials is how many requeue trials TestPluginRequeue runs:
// DYNMIG_E2E_REQUEUE_TRIALS, default 5.
func trials(t *testing.T) int {
	if v := os.Getenv("DYNMIG_E2E_REQUEUE_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DYNMIG_E2E_REQUEUE_TRIALS=%q: want a positive number", v)
		}
		return n
	}
	return 5
}

type env struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	admin  kubernetes.Interface
	node   *cluster.Node
	plugin *cluster.Plugin
	hw     *fakehal.Node
	sched  string
	// scheduler is the plugin scheduler (nil with the extender).
	scheduler *cluster.Scheduler
}

// startEnv starts a control plane, the deployed RBAC, one node with one
// fake A100-SXM4-40GB and its device plugin, and the dynmig scheduler
// under the scheduler's ServiceAccount: with the plugin and
// schedplugin/deploy/kube-scheduler-config.yaml, or (extender set) the
// upstream scheduler with deploy/scheduler/kube-scheduler-config.yaml and
// the extender, as shipped.
func startEnv(t *testing.T, withExtender bool) *env {
	t.Helper()
	return startEnvConfig(t, withExtender, "")
}

// startEnvConfig is startEnv with the plugin scheduler's configuration
// read from schedConfig ("" for the shipped one).
func startEnvConfig(t *testing.T, withExtender bool, schedConfig string) *env {
	t.Helper()
	ctx := cluster.TestContext(t, 10*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	e := &env{t: t, ctx: ctx, c: c, admin: c.Admin()}
	schedSA, pluginSA := applyDeploy(t, ctx, c)
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	schedCf := cluster.PluginSchedulerConfigPath()
	if withExtender {
		schedCf = cluster.SchedulerConfigPath()
	} else if schedConfig != "" {
		schedCf = schedConfig
	}
	sc, err := cluster.ReadSchedulerConfig(schedCf)
	if err != nil {
		t.Fatal(err)
	}
	e.sched = sc.SchedulerNames[0]
	schedCfg, err := c.ServiceAccountConfig(ctx, schedSA.GetNamespace(), schedSA.GetName(), cluster.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}

	hw := fakehal.MustNew(fakehal.Options{})
	e.hw = hw
	if e.node, err = c.StartNode(t, "gpu-node-1", cluster.NodeOptions{}); err != nil {
		t.Fatal(err)
	}
	pluginPod, err := e.admin.CoreV1().Pods(pluginSA.GetNamespace()).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pluginSA.GetName() + "-" + e.node.Name},
		Spec: corev1.PodSpec{NodeName: e.node.Name, ServiceAccountName: pluginSA.GetName(),
			Containers: []corev1.Container{{Name: "main", Image: pluginSA.GetName() + ":e2e"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.node.Admit(ctx, pluginPod); err != nil {
		t.Fatal(err)
	}
	pluginCfg, err := c.ServiceAccountConfig(ctx, pluginSA.GetNamespace(), pluginSA.GetName(), cluster.TokenOptions{BoundPod: pluginPod})
	if err != nil {
		t.Fatal(err)
	}
	if e.plugin, err = e.node.StartPlugin(ctx, t, deviceplugin.Config{
		Client: clientFor(t, pluginCfg), Hardware: hw,
		ReconcileInterval: 300 * time.Millisecond, SocketCheckInterval: 200 * time.Millisecond,
		Logger: logger("device-plugin"),
	}); err != nil {
		t.Fatal(err)
	}
	if withExtender {
		addr, err := cluster.ExtenderAddr(schedCf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.StartExtender(ctx, t, clientFor(t, schedCfg), addr, extender.Options{Logger: logger("extender")}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StartScheduler(t, cluster.SchedulerOptions{ConfigFile: schedCf, Client: schedCfg}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e.scheduler, err = c.StartSchedulerWith(t, cluster.SchedulerOptions{ConfigFile: schedCf, Client: schedCfg},
		cluster.WithDynMIG(schedplugin.Options{Logger: logger("schedplugin")}, nil)); err != nil {
		t.Fatal(err)
	}
	return e
}

func logger(component string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", component)
}

// applyDeploy applies deploy/namespace.yaml and deploy/rbac/*.yaml (the
// admission policy last) and returns the scheduler's and the device
// plugin's ServiceAccounts.
func applyDeploy(t *testing.T, ctx context.Context, c *cluster.Cluster) (sched, plugin *unstructured.Unstructured) {
	t.Helper()
	rbac, err := filepath.Glob(cluster.DeployPath("rbac", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(rbac, func(a, b string) int {
		return boolCmp(strings.Contains(a, "policy"), strings.Contains(b, "policy"))
	})
	if _, err := c.ApplyManifests(ctx, append([]string{cluster.DeployPath("namespace.yaml")}, rbac...)...); err != nil {
		t.Fatalf("apply deploy manifests: %v", err)
	}
	sa := func(file string) *unstructured.Unstructured {
		objs, err := cluster.ReadManifests(cluster.DeployPath("rbac", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "ServiceAccount" {
				return o
			}
		}
		t.Fatalf("deploy/rbac/%s: no ServiceAccount", file)
		return nil
	}
	return sa("scheduler.yaml"), sa("device-plugin.yaml")
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// wholeGPU is a MIG pod whose one container asks for a whole GPU's memory.
func (e *env) wholeGPU(name string) *corev1.Pod {
	return e.migPod(name, corev1.ResourceList{
		kube.ResourceGPU:              resource.MustParse("1"),
		kube.ResourceGPUMemPercentage: resource.MustParse("100"),
	})
}

// migPod is a MIG pod whose one container has the given limits.
func (e *env) migPod(name string, limits corev1.ResourceList) *corev1.Pod {
	return e.migPodWith(name, limits, nil)
}

// migPodWith is migPod with the pod changed by edit (when not nil)
// before it is created.
func (e *env) migPodWith(name string, limits corev1.ResourceList, edit func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name,
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{
			SchedulerName:                 e.sched,
			Containers:                    []corev1.Container{{Name: "cuda", Image: "cuda:latest", Resources: corev1.ResourceRequirements{Limits: limits}}},
			TerminationGracePeriodSeconds: new(int64(600)),
		},
	}
	if edit != nil {
		edit(pod)
	}
	pod, err := e.admin.CoreV1().Pods(testNamespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	return pod
}

func (e *env) wait(what string, interval time.Duration, cond func(context.Context) (bool, error)) {
	e.t.Helper()
	if err := cluster.WaitFor(e.ctx, interval, what, cond); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) bound(name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return p.Spec.NodeName != "" && p.Annotations[reservation.AnnotationKey] != "", nil
	}
}

// realize admits the bound pod on the node and waits until the device
// plugin wrote its runtime identities. The node has one GPU, which the
// pod takes whole: it first waits until the device plugin has reclaimed
// the instance of the pod that held it before (the device plugin refuses
// a reservation whose slots another reservation's instance still holds).
func (e *env) realize(name string) {
	e.t.Helper()
	e.wait("the previous holder's instance reclaimed", 20*time.Millisecond, func(context.Context) (bool, error) {
		return len(e.hw.Snapshot()) == 0, nil
	})
	pod, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.node.Admit(e.ctx, pod); err != nil {
		e.t.Fatalf("admit %s: %v", name, err)
	}
	e.wait("runtime identities of "+name, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		allocs, err := kube.PodAllocations(p)
		if err != nil || len(allocs) == 0 {
			return false, nil
		}
		for _, a := range allocs {
			if _, ok := a.Runtime(); !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitUnschedulable waits until the scheduler reported the pod
// unschedulable.
func (e *env) waitUnschedulable(name string) {
	e.t.Helper()
	e.wait(name+" unschedulable", 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
}

// remove deletes the pod as the kubelet sees it through: a graceful
// delete, its containers terminated, then the final removal. It returns
// when the containers were recorded terminated (the pod is released from
// then on), before the final removal.
func (e *env) remove(name string) time.Time {
	e.t.Helper()
	pod, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.admin.CoreV1().Pods(testNamespace).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return e.end(pod)
}

// end finishes the deletion of a deleting pod as the kubelet does: its
// containers terminated, then the final removal. It returns when the
// containers were recorded terminated.
func (e *env) end(pod *corev1.Pod) time.Time {
	e.t.Helper()
	if err := e.node.Terminate(e.ctx, testNamespace, pod.Name, 0, false); err != nil {
		e.t.Fatal(err)
	}
	released := time.Now()
	if err := e.node.FinishDeletion(e.ctx, pod); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return released
}

// TestPluginRequeue runs the real kube-scheduler with DynMIG on a quiet
// cluster: a whole-GPU MIG pod holds the node's only GPU (realized) and
// another waits, reported unschedulable. When the holder ends (deleted,
// its containers terminated, removed, as the kubelet does it), the
// plugin's queueing hints requeue the waiter, which is bound with a
// reservation on the GPU; the time from the termination to the bind is
// logged per trial (BENCHMARKS.md). The waiter is then realized on the
// same GPU and holds it for the next trial.
func TestPluginRequeue(t *testing.T) {
	requeue(t, startEnv(t, false))
}

// TestExtenderRequeue is TestPluginRequeue against the extender
// deployment, for comparison. On a quiet cluster the waiter may wait for
// the scheduler's periodic retry of unschedulable pods (5 minutes), so it
// runs only when DYNMIG_E2E_MEASURE=1.
func TestExtenderRequeue(t *testing.T) {
	if os.Getenv("DYNMIG_E2E_MEASURE") != "1" {
		t.Skip("a measurement: set DYNMIG_E2E_MEASURE=1")
	}
	requeue(t, startEnv(t, true))
}

// waitRegistered waits until the node published its GPU and capacity.
func (e *env) waitRegistered() {
	e.t.Helper()
	e.wait("node registration and capacity", 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := e.admin.CoreV1().Nodes().Get(ctx, e.node.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		gpus, err := kube.NodeGPUs(n)
		q := n.Status.Allocatable[kube.ResourceGPU]
		return err == nil && len(gpus) == 1 && q.Value() > 0, nil
	})
}

func requeue(t *testing.T, e *env) {
	e.waitRegistered()
	holder := "holder-0"
	e.wholeGPU(holder)
	e.wait(holder+" bound", 20*time.Millisecond, e.bound(holder))
	e.realize(holder)

	var latencies []time.Duration
	for i := range trials(t) {
		waiter := "holder-" + strconv.Itoa(i+1)
		e.wholeGPU(waiter)
		e.waitUnschedulable(waiter)

		released := e.remove(holder)
		e.wait(waiter+" bound after "+holder+" ended", 5*time.Millisecond, e.bound(waiter))
		latencies = append(latencies, time.Since(released))
		t.Logf("trial %d: %s bound %v after %s ended", i+1, waiter, latencies[i], holder)

		e.realize(waiter)
		holder = waiter
	}
	slices.Sort(latencies)
	t.Logf("requeue latency over %d trials: min %v, p50 %v, p99 %v, max %v", len(latencies),
		latencies[0], latencies[len(latencies)/2], latencies[(len(latencies)*99)/100], latencies[len(latencies)-1])
}
