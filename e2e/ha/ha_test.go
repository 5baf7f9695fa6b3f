package ha_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// The failover timing of the test's scheduler replicas: shorter than the
// deployed lease, so that the standby takes over within seconds of the
// leader's death, and still leaseDuration - renewDeadline >= the
// extender's httpTimeout (5s), the rule the deployed extender
// configuration states so that an extender call of the old leader ends
// before the new leader's first (the plugin's configuration needs no such
// bound). The renew deadline leaves the leader twice the 3 s it once
// missed on a loaded CI machine before it gives the lease up. Only these,
// the kubeconfig and the extender URL's port differ from the deployed
// configuration.
var leaderElection = map[string]any{
	"leaseDuration": "11s",
	"renewDeadline": "6s",
	"retryPeriod":   "500ms",
}

const (
	haNodes     = 4
	gpusPerNode = 2
	firstBatch  = 10 // pods created before the leader is killed
	secondBatch = 6  // pods created after
	// holdMarker names the pod whose creation the standby's pod watches
	// are held after (see podGate).
	holdMarker = "e2e-standby-holds-after-me"
)

// TestLeaderKilledMidStream shows that the deployed scheduler HA schemes
// neither double-book nor lose a pod when the leader dies in the middle of
// a stream of MIG pods. It runs once per deployment: leader-elected
// kube-scheduler replicas each with the extender as a localhost sidecar
// (subtest "extender"), and leader-elected replicas of kube-scheduler
// built with the DynMIG framework plugin (subtest "plugin").
//
// Two replicas run as subprocesses with the deployment's shipped
// KubeSchedulerConfiguration (short leases) and the deployed scheduler
// ServiceAccount and RBAC. Replica a starts first and takes the Lease;
// replica b is the standby. Four fake kubelet nodes, two fakehal A100s
// each, run the device plugin; a kubelet loop per node admits every pod
// bound to it (the device plugin realizes the reservation on the fake
// GPUs, which refuse an overlapping placement as NVML does).
//
// The standby's pod watch stalls: the pod watches of its dynmig component
// (the extender's informers, or with the plugin the scheduler's own,
// which DynMIG's view is fed from) are held from the moment it has seen
// the first batch of MIG pods created, all pending on cordoned nodes,
// until it has made its first binding or its first consistent read of a
// node's pods as the leader (podGate; node
// watches and listings stay current). The nodes are uncordoned, the
// leader binds one pod per node (a node takes one unrealized MIG pod at a
// time, and the kubelets do not admit yet) and is killed with SIGKILL;
// the kubelets start. So when b takes over, its view shows every node
// free and lacks all of a's binds, and it decides on that view: only
// dynmig's consistent read of the node's pods in each bind (the
// extender's and DynMIG's alike) keeps it from handing out a's
// placements again (either test fails without it). Once b has bound a
// pod, or read a node's pods to decide a bind (where a's unrealized pod
// then keeps it off the node), its watches catch up, and a second batch
// of MIG pods follows. The waits are on events.
//
// Claims: the standby takes over and binds; every pod of both batches is
// eventually bound, admitted and realized (no pod lost, no admission
// failure); no two pods' reservations overlap on a GPU (no placement
// reserved twice), every reservation is a placement the node published;
// and each node's fake GPUs hold exactly the pods' instances, with the MIG
// UUIDs written back to them, and pass fakehal's invariant check.
func TestLeaderKilledMidStream(t *testing.T) {
	for _, d := range []struct{ kind, config string }{
		{kindExtender, cluster.SchedulerConfigPath()},
		{kindPlugin, cluster.PluginSchedulerConfigPath()},
	} {
		t.Run(d.kind, func(t *testing.T) { leaderKilledMidStream(t, d.kind, d.config) })
	}
}

