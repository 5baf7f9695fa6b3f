package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"
	_ "unsafe" // go:linkname, see newDeviceManager

	cadvisorapi "github.com/google/cadvisor/lib/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// newDeviceManager is the kubelet device manager's own constructor,
// devicemanager.newManagerImpl, which takes the registration socket path.
//
// Why a linkname: the exported devicemanager.NewManagerImpl hard-codes
// /var/lib/kubelet/device-plugins/kubelet.sock, and already constructing it
// creates that directory (its checkpoint manager) and later writes the
// kubelet_internal_checkpoint file there; a test must not write outside its
// temporary directories. The alternative the package offers, registering a
// plugin through GetWatcherHandler with an explicit endpoint, still needs a
// manager from NewManagerImpl, so it does not avoid those writes, and it
// would bypass the registration gRPC service the plugin really calls. With
// the socket path in a temporary directory, everything else is the kubelet's
// code unchanged: the registration server the plugin dials, the
// ListAndWatch client, device selection in Allocate, the checkpoint, and
// GetCapacity. The signature below is that of v1.37.2; startNode refuses
// any other k8s.io/kubernetes version (PinnedKubernetesVersion), so a bump
// fails loudly instead of calling a function with another signature.
//
//go:linkname newDeviceManager k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newDeviceManager(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

// allReady is the kubelet's config.SourcesReady once every pod source
// has been seen: the test's pods come from the API server only.
type allReady struct{}

func (allReady) AddSource(string) {}
func (allReady) AllReady() bool   { return true }

// NodeOptions configures a fake kubelet node. The zero value works.
type NodeOptions struct {
	// Labels are added to the Node object.
	Labels map[string]string
	// StatusInterval is how often the node publishes its device plugin
	// capacity (as the kubelet's node status loop does); 0 means 200 ms.
	StatusInterval time.Duration
}

