package scale_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

const (
	namespace = "scale"
	// gpuModel is every fake node's GPU model, eight per node.
	gpuModel = "A100-SXM4-40GB"
	// schedulerQPS and schedulerBurst are the scheduler's
	// clientConnection.qps and burst, as a deployment for thousands of
	// nodes raises them (the defaults are 50 and 100).
	schedulerQPS   = 500
	schedulerBurst = 1000
	// warmup pods of each kind are bound before a measurement starts, so
	// that it does not count the scheduler's (and the extender's)
	// informer sync.
	warmup = 5
)

// config is the measurement DYNMIG_E2E_SCALE_NODES,
// DYNMIG_E2E_SCALE_PODS and DYNMIG_E2E_SCALE_SCHEDULERS select; the
// default is a small run of both schedulers that checks the harness.
type config struct {
	nodes      []int    // node counts, increasing
	pods       int      // pods per measurement
	schedulers []string // "plugin", "extender", in this order
}

func readConfig(t *testing.T) config {
	cfg := config{nodes: []int{8}, pods: 16, schedulers: []string{"plugin", "extender"}}
	if v := os.Getenv("DYNMIG_E2E_SCALE_NODES"); v != "" {
		cfg.nodes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("DYNMIG_E2E_SCALE_NODES=%q: want positive node counts separated by commas", v)
			}
			cfg.nodes = append(cfg.nodes, n)
		}
		slices.Sort(cfg.nodes)
	}
	if v := os.Getenv("DYNMIG_E2E_SCALE_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DYNMIG_E2E_SCALE_PODS=%q: want a positive number", v)
		}
		cfg.pods = n
	}
	if v := os.Getenv("DYNMIG_E2E_SCALE_SCHEDULERS"); v != "" {
		cfg.schedulers = nil
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "plugin" && f != "extender" {
				t.Fatalf("DYNMIG_E2E_SCALE_SCHEDULERS=%q: want plugin, extender or both, separated by a comma", v)
			}
			cfg.schedulers = append(cfg.schedulers, f)
		}
	}
	return cfg
}

// TestThroughput measures, on one control plane and for each node count
// in turn, the scheduling rate of plain pods and of one-device MIG pods
// through the DynMIG plugin (schedplugin/deploy/kube-scheduler-config.yaml)
// and through the extender (deploy/scheduler/kube-scheduler-config.yaml),
// both with the scheduler's client QPS raised (schedulerQPS). Each
// scheduler, and the extender, runs as a process of its own (the test
// binary re-executed, runChild), so that its CPU time is its own; the
// test process holds etcd, the API server and the stand-ins.
//
// Each measurement creates its pods from 16 goroutines and counts from
// the first create to the last pod seen bound; it also reports the rate
// between the 10th and the 90th percentile of binds (steady state), the
// CPU time per pod of each process, and the API requests per pod by verb
// and resource (apiserver_request_total, read before the pods are created
// and after every one of them is Running). The test checks that every pod
// is bound and every MIG pod carries its reservation; the numbers are
// logged (BENCHMARKS.md), not asserted.
func TestThroughput(t *testing.T) {
	cfg := readConfig(t)
	e := start(t)
	var rounds [][2]result
	for _, n := range cfg.nodes {
		e.growNodes(n)
		for _, s := range cfg.schedulers {
			if s == "plugin" {
				rounds = append(rounds, e.pluginRound(n, cfg.pods))
			} else {
				rounds = append(rounds, e.extenderRound(n, cfg.pods))
			}
		}
	}
	for _, r := range rounds {
		t.Log(r[0])
		t.Log(r[1])
	}
	t.Log("MIG pods against plain pods through the same scheduler in the same round:")
	for _, r := range rounds {
		t.Log(ratios(r[0], r[1]))
	}
}

type env struct {
	t          *testing.T
	ctx        context.Context
	c          *cluster.Cluster
	admin      kubernetes.Interface
	kubeconfig string // the administrator's, for the child processes
	nodes      int
	binds      *tracker
}