// leaderKilledMidStream is TestLeaderKilledMidStream for the deployment
// kind with the shipped configuration config.
func leaderKilledMidStream(t *testing.T, kind, config string) {
	ctx := cluster.TestContext(t, 10*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	admin := c.Admin()

	nodes := make([]*haNode, haNodes)
	for i := range nodes {
		nodes[i] = startNode(ctx, t, c, fmt.Sprintf("ha-%d", i), uint64(i+1))
		nodes[i].cordon(ctx, t, admin, true)
	}

	base, schedulerName, lease := pairTemplate(ctx, t, c, config)
	a := startPair(t, base, kind, "a")
	waitFor(ctx, t, "pair a leading", func(ctx context.Context) (bool, error) {
		l, err := c.Admin().CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	b := startPair(t, base, kind, "b", holdAfterEnv+"="+holdMarker)
	pairs := []*pair{a, b}

	var names []string
	for i := range firstBatch {
		names = append(names, createPod(ctx, t, admin, schedulerName, i))
	}
	createMarker(ctx, t, admin, holdMarker)
	waitFor(ctx, t, "the standby's pod watches held", b.holding)

	for _, n := range nodes {
		n.cordon(ctx, t, admin, false)
	}
	waitFor(ctx, t, "the leader's binds, one per node", func(ctx context.Context) (bool, error) {
		n, err := countBound(ctx, admin, names)
		return n >= haNodes, err
	})
	if leader := findLeader(ctx, t, pairs); leader != a {
		t.Fatalf("pair %s leads, want a, the only one running when the Lease was taken", leader.name)
	}
	t.Logf("killing leader a (%d binding calls) with SIGKILL", a.binds(ctx))
	a.kill(t)
	standby := b

	kubelets, stopKubelets := context.WithCancel(ctx)
	var wg sync.WaitGroup
	admission := &failures{}
	for _, n := range nodes {
		wg.Go(func() { n.admitLoop(kubelets, admission) })
	}
	t.Cleanup(func() { stopKubelets(); wg.Wait() })
	heartbeat(ctx, t, admin, nodes)

	waitFor(ctx, t, "the standby's first binding or consistent node read", func(ctx context.Context) (bool, error) {
		return standby.binds(ctx) > 0 || standby.count(ctx, readsPath) > 0, nil
	})
	standby.release(ctx, t)
	for i := firstBatch; i < firstBatch+secondBatch; i++ {
		names = append(names, createPod(ctx, t, admin, schedulerName, i))
	}
	if err := cluster.WaitFor(ctx, 100*time.Millisecond, "every pod running", func(ctx context.Context) (bool, error) {
		return allRunning(ctx, admin, names, admission)
	}); err != nil {
		logPods(t, admin)
		t.Fatal(err)
	}
	if err := admission.err(); err != nil {
		t.Fatalf("admission failed: %v", err)
	}
	if n := standby.binds(ctx); n == 0 {
		t.Errorf("standby %s bound nothing after the leader died", standby.name)
	}

	checkReservations(ctx, t, admin, names, nodes)
}

// heartbeat updates a label on every node each second until the test
// ends. kube-scheduler retries a pod its extender rejected only on a
// cluster event; the standby's view catches up without one, and real
// nodes post status changes all the time, which these stand for.
// (DynMIG's queueing hints ignore a label change; the plugin's view
// catches up through the scheduler's own informers, whose events it
// requeues on.)
func heartbeat(ctx context.Context, t *testing.T, client kubernetes.Interface, nodes []*haNode) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for beat := 0; ; beat++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			body := fmt.Appendf(nil, `{"metadata":{"labels":{"e2e.dynmig.io/heartbeat":"%d"}}}`, beat)
			for _, n := range nodes {
				_, _ = client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, body, metav1.PatchOptions{})
			}
		}
	}()
}

// haNode is a fake kubelet node with its fake GPUs and device plugin.
type haNode struct {
	*cluster.Node
	hw   *fakehal.Node
	gpus []capability.GPU // as the node publishes them
}

func startNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, seed uint64) *haNode {
	t.Helper()
	n, err := c.StartNode(t, name, cluster.NodeOptions{})
	if err != nil {
		t.Fatalf("start node %s: %v", name, err)
	}
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(gpusPerNode, fakehal.DefaultModel), Seed: seed})
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "device-plugin", "node", name)
	}
	if _, err := n.StartPlugin(ctx, t, deviceplugin.Config{Client: c.Admin(), Hardware: hw, ReconcileInterval: time.Second, Logger: log}); err != nil {
		t.Fatalf("start device plugin on %s: %v", name, err)
	}
	hn := &haNode{Node: n, hw: hw}
	admin := c.Admin()
	waitFor(ctx, t, "node "+name+" registration and capacity", func(ctx context.Context) (bool, error) {
		node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		gpus, err := kube.NodeGPUs(node)
		if err != nil || len(gpus) != gpusPerNode {
			return false, nil
		}
		q := node.Status.Allocatable[kube.ResourceGPU]
		if q.IsZero() {
			return false, nil
		}
		hn.gpus = gpus
		return true, nil
	})
	return hn
}