// Node is a fake kubelet: a Node object, the kubelet's real device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) serving the device-plugin
// registration socket in a temporary directory, a loop that publishes the
// manager's capacity in the Node's status, and admission helpers that call
// the manager exactly as the kubelet's admit handler and container start do.
// No containers run: the test moves pods through their lifecycle with
// Admit, Terminate and FinishDeletion, writing the statuses the kubelet
// would write.
type Node struct {
	// Name is the Node object's name.
	Name string

	c      *Cluster
	client kubernetes.Interface
	dir    string
	logger klog.Logger

	mgrMu sync.Mutex
	mgr   *devicemanager.ManagerImpl

	syncMu sync.Mutex // serialises SyncStatus
	paused bool       // under syncMu: the status loop publishes nothing

	mu       sync.Mutex
	admitted map[types.UID]bool
	lastPods []*corev1.Pod

	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// StartNode creates the Node object name and starts its fake kubelet.
// t.Cleanup stops it (Node.Stop); the Node object stays.
func (c *Cluster) StartNode(t interface {
	Cleanup(func())
}, name string, opts NodeOptions) (*Node, error) {
	if v := KubernetesVersion(); v != PinnedKubernetesVersion {
		return nil, fmt.Errorf("cluster: the fake kubelet's device manager is built for %s %s, this binary has %q", KubernetesModule, PinnedKubernetesVersion, v)
	}
	// Unix socket paths are limited to about 100 bytes: a short directory
	// of its own rather than one under a test's long TempDir.
	dir, err := os.MkdirTemp("", "dynmig-node-")
	if err != nil {
		return nil, err
	}
	n := &Node{
		Name:     name,
		c:        c,
		client:   c.Admin(),
		dir:      dir,
		logger:   klog.Background().WithValues("node", name),
		admitted: make(map[types.UID]bool),
		done:     make(chan struct{}),
	}
	cleanupDir := func() { os.RemoveAll(dir) }

	ctx := context.Background()
	if err := n.createNodeObject(ctx, opts.Labels); err != nil {
		cleanupDir()
		return nil, err
	}
	if n.mgr, err = n.startDeviceManager(); err != nil {
		cleanupDir()
		return nil, err
	}
	interval := opts.StatusInterval
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.statusLoop(loopCtx, interval)
	t.Cleanup(func() {
		n.Stop()
		cleanupDir()
	})
	return n, nil
}

// startDeviceManager builds and starts a device manager serving the
// node's registration socket. Start removes every file in the directory but
// its checkpoint, as the kubelet's does: plugin sockets included.
func (n *Node) startDeviceManager() (*devicemanager.ManagerImpl, error) {
	mgr, err := newDeviceManager(n.logger, n.KubeletSocket(), nil, topologymanager.NewFakeManager(n.logger))
	if err != nil {
		return nil, fmt.Errorf("cluster: device manager: %w", err)
	}
	if err := mgr.Start(n.logger, n.activePods, allReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("cluster: start device manager: %w", err)
	}
	return mgr, nil
}

// manager returns the current device manager.
func (n *Node) manager() *devicemanager.ManagerImpl {
	n.mgrMu.Lock()
	defer n.mgrMu.Unlock()
	return n.mgr
}

// RestartKubelet replaces the device manager with a new one over the same
// directory, as a kubelet restart does: the old one stops (disconnecting
// every plugin), and the new one reads the old one's checkpoint (the
// devices already assigned to containers) and removes the plugins'
// sockets, so each plugin must notice, serve a new socket and register
// again before the node's capacity returns (the new manager reports the
// resource with no device until then). Pods already admitted stay
// admitted. Admit and the status loop use the new manager once it returns.
func (n *Node) RestartKubelet() error {
	n.mgrMu.Lock()
	defer n.mgrMu.Unlock()
	if err := n.mgr.Stop(n.logger); err != nil {
		return fmt.Errorf("cluster: stop device manager: %w", err)
	}
	mgr, err := n.startDeviceManager()
	if err != nil {
		return err
	}
	n.mgr = mgr
	return nil
}

// SocketDir is the node's device-plugin directory, where plugins put their
// sockets (a plugin's Config.SocketDir).
func (n *Node) SocketDir() string { return n.dir }

// KubeletSocket is the registration socket the device manager serves
// (a plugin's Config.KubeletSocket).
func (n *Node) KubeletSocket() string { return filepath.Join(n.dir, "kubelet.sock") }

// DeviceManager returns the kubelet's device manager, for inspection.
// After RestartKubelet it is the new one.
func (n *Node) DeviceManager() *devicemanager.ManagerImpl { return n.manager() }

// Stop stops the status loop and the device manager (which disconnects
// every plugin). It is safe to call more than once.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		n.cancel()
		<-n.done
		if err := n.manager().Stop(n.logger); err != nil {
			n.logger.Error(err, "stopping device manager")
		}
	})
}

func (n *Node) createNodeObject(ctx context.Context, labels map[string]string) error {
	lbl := map[string]string{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}
	for k, v := range labels {
		lbl[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: lbl}}
	created, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cluster: create node %s: %w", n.Name, err)
	}
	base := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	created.Status.Capacity = base.DeepCopy()
	created.Status.Allocatable = base.DeepCopy()
	now := metav1.Now()
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "fake kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if _, err := n.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("cluster: node %s status: %w", n.Name, err)
	}
	return nil
}