func start(t *testing.T) *env {
	ctx := cluster.TestContext(t, 60*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	e := &env{t: t, ctx: ctx, c: c, admin: c.Admin()}
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.kubeconfig, err = c.WriteKubeconfig("scale-admin", c.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	e.binds = startTracker(t, c)
	return e
}

// growNodes creates fake nodes until there are n.
func (e *env) growNodes(n int) {
	e.t.Helper()
	err := parallel(e.ctx, 16, e.nodes, n, func(ctx context.Context, i int) error {
		node, err := fakeNode(ctx, i)
		if err != nil {
			return err
		}
		_, err = e.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("create nodes: %v", err)
	}
	e.nodes = n
}

// fakeNode is node i: allocatable as a large GPU server and the
// registration of eight fakehal GPUs seeded with i (so every node's GPU
// UUIDs differ), as the device plugin writes it.
func fakeNode(ctx context.Context, i int) (*corev1.Node, error) {
	hw, err := fakehal.New(fakehal.Options{GPUs: fakehal.Repeat(8, gpuModel), Seed: uint64(i)})
	if err != nil {
		return nil, err
	}
	gpus, _, err := capability.Discover(ctx, hw, capability.DefaultAllowlist())
	if err != nil {
		return nil, err
	}
	devs, err := capability.NewMIGNodeDevices(gpus, nil)
	if err != nil {
		return nil, err
	}
	reg, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("gpu-node-%05d", i)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("128"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		// The device plugin's count: eight GPUs, each shared by up to
		// seven MIG devices.
		kube.ResourceGPU: resource.MustParse("56"),
	}
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
			Annotations: map[string]string{capability.NodeRegisterAnnotation: string(reg)}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now}}},
	}, nil
}