// cordon marks the node unschedulable, or schedulable again, as kubectl
// cordon and uncordon do: kube-scheduler's NodeUnschedulable plugin keeps
// pods off it, and requeues them when it is uncordoned.
func (hn *haNode) cordon(ctx context.Context, t *testing.T, client kubernetes.Interface, on bool) {
	t.Helper()
	body := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	if _, err := client.CoreV1().Nodes().Patch(ctx, hn.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordon %s (%v): %v", hn.Name, on, err)
	}
}

// admitLoop is the node's kubelet: it admits every pod bound to the node,
// in the kubelet's order, until ctx is done. Admission errors are recorded.
func (n *haNode) admitLoop(ctx context.Context, fails *failures) {
	for {
		pods, err := n.PendingPods(ctx)
		if err == nil {
			for _, p := range pods {
				if _, err := n.Admit(ctx, p); err != nil && ctx.Err() == nil {
					fails.add(fmt.Errorf("node %s, pod %s: %w", n.Name, p.Name, err))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type failures struct {
	mu   sync.Mutex
	errs []error
}

func (f *failures) add(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

func (f *failures) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// pairTemplate writes the configuration every replica starts from: the
// shipped KubeSchedulerConfiguration config with a kubeconfig for the
// deployed scheduler ServiceAccount (deploy/namespace.yaml and
// deploy/rbac/scheduler.yaml are applied first) and short leases. It
// returns the file, the scheduler name pods must name and the Lease the
// replicas elect their leader with.
func pairTemplate(ctx context.Context, t *testing.T, c *cluster.Cluster, config string) (string, string, types.NamespacedName) {
	t.Helper()
	raw, err := readYAML(config)
	if err != nil {
		t.Fatalf("deployed scheduler configuration: %v", err)
	}
	objs, err := c.ApplyManifests(ctx, cluster.DeployPath("namespace.yaml"), cluster.DeployPath("rbac", "scheduler.yaml"))
	if err != nil {
		t.Fatalf("apply deploy manifests: %v", err)
	}
	var sa *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			sa = o
		}
	}
	if sa == nil {
		t.Fatal("deploy/rbac/scheduler.yaml has no ServiceAccount")
	}
	cfg, err := c.ServiceAccountConfig(ctx, sa.GetNamespace(), sa.GetName(), cluster.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := c.WriteKubeconfig("ha-scheduler", cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := raw["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = kc
	raw["clientConnection"] = conn
	le, _ := raw["leaderElection"].(map[string]any)
	if le == nil {
		le = map[string]any{}
	}
	for k, v := range leaderElection {
		le[k] = v
	}
	raw["leaderElection"] = le
	lease := types.NamespacedName{Namespace: "kube-system", Name: "kube-scheduler"} // kube-scheduler's defaults
	if ns, _ := le["resourceNamespace"].(string); ns != "" {
		lease.Namespace = ns
	}
	if n, _ := le["resourceName"].(string); n != "" {
		lease.Name = n
	}

	name := corev1.DefaultSchedulerName
	if profiles, _ := raw["profiles"].([]any); len(profiles) > 0 {
		if p, _ := profiles[0].(map[string]any); p != nil {
			if n, _ := p["schedulerName"].(string); n != "" {
				name = n
			}
		}
	}
	path := filepath.Join(c.Dir, "ha-"+pairConfig)
	if err := writeYAML(path, raw); err != nil {
		t.Fatal(err)
	}
	return path, name, lease
}

// pair is a scheduler replica subprocess (runPair).
type pair struct {
	name string
	addr string // where it serves bindsPath
	cmd  *exec.Cmd
	log  string

	waitOnce sync.Once
	waitErr  error
}

// startPair re-executes the test binary as a scheduler replica of the
// given kind (TestMain, runPair) with the configuration template, and
// waits until it serves. t.Cleanup kills it and shows its log when the
// test failed.
func startPair(t *testing.T, template, kind, name string, env ...string) *pair {
	t.Helper()
	dir := filepath.Join(filepath.Dir(template), "pair-"+name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(template)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pairConfig), data, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+roleScheduler, pairDirEnv+"="+dir, pairKindEnv+"="+kind)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pair %s: %v", name, err)
	}
	p := &pair{name: name, cmd: cmd, log: logPath}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = p.wait()
		if t.Failed() {
			if out, err := os.ReadFile(logPath); err == nil {
				t.Logf("log of scheduler pair %s (last 64 KiB):\n%s", name, tail(out, 64<<10))
			}
		}
	})
	ctx := cluster.TestContext(t, 10*time.Minute)
	waitFor(ctx, t, "pair "+name+" serving", func(context.Context) (bool, error) {
		addr, err := os.ReadFile(filepath.Join(dir, pairAddr))
		if err != nil {
			return false, nil
		}
		p.addr = string(addr)
		return true, nil
	})
	return p
}

func (p *pair) wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.cmd.Wait() })
	return p.waitErr
}

