package adversarial_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedplugin"
)

const (
	nodeName  = "adv-0"
	namespace = metav1.NamespaceDefault
	// reconcileInterval is the device plugin's maintenance period: short,
	// so that reclamation (and any wrongful destruction) shows within the
	// test.
	reconcileInterval = 300 * time.Millisecond
	// absentPodGrace is how long the plugin keeps the instance of a pod
	// that vanished from its listing without being seen deleting (as after
	// a partition, when the relist no longer has it): 1 minute by default,
	// shortened so that the tests see the reclamation.
	absentPodGrace = 5 * time.Second
)

// scheduler names the dynmig scheduler an env runs, each a real
// kube-scheduler from its shipped configuration (see the package
// documentation).
type scheduler string

const (
	// withExtender is kube-scheduler with
	// deploy/scheduler/kube-scheduler-config.yaml and the extender it
	// calls.
	withExtender scheduler = "extender"
	// withPlugin is kube-scheduler with the DynMIG framework plugin
	// registered and schedplugin/deploy/kube-scheduler-config.yaml.
	withPlugin scheduler = "plugin"
)

// eachScheduler runs test once against each scheduler, as a subtest
// named after it.
func eachScheduler(t *testing.T, test func(t *testing.T, s scheduler)) {
	for _, s := range []scheduler{withExtender, withPlugin} {
		t.Run(string(s), func(t *testing.T) { test(t, s) })
	}
}

// env is one control plane with one fake kubelet node (one fakehal A100),
// the device plugin on it and a dynmig scheduler.
type env struct {
	t       *testing.T
	ctx     context.Context
	c       *cluster.Cluster
	admin   kubernetes.Interface
	node    *cluster.Node
	hw      *fakehal.Node
	plugin  *cluster.Plugin
	sched   scheduler
	ext     *cluster.Extender // with withExtender
	monitor *monitor
	gpus    []capability.GPU
}

type envOptions struct {
	// scheduler is the scheduler the env runs.
	scheduler scheduler
	// pluginClient returns the device plugin's client; nil means admin.
	pluginClient func(*cluster.Cluster) kubernetes.Interface
	// binder wraps the transport of the component that binds MIG pods
	// (the pods/binding call carrying the record): the extender's client,
	// or with the plugin kube-scheduler's own (through cluster.HTTPFront).
	// nil wraps nothing.
	binder func(http.RoundTripper) http.RoundTripper
}

func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	ctx := cluster.TestContext(t, 10*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	e := &env{t: t, ctx: ctx, c: c, admin: c.Admin(), sched: opts.scheduler}
	var err error
	if e.node, err = c.StartNode(t, nodeName, cluster.NodeOptions{}); err != nil {
		t.Fatalf("start node: %v", err)
	}
	e.hw = fakehal.MustNew(fakehal.Options{Seed: 7})
	client := e.admin
	if opts.pluginClient != nil {
		client = opts.pluginClient(c)
	}
	e.plugin, err = e.node.StartPlugin(ctx, t, deviceplugin.Config{
		Client: client, Hardware: e.hw, ReconcileInterval: reconcileInterval, Logger: logger("device-plugin"),
		Manager: realize.Options{AbsentPodGrace: absentPodGrace},
	})
	if err != nil {
		t.Fatalf("start device plugin: %v", err)
	}
	e.startScheduler(opts.binder)

	e.waitFor("node registration and device capacity", func(ctx context.Context) (bool, error) {
		n, err := e.admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		gpus, err := kube.NodeGPUs(n)
		q := n.Status.Allocatable[kube.ResourceGPU]
		if err != nil || len(gpus) == 0 || q.IsZero() {
			return false, nil
		}
		e.gpus = gpus
		return true, nil
	})
	e.monitor = startMonitor(t, e.hw)
	return e
}