// parallel runs do(ctx, i) for i in [from, to) on workers goroutines and
// returns the first error.
func parallel(ctx context.Context, workers, from, to int, do func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := do(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := from; i < to && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// pluginRound starts kube-scheduler with DynMIG and measures plain pods,
// then MIG pods, on n nodes.
func (e *env) pluginRound(n, pods int) [2]result {
	src := filepath.Join(cluster.RepoRoot(), "schedplugin", "deploy", "kube-scheduler-config.yaml")
	s := startChild(e.t, e.ctx, rolePlugin, schedulerConfig(e.t, src, e.kubeconfig, ""))
	defer s.stop()
	return [2]result{e.measure(n, "plain (DynMIG scheduler)", false, pods, s, nil),
		e.measure(n, "MIG through DynMIG", true, pods, s, nil)}
}

// extenderRound starts the extender and the upstream kube-scheduler with
// the extender configuration (its extender pointed at the extender's
// process) and measures plain pods, then MIG pods, on n nodes.
func (e *env) extenderRound(n, pods int) [2]result {
	kc, err := os.ReadFile(e.kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	ext := startChild(e.t, e.ctx, roleExtender, kc)
	defer ext.stop()
	s := startChild(e.t, e.ctx, roleScheduler, schedulerConfig(e.t, cluster.SchedulerConfigPath(), e.kubeconfig, ext.addr))
	defer s.stop()
	return [2]result{e.measure(n, "plain (extender scheduler)", false, pods, s, ext),
		e.measure(n, "MIG through the extender", true, pods, s, ext)}
}

type result struct {
	nodes        int
	what         string
	pods         int
	total        time.Duration // first create to last bound
	rate, steady float64       // pods/s over total, and between the 10th and 90th percentile bind
	// CPU time per pod: kube-scheduler's process, the extender's (0
	// without one) and the test process's (etcd, the API server, the
	// front proxy and the stand-ins: pod creation, realization, status).
	sched, ext, rest time.Duration
	requests         requests     // API requests per pod, from create to Running
	metrics          schedMetrics // the scheduler's metrics over the measurement
}

func (r result) String() string {
	cpu := fmt.Sprintf("kube-scheduler %v", r.sched.Round(10*time.Microsecond))
	if r.ext > 0 {
		cpu += fmt.Sprintf(", extender %v", r.ext.Round(10*time.Microsecond))
	}
	return fmt.Sprintf("%d nodes, %s: %d pods in %v: %.1f pods/s (steady %.1f pods/s)\n"+
		"\tCPU per pod: %s, API server, etcd and stand-ins %v\n\tAPI requests per pod %v\n\t%v",
		r.nodes, r.what, r.pods, r.total.Round(time.Millisecond), r.rate, r.steady,
		cpu, r.rest.Round(10*time.Microsecond), r.requests, r.metrics)
}

// ratios compares a round's MIG measurement m with its plain one p.
func ratios(p, m result) string {
	div := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	s := fmt.Sprintf("%d nodes, %s: rate %.2fx (steady %.2fx); CPU per pod: kube-scheduler %.2fx",
		p.nodes, m.what, m.rate/p.rate, m.steady/p.steady, div(m.sched, p.sched))
	if m.ext > 0 {
		s += fmt.Sprintf(", kube-scheduler and extender %.2fx", div(m.sched+m.ext, p.sched+p.ext))
	}
	return s + fmt.Sprintf(", API server, etcd and stand-ins %.2fx; API requests per pod %.2f vs %.2f, etcd requests %.2f vs %.2f",
		div(m.rest, p.rest), m.requests.api.total(), p.requests.api.total(), m.requests.etcd.total(), p.requests.etcd.total())
}

var round int

// usage is what a measurement reads before and after its pods.
type usage struct {
	sched, ext, rest time.Duration // CPU time of kube-scheduler, the extender, the test process
	requests         requests
	metrics          schedMetrics
}

// usage reads the CPU time of the processes, the API server's request
// counts and kube-scheduler's metrics; ext may be nil.
func (e *env) usage(s, ext *child) usage {
	u := usage{requests: readRequests(e.t, e.ctx, e.admin), metrics: readSchedMetrics(scrapeChild(e.t, e.ctx, s))}
	u.sched, u.rest = s.cpu(e.t), cpuTime(e.t)
	if ext != nil {
		u.ext = ext.cpu(e.t)
	}
	return u
}

// measure creates warmup pods and waits until they run, then creates pods
// of the kind and waits until all are bound and then running, reading
// usage before and after them.
func (e *env) measure(n int, what string, mig bool, pods int, s, ext *child) result {
	e.t.Helper()
	round++
	prefix := fmt.Sprintf("r%d-", round)
	create := func(from, to int, p string) []string {
		names := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			names = append(names, fmt.Sprintf("%s%05d", p, i))
		}
		if err := parallel(e.ctx, 16, from, to, func(ctx context.Context, i int) error {
			_, err := e.admin.CoreV1().Pods(namespace).Create(ctx, pod(names[i-from], mig), metav1.CreateOptions{})
			return err
		}); err != nil {
			e.t.Fatalf("%s: create pods: %v", what, err)
		}
		return names
	}
	warm := create(0, warmup, prefix+"warm-")
	e.binds.wait(e.t, e.ctx, warm)
	e.binds.waitRunning(e.t, e.ctx, warm)
	before := e.usage(s, ext)
	began := time.Now()
	names := create(0, pods, prefix)
	times := e.binds.wait(e.t, e.ctx, names)
	e.binds.waitRunning(e.t, e.ctx, names)
	after := e.usage(s, ext)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	per := func(a, b time.Duration) time.Duration { return (a - b) / time.Duration(pods) }
	r := result{nodes: n, what: what, pods: pods, total: times[len(times)-1].Sub(began),
		sched: per(after.sched, before.sched), ext: per(after.ext, before.ext), rest: per(after.rest, before.rest),
		requests: after.requests.perPod(before.requests, pods), metrics: after.metrics.since(before.metrics)}
	r.rate = float64(pods) / r.total.Seconds()
	lo, hi := len(times)/10, len(times)*9/10
	if d := times[hi-1].Sub(times[lo]); hi-1 > lo && d > 0 {
		r.steady = float64(hi-1-lo) / d.Seconds()
	}
	if mig {
		e.binds.checkReserved(e.t, names)
	}
	e.t.Log(r)
	return r
}

// pod is a plain pod, or a MIG pod asking for one 4000 MiB device (a
// 1g.5gb instance on an A100-40GB); both request some CPU and memory, as
// scheduler_perf's pods do.
func pod(name string, mig bool) *corev1.Pod {
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("256Mi"),
	}}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{SchedulerName: "dynmig-scheduler",
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: res}}},
	}
	if mig {
		p.Annotations = map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
			kube.ResourceGPU:    resource.MustParse("1"),
			kube.ResourceGPUMem: resource.MustParse("4000"),
		}
	}
	return p
}