// kill stops the pair with SIGKILL, as a node failure or an OOM kill
// would, and waits for the process to be gone.
func (p *pair) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatalf("kill pair %s: %v", p.name, err)
	}
	_ = p.wait()
}

// binds returns the bindings the pair's dynmig component made (bind
// calls its extender received, or pods/binding calls its kube-scheduler
// made); 0 when it cannot be asked.
func (p *pair) binds(ctx context.Context) int64 { return p.count(ctx, bindsPath) }

// count returns the number the pair serves at path (bindsPath,
// readsPath); 0 when it cannot be asked.
func (p *pair) count(ctx context.Context, path string) int64 {
	s, err := ask(ctx, http.MethodGet, p.addr, path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// holding reports whether the pair's pod watches are held (podGate).
func (p *pair) holding(ctx context.Context) (bool, error) {
	s, err := ask(ctx, http.MethodGet, p.addr, holdPath)
	return err == nil && s == "true", nil
}

// release lets the pair's held pod watches catch up.
func (p *pair) release(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := ask(ctx, http.MethodPost, p.addr, holdPath); err != nil {
		t.Fatalf("release the pod watches of pair %s: %v", p.name, err)
	}
}

// findLeader returns the pair that has made bindings: only the leading
// kube-scheduler schedules.
func findLeader(ctx context.Context, t *testing.T, pairs []*pair) *pair {
	t.Helper()
	var leader *pair
	waitFor(ctx, t, "a leader that bound pods", func(ctx context.Context) (bool, error) {
		var active []*pair
		for _, p := range pairs {
			if p.binds(ctx) > 0 {
				active = append(active, p)
			}
		}
		if len(active) > 1 {
			return false, fmt.Errorf("both replicas bound pods before any failover")
		}
		if len(active) == 1 {
			leader = active[0]
		}
		return leader != nil, nil
	})
	return leader
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// podSizes are the MIG requests of the stream, in MiB of GPU memory: on
// an A100-40GB the smallest covering profiles are 1g.5gb, 2g.10gb and
// 3g.20gb.
var podSizes = []string{"4000", "4000", "9000", "4000", "19000", "4000", "9000", "4000"}

func createPod(ctx context.Context, t *testing.T, client kubernetes.Interface, scheduler string, i int) string {
	t.Helper()
	name := fmt.Sprintf("mig-%02d", i)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name,
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.example/workload:1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					kube.ResourceGPU:    resource.MustParse("1"),
					kube.ResourceGPUMem: resource.MustParse(podSizes[i%len(podSizes)]),
				}},
			}},
		},
	}
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return name
}

// createMarker creates a pod named name that no scheduler serves: the
// standby's pod watches are held after its creation (podGate).
func createMarker(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName: "e2e-no-scheduler",
			Containers:    []corev1.Container{{Name: "main", Image: "registry.example/marker:1"}},
		},
	}
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// logPods logs where every pod stands, for a failed wait.
func logPods(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	list, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("list pods: %v", err)
		return
	}
	for _, p := range list.Items {
		t.Logf("pod %s: node %q, phase %s, record %s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Annotations[reservation.AnnotationKey])
	}
}

