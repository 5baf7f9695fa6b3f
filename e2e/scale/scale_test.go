package scale_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedplugin"
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

// config is the measurement DYNMIG_E2E_SCALE_NODES and
// DYNMIG_E2E_SCALE_PODS select; the default is a small run that checks
// the harness.
type config struct {
	nodes []int // node counts, increasing
	pods  int   // pods per measurement
}

func readConfig(t *testing.T) config {
	cfg := config{nodes: []int{8}, pods: 16}
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
	return cfg
}

// TestThroughput measures, on one control plane and for each node count
// in turn, the scheduling rate of plain pods and of one-device MIG pods
// through the DynMIG plugin (schedplugin/deploy/kube-scheduler-config.yaml)
// and through the extender (deploy/scheduler/kube-scheduler-config.yaml),
// both with the scheduler's client QPS raised (schedulerQPS). Each
// measurement creates its pods from 16 goroutines and counts from the
// first create to the last pod seen bound; it also reports the rate
// between the 10th and the 90th percentile of binds (steady state). The
// test checks that every pod is bound and every MIG pod carries its
// reservation; the rates are logged (BENCHMARKS.md), not asserted.
func TestThroughput(t *testing.T) {
	cfg := readConfig(t)
	e := start(t)
	var results []result
	for _, n := range cfg.nodes {
		e.growNodes(n)
		results = append(results, e.pluginRound(n, cfg.pods)...)
		results = append(results, e.extenderRound(n, cfg.pods)...)
	}
	for _, r := range results {
		t.Log(r)
	}
	t.Log("ratios to plain pods through the same scheduler binary in the same round:")
	for i := 0; i+3 < len(results); i += 4 {
		p, m, pe, me := results[i], results[i+1], results[i+2], results[i+3]
		t.Logf("%d nodes: plugin MIG/plain %.2f (steady %.2f, CPU per pod %.2fx); extender MIG/plain %.2f (steady %.2f, CPU per pod %.2fx); extender MIG/plugin MIG %.2f",
			p.nodes, m.rate/p.rate, m.steady/p.steady, float64(m.cpu)/float64(p.cpu),
			me.rate/pe.rate, me.steady/pe.steady, float64(me.cpu)/float64(pe.cpu), me.rate/m.rate)
	}
}

type env struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	admin  kubernetes.Interface
	nodes  int
	binds  *tracker
	config struct{ plugin, extender string }
}