// tracker records when each pod of the namespace was first seen bound,
// and stands in for the kubelet and the device plugin of every node: it
// fills in the runtime identity of each entry of a bound MIG pod's record
// (as the device plugin does when it realizes it) and records every bound
// pod Running (as the kubelet does once the pod started).
type tracker struct {
	mu      sync.Mutex
	bound   map[string]time.Time
	pods    map[string]*corev1.Pod
	queued  map[string]bool
	changed chan struct{}
	run     chan string
}

func startTracker(t *testing.T, c *cluster.Cluster) *tracker {
	tr := &tracker{bound: map[string]time.Time{}, pods: map[string]*corev1.Pod{}, queued: map[string]bool{},
		changed: make(chan struct{}), run: make(chan string, 1<<20)}
	client := c.Admin()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if _, ok := tr.bound[p.Name]; !ok {
			tr.bound[p.Name] = time.Now()
		}
		tr.pods[p.Name] = p
		close(tr.changed)
		tr.changed = make(chan struct{})
		if p.Status.Phase == corev1.PodPending && !tr.queued[p.Name] {
			tr.queued[p.Name] = true
			tr.run <- p.Name
		}
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case name := <-tr.run:
					tr.mu.Lock()
					p := tr.pods[name]
					delete(tr.queued, name)
					tr.mu.Unlock()
					// A failure leaves the pod as it was; its next
					// event retries.
					_ = startPod(ctx, client, p)
				}
			}
		})
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		wg.Wait()
	})
	factory.WaitForCacheSync(ctx.Done())
	return tr
}

// startPod realizes the pod's record, when it has one without runtime
// identities, and then records the pod Running.
func startPod(ctx context.Context, client kubernetes.Interface, p *corev1.Pod) error {
	value := p.Annotations[reservation.AnnotationKey]
	allocs, err := kube.PodAllocations(p)
	if err != nil {
		return err
	}
	for i, a := range allocs {
		if _, ok := a.Runtime(); ok {
			continue
		}
		id := reservation.RuntimeIdentity{MIGUUID: fmt.Sprintf("MIG-%s", p.UID), GPUInstanceID: a.Placement.Start + 1, ComputeInstanceID: uint32(i)}
		rp, err := reservation.SetRuntime(value, a.ContainerIndex, a.DeviceIndex, id, reservation.PatchOptions{})
		if err != nil {
			return err
		}
		if _, err := client.CoreV1().Pods(namespace).Patch(ctx, p.Name, types.MergePatchType, rp.Patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		value = rp.Value
	}
	_, err = client.CoreV1().Pods(namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	return err
}

// wait waits until every named pod was seen bound and returns when each
// was.
func (tr *tracker) wait(t *testing.T, ctx context.Context, names []string) []time.Time {
	t.Helper()
	for {
		tr.mu.Lock()
		changed := tr.changed
		times := make([]time.Time, 0, len(names))
		for _, n := range names {
			if at, ok := tr.bound[n]; ok {
				times = append(times, at)
			}
		}
		tr.mu.Unlock()
		if len(times) == len(names) {
			return times
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d pods bound: %v", len(times), len(names), ctx.Err())
		case <-changed:
		}
	}
}

// waitRunning waits until every named pod was seen Running, so that
// the stand-ins' writes for them are done.
func (tr *tracker) waitRunning(t *testing.T, ctx context.Context, names []string) {
	t.Helper()
	for {
		tr.mu.Lock()
		changed, running := tr.changed, 0
		for _, n := range names {
			if p := tr.pods[n]; p != nil && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		tr.mu.Unlock()
		if running == len(names) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d pods running: %v", running, len(names), ctx.Err())
		case <-changed:
		}
	}
}

// checkReserved fails the test unless every named pod, as last seen,
// carries a reservation record.
func (tr *tracker) checkReserved(t *testing.T, names []string) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, n := range names {
		allocs, err := kube.PodAllocations(tr.pods[n])
		if err != nil || len(allocs) != 1 {
			t.Fatalf("pod %s bound with record %v, %v; want one entry", n, allocs, err)
		}
	}
}