// startScheduler starts e.sched from its shipped configuration, with the
// cluster's admin identity, binder wrapping the binding component's
// transport.
func (e *env) startScheduler(binder func(http.RoundTripper) http.RoundTripper) {
	t := e.t
	t.Helper()
	cfg := e.c.AdminConfig()
	if binder != nil {
		cfg.Wrap(binder)
	}
	var file string
	switch e.sched {
	case withExtender:
		file = cluster.SchedulerConfigPath()
		addr, err := cluster.ExtenderAddr(file)
		if err != nil {
			t.Fatal(err)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if e.ext, err = cluster.StartExtender(e.ctx, t, client, addr, extender.Options{Logger: logger("extender")}); err != nil {
			t.Fatalf("start extender: %v", err)
		}
		if _, err := e.c.StartScheduler(t, cluster.SchedulerOptions{ConfigFile: file}); err != nil {
			t.Fatalf("start kube-scheduler: %v", err)
		}
	case withPlugin:
		file = filepath.Join(cluster.RepoRoot(), "schedplugin", "deploy", "kube-scheduler-config.yaml")
		front, err := cluster.HTTPFront(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.StartSchedulerWith(t, cluster.SchedulerOptions{ConfigFile: file, Client: front},
			app.WithPlugin(schedplugin.Name, schedplugin.Factory(schedplugin.Options{Logger: logger("schedplugin")}))); err != nil {
			t.Fatalf("start kube-scheduler with DynMIG: %v", err)
		}
	default:
		t.Fatalf("no scheduler %q", e.sched)
	}
	sc, err := cluster.ReadSchedulerConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sc.SchedulerNames, deviceplugin.DefaultSchedulerName) {
		t.Fatalf("%s has no profile %q, which the tests' pods name", file, deviceplugin.DefaultSchedulerName)
	}
}

// logger is a component's logger when the tests run verbose, nil (the
// component's default) otherwise.
func logger(component string) *slog.Logger {
	if !testing.Verbose() {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", component)
}

// waitFor polls cond every 50 ms until it holds, failing the test when
// cond errs or the test's context (bounded by -timeout) ends first.
func (e *env) waitFor(what string, cond func(context.Context) (bool, error)) {
	e.t.Helper()
	if err := cluster.WaitFor(e.ctx, 50*time.Millisecond, what, cond); err != nil {
		e.t.Fatal(err)
	}
}

// migPod is a pod opting in to MIG with one container requesting one
// device of gpumem MiB.
func migPod(name, gpumem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{SchedulerName: deviceplugin.DefaultSchedulerName, Containers: []corev1.Container{{
			Name: "main", Image: "registry.example/workload:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				kube.ResourceGPU:    resource.MustParse("1"),
				kube.ResourceGPUMem: resource.MustParse(gpumem),
			}},
		}}},
	}
}

// schedule creates pod and waits until the scheduler has bound it with
// a reservation record.
func (e *env) schedule(pod *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	e.create(pod)
	e.waitBound(pod.Name)
	return e.get(pod.Name)
}

// create creates pod. With the extender it first waits until the
// extender's view reflects the cluster: an extender that refuses a pod on
// a view that lags leaves it to kube-scheduler's next unrelated event or
// its 5-minute flush of unschedulable pods (docs/deploying.md, "A kube-scheduler
// v1.37.2 limitation"), the extender's known limitation and not what
// these tests check. The plugin needs no such wait: its queueing hints
// requeue the pod.
func (e *env) create(pod *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	if e.ext != nil {
		if err := e.ext.Sync(e.ctx); err != nil {
			e.t.Fatalf("extender view: %v", err)
		}
	}
	created, err := e.admin.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return created
}

// waitBound waits until the pod is bound with a reservation record, the
// scheduler retrying meanwhile while the node is locked by a pod the
// device plugin is realizing.
func (e *env) waitBound(name string) {
	e.t.Helper()
	var last string
	err := cluster.WaitFor(e.ctx, 50*time.Millisecond, "bind of "+name, func(ctx context.Context) (bool, error) {
		p, err := e.admin.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				last = c.Reason + ": " + c.Message
			}
		}
		return p.Spec.NodeName != "" && p.Annotations[reservation.AnnotationKey] != "", nil
	})
	if err != nil {
		e.t.Fatalf("%v (last scheduling condition: %s)", err, last)
	}
}