// statusLoop publishes the device manager's capacity and allocatable
// counts as the kubelet's node status does; a resource the manager reports
// deleted (its plugin gone past the grace period) is published as zero.
func (n *Node) statusLoop(ctx context.Context, interval time.Duration) {
	defer close(n.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n.syncMu.Lock()
		paused := n.paused
		n.syncMu.Unlock()
		if !paused {
			_ = n.SyncStatus(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PauseStatus stops (true) or resumes (false) the status loop's
// publication; SyncStatus still publishes when called. A real kubelet
// publishes its node status every 10 s by default, so a plugin that
// re-registers within a second of a kubelet or plugin restart is usually
// never seen with no devices; the harness's loop is much faster, and
// pausing it over such a restart models the usual case.
func (n *Node) PauseStatus(pause bool) {
	n.syncMu.Lock()
	n.paused = pause
	n.syncMu.Unlock()
}

// SyncStatus publishes the device manager's capacity in the Node's status
// now; the status loop calls it periodically. Calls are serialised, so
// once one returns no capacity read before it can be published after it.
func (n *Node) SyncStatus(ctx context.Context) error {
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	capacity, allocatable, deleted := n.manager().GetCapacity(n.logger)
	node, err := n.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	changed := false
	set := func(list corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
		if old, ok := list[name]; !ok || !old.Equal(q) {
			list[name] = q
			changed = true
		}
	}
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = corev1.ResourceList{}
	}
	for name, q := range capacity {
		set(node.Status.Capacity, name, q)
	}
	for name, q := range allocatable {
		set(node.Status.Allocatable, name, q)
	}
	for _, name := range deleted {
		set(node.Status.Capacity, corev1.ResourceName(name), resource.MustParse("0"))
		set(node.Status.Allocatable, corev1.ResourceName(name), resource.MustParse("0"))
	}
	if !changed {
		return nil
	}
	_, err = n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// pods lists the pods bound to this node.
func (n *Node) pods(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := n.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// activePods is the kubelet's GetActivePods for the device manager: pods
// bound here that are neither terminal nor deleting with every container
// terminated. The manager frees the devices of pods it does not see here,
// so a failed listing returns the last good one rather than none.
func (n *Node) activePods() []*corev1.Pod {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := n.pods(ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		return n.lastPods
	}
	var active []*corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.DeletionTimestamp != nil && allTerminated(p) {
			continue
		}
		active = append(active, p)
	}
	n.lastPods = active
	return active
}

func allTerminated(p *corev1.Pod) bool {
	statuses := slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
	if len(statuses) == 0 {
		return false
	}
	for _, s := range statuses {
		if s.State.Terminated == nil {
			return false
		}
	}
	return true
}

// Admission is what the device manager handed one admitted container.
type Admission struct {
	Container string
	// Env is the container's environment from the device plugin's
	// AllocateResponse (GetDeviceRunContainerOptions).
	Env map[string]string
	// CDIDevices are the fully qualified CDI device names of the
	// container's run options (a CDI device list strategy).
	CDIDevices []string
}

// AdmissionError is a pod the device manager refused, as the kubelet's
// admit handler reports it (the pod is then marked Failed with reason
// UnexpectedAdmissionError).
type AdmissionError struct {
	Pod       string // namespace/name
	Container string
	Err       error
}

func (e *AdmissionError) Error() string {
	return fmt.Sprintf("cluster: admitting %s container %s: %v", e.Pod, e.Container, e.Err)
}

func (e *AdmissionError) Unwrap() error { return e.Err }

// Admit admits pod as the kubelet does: the device manager's Allocate for
// every container, init containers first, then GetDeviceRunContainerOptions
// for each as the container is started. On success the pod's status becomes
// Running with every container running (init containers completed); on
// failure the pod is marked Failed, reason UnexpectedAdmissionError, and an
// *AdmissionError is returned.
func (n *Node) Admit(ctx context.Context, pod *corev1.Pod) ([]Admission, error) {
	if pod.Spec.NodeName != n.Name {
		return nil, fmt.Errorf("cluster: pod %s/%s is bound to %q, not %s", pod.Namespace, pod.Name, pod.Spec.NodeName, n.Name)
	}
	ctx = klog.NewContext(ctx, n.logger)
	containers := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	fail := func(name string, err error) ([]Admission, error) {
		aerr := &AdmissionError{Pod: pod.Namespace + "/" + pod.Name, Container: name, Err: err}
		n.markAdmitted(pod.UID)
		if serr := n.setStatus(ctx, pod, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason = "UnexpectedAdmissionError"
			p.Status.Message = aerr.Error()
		}); serr != nil {
			return nil, errors.Join(aerr, serr)
		}
		return nil, aerr
	}
	mgr := n.manager()
	for i := range containers {
		if err := mgr.Allocate(ctx, pod, &containers[i], lifecycle.AddOperation); err != nil {
			return fail(containers[i].Name, err)
		}
	}
	var out []Admission
	for i := range containers {
		opts, err := mgr.GetDeviceRunContainerOptions(ctx, pod, &containers[i])
		if err != nil {
			return fail(containers[i].Name, err)
		}
		a := Admission{Container: containers[i].Name, Env: map[string]string{}}
		if opts != nil {
			for _, e := range opts.Envs {
				a.Env[e.Name] = e.Value
			}
			for _, d := range opts.CDIDevices {
				a.CDIDevices = append(a.CDIDevices, d.Name)
			}
		}
		out = append(out, a)
	}
	n.markAdmitted(pod.UID)
	err := n.setStatus(ctx, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		p.Status.InitContainerStatuses = nil
		for _, c := range p.Spec.InitContainers {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: containerID(p, c.Name),
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: containerID(p, c.Name),
				}},
			})
		}
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: containerID(p, c.Name),
				Ready: true, Started: new(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
	})
	return out, err
}