func countBound(ctx context.Context, client kubernetes.Interface, names []string) (int, error) {
	list, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, nil // transient
	}
	n := 0
	for _, p := range list.Items {
		if slices.Contains(names, p.Name) && p.Spec.NodeName != "" {
			n++
		}
	}
	return n, nil
}

// allRunning reports whether every named pod is Running; a pod that
// failed admission ends the wait with the admission errors.
func allRunning(ctx context.Context, client kubernetes.Interface, names []string, fails *failures) (bool, error) {
	if err := fails.err(); err != nil {
		return false, err
	}
	list, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil
	}
	running := 0
	for _, p := range list.Items {
		if slices.Contains(names, p.Name) && p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	return running == len(names), nil
}

// checkReservations checks the end state: every pod's record is valid,
// realized, on a GPU of its node at a placement the node published, no
// two records overlap, and each node's hardware holds exactly the
// recorded instances.
func checkReservations(ctx context.Context, t *testing.T, client kubernetes.Interface, names []string, nodes []*haNode) {
	t.Helper()
	byName := map[string]*haNode{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	type held struct {
		pod string
		a   reservation.Allocation
	}
	perGPU := map[string][]held{}
	perNode := map[string][]string{} // MIG UUIDs recorded per node
	for _, name := range names {
		pod, err := client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s: %v", name, err)
		}
		node := byName[pod.Spec.NodeName]
		if node == nil {
			t.Errorf("pod %s bound to unknown node %q", name, pod.Spec.NodeName)
			continue
		}
		allocs, err := kube.PodAllocations(pod)
		if err != nil || len(allocs) != 1 {
			t.Errorf("pod %s: record %q: %d entries, err %v; want 1 valid entry", name, pod.Annotations[reservation.AnnotationKey], len(allocs), err)
			continue
		}
		a := allocs[0]
		id, ok := a.Runtime()
		if !ok {
			t.Errorf("pod %s: reservation %v not realized", name, a)
			continue
		}
		if !published(node.gpus, a) {
			t.Errorf("pod %s: reservation %v is not a placement node %s published", name, a, node.Name)
		}
		for _, other := range perGPU[a.GPUUUID] {
			if overlaps(other.a.Placement, a.Placement) {
				t.Errorf("placement reserved twice: pod %s holds %v, pod %s holds %v", other.pod, other.a, name, a)
			}
		}
		perGPU[a.GPUUUID] = append(perGPU[a.GPUUUID], held{name, a})
		perNode[node.Name] = append(perNode[node.Name], id.MIGUUID)
	}
	for _, n := range nodes {
		if err := n.hw.Check(); err != nil {
			t.Errorf("node %s hardware: %v", n.Name, err)
		}
		var live []string
		for _, in := range n.hw.Snapshot() {
			for _, ci := range in.ComputeInstances {
				live = append(live, ci.MIGUUID)
			}
		}
		slices.Sort(live)
		want := slices.Sorted(slices.Values(perNode[n.Name]))
		if !slices.Equal(live, want) {
			t.Errorf("node %s: live MIG devices %v, want the pods' %v", n.Name, live, want)
		}
	}
}

func published(gpus []capability.GPU, a reservation.Allocation) bool {
	for _, g := range gpus {
		if g.UUID != a.GPUUUID {
			continue
		}
		for _, p := range g.Profiles {
			if p.Name == a.Profile && slices.Contains(p.Placements, a.Placement) {
				return true
			}
		}
	}
	return false
}

// overlaps reports whether half-open slot intervals [start, start+size)
// share a slot.
func overlaps(x, y capability.Placement) bool {
	return x.Start < y.Start+y.Size && y.Start < x.Start+x.Size
}

// waitFor polls cond every 100 ms until it holds, failing the test when
// cond errs or ctx (bounded by the binary's -timeout) ends first.
func waitFor(ctx context.Context, t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := cluster.WaitFor(ctx, 100*time.Millisecond, what, cond); err != nil {
		t.Fatal(err)
	}
}