func start(t *testing.T) *env {
	ctx := cluster.TestContext(t, 60*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	e := &env{t: t, ctx: ctx, c: c, admin: c.Admin()}
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.config.plugin = scaledConfig(t, filepath.Join(cluster.RepoRoot(), "schedplugin", "deploy", "kube-scheduler-config.yaml"))
	e.config.extender = scaledConfig(t, cluster.SchedulerConfigPath())
	e.binds = startTracker(t, c)
	return e
}

// scaledConfig writes the scheduler configuration file src with the
// client's QPS and burst raised to schedulerQPS and schedulerBurst and
// returns the new file's path.
func scaledConfig(t *testing.T, src string) string {
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	conn, _ := raw["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["qps"], conn["burst"] = schedulerQPS, schedulerBurst
	raw["clientConnection"] = conn
	if data, err = yaml.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
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
func (e *env) pluginRound(n, pods int) []result {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "schedplugin")
	s, err := e.c.StartSchedulerWith(e.t, cluster.SchedulerOptions{ConfigFile: e.config.plugin},
		app.WithPlugin(schedplugin.Name, schedplugin.Factory(schedplugin.Options{Logger: log})))
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Stop()
	return []result{e.measure(n, "plain (plugin scheduler)", false, pods), e.measure(n, "MIG through the plugin", true, pods)}
}

// extenderRound starts the extender and the upstream kube-scheduler with
// the extender configuration and measures plain pods, then MIG pods, on n
// nodes.
func (e *env) extenderRound(n, pods int) []result {
	addr, err := cluster.ExtenderAddr(e.config.extender)
	if err != nil {
		e.t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "extender")
	ext, err := cluster.StartExtender(e.ctx, e.t, e.admin, addr, extender.Options{Logger: log})
	if err != nil {
		e.t.Fatal(err)
	}
	defer ext.Stop()
	s, err := e.c.StartScheduler(e.t, cluster.SchedulerOptions{ConfigFile: e.config.extender})
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Stop()
	return []result{e.measure(n, "plain (extender scheduler)", false, pods), e.measure(n, "MIG through the extender", true, pods)}
}

type result struct {
	nodes        int
	what         string
	pods         int
	total        time.Duration // first create to last bound
	rate, steady float64       // pods/s over total, and between the 10th and 90th percentile bind
	cpu          time.Duration // the test process's CPU time (control plane, scheduler, extender, stand-ins) per pod
	sched        schedMetrics  // the scheduler's metrics over the measurement
}

func (r result) String() string {
	return fmt.Sprintf("%d nodes, %s: %d pods in %v: %.1f pods/s (steady %.1f pods/s), %v CPU per pod; %v",
		r.nodes, r.what, r.pods, r.total.Round(time.Millisecond), r.rate, r.steady, r.cpu.Round(10*time.Microsecond), r.sched)
}

// cpuTime is the process's user and system CPU time so far: the machine's
// load does not inflate it as it does wall time.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedMetrics are kube-scheduler's scheduling attempts by result and the
// mean duration of its successful attempts (scheduling and binding
// cycle), from its metrics in the process's registry. The scheduler
// records some of them asynchronously, so a measurement's counts may lag
// by a few pods.
type schedMetrics struct {
	attempts         map[string]float64
	cycleSum, cycles float64
	// The scheduling algorithm's (Filter and Score, sequential per pod)
	// and the extension points' durations: sum and count each.
	algorithm [2]float64
	points    map[string][2]float64
}

func readSchedMetrics(t *testing.T) schedMetrics {
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := schedMetrics{attempts: map[string]float64{}, points: map[string][2]float64{}}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			result, point := "", ""
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "result":
					result = l.GetValue()
				case "extension_point":
					point = l.GetValue()
				}
			}
			switch mf.GetName() {
			case "scheduler_scheduling_algorithm_duration_seconds":
				m.algorithm[0] += s.GetHistogram().GetSampleSum()
				m.algorithm[1] += float64(s.GetHistogram().GetSampleCount())
			case "scheduler_framework_extension_point_duration_seconds":
				pt := m.points[point]
				pt[0] += s.GetHistogram().GetSampleSum()
				pt[1] += float64(s.GetHistogram().GetSampleCount())
				m.points[point] = pt
			case "scheduler_schedule_attempts_total":
				m.attempts[result] += s.GetCounter().GetValue()
			case "scheduler_scheduling_attempt_duration_seconds":
				if result == "scheduled" {
					m.cycleSum += s.GetHistogram().GetSampleSum()
					m.cycles += float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return m
}

// since is m less before.
func (m schedMetrics) since(before schedMetrics) schedMetrics {
	d := schedMetrics{attempts: map[string]float64{}, cycleSum: m.cycleSum - before.cycleSum, cycles: m.cycles - before.cycles,
		algorithm: [2]float64{m.algorithm[0] - before.algorithm[0], m.algorithm[1] - before.algorithm[1]}, points: map[string][2]float64{}}
	for k, v := range m.points {
		d.points[k] = [2]float64{v[0] - before.points[k][0], v[1] - before.points[k][1]}
	}
	for k, v := range m.attempts {
		if v -= before.attempts[k]; v != 0 {
			d.attempts[k] = v
		}
	}
	return d
}

func (m schedMetrics) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m.attempts)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m.attempts[k]))
	}
	mean := func(sum, n float64) time.Duration {
		if n == 0 {
			return 0
		}
		return time.Duration(sum / n * float64(time.Second)).Round(10 * time.Microsecond)
	}
	pts := []string{fmt.Sprintf("algorithm %v", mean(m.algorithm[0], m.algorithm[1]))}
	for _, k := range []string{"PreFilter", "Filter", "Score", "Reserve", "PreBind", "Bind"} {
		if v := m.points[k]; v[1] > 0 {
			pts = append(pts, fmt.Sprintf("%s %v", k, mean(v[0], v[1])))
		}
	}
	return fmt.Sprintf("attempts: %s; mean attempt to bound %v; mean %s", strings.Join(parts, ", "), mean(m.cycleSum, m.cycles), strings.Join(pts, ", "))
}

var round int

// measure creates warmup pods and waits for them, then creates pods of
// the kind and waits until all are bound.
func (e *env) measure(n int, what string, mig bool, pods int) result {
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
	e.binds.wait(e.t, e.ctx, create(0, warmup, prefix+"warm-"))
	before, cpuBefore := readSchedMetrics(e.t), cpuTime(e.t)
	began := time.Now()
	names := create(0, pods, prefix)
	times := e.binds.wait(e.t, e.ctx, names)
	sched, cpu := readSchedMetrics(e.t).since(before), cpuTime(e.t)-cpuBefore
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	r := result{nodes: n, what: what, pods: pods, total: times[len(times)-1].Sub(began), sched: sched, cpu: cpu / time.Duration(pods)}
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
			close(tr.changed)
			tr.changed = make(chan struct{})
		}
		tr.pods[p.Name] = p
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