func containerID(p *corev1.Pod, name string) string {
	return "fake://" + string(p.UID) + "/" + name
}

func (n *Node) markAdmitted(uid types.UID) {
	n.mu.Lock()
	n.admitted[uid] = true
	n.mu.Unlock()
}

// Admitted reports whether Admit has been called for the pod.
func (n *Node) Admitted(uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.admitted[uid]
}

// PendingPods returns the pods bound to this node that Admit has not seen,
// not deleting and not terminal, in the order the kubelet admits them:
// creation timestamp, then name.
func (n *Node) PendingPods(ctx context.Context) ([]*corev1.Pod, error) {
	pods, err := n.pods(ctx)
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if n.Admitted(p.UID) || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool {
		ti, tj := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out, nil
}

// Terminate records every container of the pod as terminated with
// exitCode, as the kubelet does once it has stopped them (for a pod being
// deleted, or one whose containers ended). The pod's phase is left alone
// unless terminal is true: then it becomes Succeeded for exit code 0 and
// Failed otherwise.
func (n *Node) Terminate(ctx context.Context, namespace, name string, exitCode int32, terminal bool) error {
	pod, err := n.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return n.setStatus(ctx, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		reason := "Completed"
		if exitCode != 0 {
			reason = "Error"
		}
		term := func(ss []corev1.ContainerStatus) {
			for i := range ss {
				if ss[i].State.Terminated != nil {
					continue
				}
				started := now
				if r := ss[i].State.Running; r != nil {
					started = r.StartedAt
				}
				ss[i].Ready = false
				ss[i].Started = new(false)
				ss[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: exitCode, Reason: reason, StartedAt: started, FinishedAt: now, ContainerID: ss[i].ContainerID,
				}}
			}
		}
		term(p.Status.InitContainerStatuses)
		term(p.Status.ContainerStatuses)
		if terminal {
			p.Status.Phase = corev1.PodSucceeded
			if exitCode != 0 {
				p.Status.Phase = corev1.PodFailed
			}
		}
	})
}

// FinishDeletion removes a deleting pod for good, as the kubelet does once
// its containers are gone: a delete with grace period 0, conditional on
// the pod's UID.
func (n *Node) FinishDeletion(ctx context.Context, pod *corev1.Pod) error {
	zero := int64(0)
	err := n.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// setStatus re-reads the pod and updates its status with mutate, retrying
// on conflicts.
func (n *Node) setStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.Pod)) error {
	for attempt := 0; ; attempt++ {
		cur, err := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return fmt.Errorf("cluster: pod %s/%s was replaced", pod.Namespace, pod.Name)
		}
		mutate(cur)
		_, err = n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) || attempt >= 10 {
			return err
		}
	}
}