func (e *env) get(name string) *corev1.Pod {
	e.t.Helper()
	p, err := e.admin.CoreV1().Pods(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// admit is the kubelet admitting the pod: the real device manager calls
// the plugin's Allocate. It returns the MIG devices handed to the
// container (NVIDIA_VISIBLE_DEVICES) or the admission error.
func (e *env) admit(name string) (string, error) {
	e.t.Helper()
	adm, err := e.node.Admit(e.ctx, e.get(name))
	if err != nil {
		return "", err
	}
	if len(adm) != 1 {
		e.t.Fatalf("pod %s: %d admitted containers, want 1", name, len(adm))
	}
	return adm[0].Env[deviceplugin.VisibleDevicesEnv], nil
}

// mustAdmit admits the pod, checks that it received exactly the MIG
// device its record names, and marks that device in use.
func (e *env) mustAdmit(name string) string {
	e.t.Helper()
	mig, err := e.admit(name)
	if err != nil {
		e.t.Fatalf("admit %s: %v", name, err)
	}
	if got := e.recordedMIG(name); got != mig {
		e.t.Fatalf("pod %s was handed %q, its record names %q", name, mig, got)
	}
	if !slices.Contains(liveMIGs(e.hw), mig) {
		e.t.Fatalf("pod %s was handed %q, which is not a live MIG device (live: %v)", name, mig, liveMIGs(e.hw))
	}
	e.monitor.use(name, mig)
	return mig
}

// recordedMIG returns the MIG UUID of the pod's single realized entry, ""
// when it has none.
func (e *env) recordedMIG(name string) string {
	allocs, err := kube.PodAllocations(e.get(name))
	if err != nil || len(allocs) != 1 {
		return ""
	}
	id, ok := allocs[0].Runtime()
	if !ok {
		return ""
	}
	return id.MIGUUID
}

// remove ends a running pod (end) and waits until the plugin has
// reclaimed its MIG device.
func (e *env) remove(name string) {
	e.t.Helper()
	if mig := e.end(name); mig != "" {
		e.waitReclaimed(name, mig)
	}
}

// end deletes a running pod the way the kubelet ends one: deletion
// timestamp, containers terminated, object removed. Its device is no
// longer in use; end returns it.
func (e *env) end(name string) string {
	e.t.Helper()
	pod := e.get(name)
	mig := e.monitor.release(name)
	if err := e.admin.CoreV1().Pods(namespace).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete pod %s: %v", name, err)
	}
	if err := e.node.Terminate(e.ctx, namespace, name, 0, false); err != nil {
		e.t.Fatalf("terminate pod %s: %v", name, err)
	}
	if err := e.node.FinishDeletion(e.ctx, pod); err != nil {
		e.t.Fatalf("finish deletion of %s: %v", name, err)
	}
	return mig
}

func (e *env) waitReclaimed(name, mig string) {
	e.t.Helper()
	e.waitFor("reclamation of "+name+"'s "+mig, func(context.Context) (bool, error) {
		return !slices.Contains(liveMIGs(e.hw), mig), nil
	})
}

// waitPasses waits until the device plugin has completed n more
// maintenance passes, each of which could destroy what it considers
// unowned.
func (e *env) waitPasses(n uint64) {
	e.t.Helper()
	start := e.plugin.Reconciles()
	e.waitFor(fmt.Sprintf("%d maintenance passes", n), func(context.Context) (bool, error) {
		return e.plugin.Reconciles() >= start+n, nil
	})
}

// waitDevices waits until the kubelet's device manager counts healthy
// devices of the plugin's resource (healthy) or none (!healthy). Around a
// plugin restart: the kubelet learns that the old plugin went, and the
// new plugin's devices from its first ListAndWatch answer, only after
// Stop and Ready return.
func (e *env) waitDevices(healthy bool) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("the kubelet to count healthy devices: %v", healthy), func(context.Context) (bool, error) {
		_, allocatable, _ := e.node.DeviceManager().GetCapacity(klog.Background())
		q := allocatable[kube.ResourceGPU]
		return (q.Value() > 0) == healthy, nil
	})
}

// finalCheck checks that the hardware is consistent and holds exactly the
// MIG devices of the pods in use, each the one its record names.
func (e *env) finalCheck() {
	e.t.Helper()
	if err := e.hw.Check(); err != nil {
		e.t.Errorf("hardware: %v", err)
	}
	var want []string
	for name, mig := range e.monitor.inUse() {
		if got := e.recordedMIG(name); got != mig {
			e.t.Errorf("pod %s uses %s, its record names %q", name, mig, got)
		}
		want = append(want, mig)
	}
	slices.Sort(want)
	if got := liveMIGs(e.hw); !slices.Equal(got, want) {
		e.t.Errorf("live MIG devices %v, want exactly those in use %v", got, want)
	}
}

// liveMIGs returns the MIG UUIDs of the node's compute instances, sorted.
func liveMIGs(hw *fakehal.Node) []string {
	var out []string
	for _, in := range hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			out = append(out, ci.MIGUUID)
		}
	}
	slices.Sort(out)
	return out
}

// monitor samples the fake hardware every few milliseconds and records
// every moment a MIG device in use by a running pod is missing: the
// "nothing destroyed that was in use" claim, checked throughout rather
// than only at the end.
type monitor struct {
	t  *testing.T
	hw *fakehal.Node

	mu     sync.Mutex
	used   map[string]string // pod name -> MIG UUID
	losses []string
	stop   chan struct{}
	done   chan struct{}
}

func startMonitor(t *testing.T, hw *fakehal.Node) *monitor {
	m := &monitor{t: t, hw: hw, used: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	t.Cleanup(func() {
		close(m.stop)
		<-m.done
		for _, l := range m.losses {
			t.Error(l)
		}
	})
	return m
}

func (m *monitor) run() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		live := liveMIGs(m.hw)
		m.mu.Lock()
		for pod, mig := range m.used {
			if !slices.Contains(live, mig) {
				m.losses = append(m.losses, fmt.Sprintf("MIG device %s of running pod %s was destroyed", mig, pod))
				delete(m.used, pod) // reported once
			}
		}
		m.mu.Unlock()
	}
}

func (m *monitor) use(pod, mig string) {
	m.mu.Lock()
	m.used[pod] = mig
	m.mu.Unlock()
}

// release stops watching the pod's device (the pod is ending) and
// returns it.
func (m *monitor) release(pod string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	mig := m.used[pod]
	delete(m.used, pod)
	return mig
}

func (m *monitor) inUse() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]string, len(m.used))
	for k, v := range m.used {
		out[k] = v
	}
	return out
}

// entries decodes the pod's reservation record.
func entries(t *testing.T, pod *corev1.Pod) []reservation.Allocation {
	t.Helper()
	allocs, err := kube.PodAllocations(pod)
	if err != nil {
		t.Fatalf("pod %s record: %v", pod.Name, err)
	}
	return allocs
}
