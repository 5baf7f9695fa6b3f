package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// modelPod is one pod of the restart model.
type modelPod struct {
	name    string
	start   uint32 // its record's placement [start, start+1) on GPU 0
	forger  bool   // created with spec.nodeName preset and a copied record
	mig     string // the MIG device the plugin handed it, once admitted
	settled bool   // admitted (running) or rejected by the kubelet
	ended   bool
}

// restartModel drives a real plugin over a fake API server and fake
// hardware: pods bound by the scheduler with their record, kubelet
// admission, owners stripping their runtime identities, forgers copying a
// running pod's placement or MIG UUID into a pod created with the node
// preset, and plugin restarts that keep, lose or corrupt the checkpoint.
type restartModel struct {
	client *fake.Clientset
	hw     *fakehal.Node
	gpu    string
	ckpt   string
	dir    string
	pods   []*modelPod
	plugin *deviceplugin.Plugin
	conn   v1beta1.DevicePluginClient
	stop   func()
	n      int
}

func (m *restartModel) start(t *rapid.T) {
	cfg := deviceplugin.Config{Node: "n1", Client: m.client, Hardware: m.hw, SocketDir: m.dir, Checkpoint: m.ckpt,
		ReconcileInterval: 5 * time.Millisecond, Manager: realize.Options{LeakInterval: time.Nanosecond}}
	if os.Getenv("DYNMIG_MODEL_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	p, err := deviceplugin.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("plugin stopped during startup: %v", err)
	}
	conn, err := grpc.NewClient("unix://"+p.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		<-done
		t.Fatal(err)
	}
	m.plugin, m.conn = p, v1beta1.NewDevicePluginClient(conn)
	m.stop = func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("plugin run: %v", err)
		}
	}
}

// pending returns the pod the kubelet admits next: the earliest created
// that is not settled.
func (m *restartModel) pending() *modelPod {
	for _, p := range m.pods {
		if !p.settled && !p.ended {
			return p
		}
	}
	return nil
}

func (m *restartModel) get(t *rapid.T, name string) *corev1.Pod {
	p, err := m.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (m *restartModel) updateStatus(t *rapid.T, name string, edit func(*corev1.PodStatus)) {
	p := m.get(t, name)
	edit(&p.Status)
	if _, err := m.client.CoreV1().Pods("default").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (m *restartModel) claimed(start uint32) bool {
	return slices.ContainsFunc(m.pods, func(p *modelPod) bool { return !p.ended && p.start == start })
}

// arrive: the scheduler binds a pod with its record on a free slot.
func (m *restartModel) arrive(t *rapid.T) {
	var free []uint32
	for s := uint32(0); s < 7; s++ {
		if !m.claimed(s) {
			free = append(free, s)
		}
	}
	if len(free) == 0 || m.pending() != nil { // one unrealized pod per node, as the extender keeps it
		t.Skip("no free slot, or a pod is pending")
	}
	start := rapid.SampledFrom(free).Draw(t, "slot")
	m.n++
	name := fmt.Sprintf("p%d", m.n)
	pod := boundPod(name, reservation.Allocation{GPUUUID: m.gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}})
	pod.Spec.SchedulerName = deviceplugin.DefaultSchedulerName
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	if _, err := m.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.pods = append(m.pods, &modelPod{name: name, start: start})
}

// admit: the kubelet's Allocate for the next pod, then its status.
func (m *restartModel) admit(t *rapid.T) {
	p := m.pending()
	if p == nil {
		t.Skip("nothing pending")
	}
	resp, err := allocate(context.Background(), m.conn, "id")
	if p.forger {
		// A copy is refused while the pod it copies runs; once that
		// one ended, the copy is a pod bound with a record of its own.
		victimRuns := slices.ContainsFunc(m.pods, func(o *modelPod) bool { return o != p && o.start == p.start && !o.ended && o.mig != "" })
		if err == nil && victimRuns {
			t.Fatalf("forger %s was admitted with %v", p.name, resp.ContainerResponses[0].Envs)
		}
		if err != nil {
			// The kubelet rejects it. The next Allocate waits until the
			// plugin saw that, as the kubelet admits one pod at a time.
			p.settled, p.ended = true, true
			m.updateStatus(t, p.name, func(st *corev1.PodStatus) { st.Phase = corev1.PodFailed })
			m.barrier(t)
			return
		}
	}
	// A slot freed by a pod that just ended may still hold its instance
	// until the plugin's next pass reclaims it: the Allocate is retried.
	for deadline := time.Now().Add(eventually); err != nil && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		resp, err = allocate(context.Background(), m.conn, "id")
	}
	if err != nil {
		t.Fatalf("Allocate for %s: %v", p.name, err)
	}
	mig := resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
	for _, o := range m.pods {
		if o.mig == mig && !o.ended {
			t.Fatalf("%s was handed %s, which %s holds", p.name, mig, o.name)
		}
	}
	allocs, err := kube.PodAllocations(m.get(t, p.name))
	if err != nil || len(allocs) != 1 {
		t.Fatalf("%s's record: %v %v", p.name, allocs, err)
	}
	if id, ok := allocs[0].Runtime(); !ok || id.MIGUUID != mig {
		t.Fatalf("%s was handed %s but its record names %v", p.name, mig, allocs[0])
	}
	p.mig, p.settled = mig, true
	m.updateStatus(t, p.name, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodRunning
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://" + p.name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
}

// barrier returns once the plugin's pod cache holds every write made
// before it: it creates a pod that requests nothing and waits until the
// plugin's checkpoint records its first observation (one watch delivers
// events in order).
func (m *restartModel) barrier(t *rapid.T) {
	m.n++
	name := fmt.Sprintf("b%d", m.n)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}}}
	if _, err := m.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(eventually)
	for {
		c, _, err := deviceplugin.ReadCheckpoint(m.ckpt)
		if err == nil && slices.ContainsFunc(c.Pods, func(p deviceplugin.PodObservation) bool { return p.UID == "uid-"+name }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin never observed %s: %v", name, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func (m *restartModel) running(t *rapid.T) *modelPod {
	var live []*modelPod
	for _, p := range m.pods {
		if p.mig != "" && !p.ended {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		t.Skip("nothing runs")
	}
	return rapid.SampledFrom(live).Draw(t, "running pod")
}

// strip: an owner deletes the runtime identity from its record.
func (m *restartModel) strip(t *rapid.T) {
	p := m.running(t)
	pod := m.get(t, p.name)
	allocs, err := kube.PodAllocations(pod)
	if err != nil {
		t.Fatal(err)
	}
	for i := range allocs {
		allocs[i] = allocs[i].Scheduled()
	}
	pod.Annotations[reservation.AnnotationKey] = reservation.EncodeString(allocs)
	if _, err := m.client.CoreV1().Pods("default").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// forge: a pod created with the node preset copies a running pod's
// placement, or its MIG UUID at a free slot.
func (m *restartModel) forge(t *rapid.T) {
	if m.pending() != nil {
		t.Skip("a pod is pending")
	}
	victim := m.running(t)
	a := reservation.Allocation{GPUUUID: m.gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: victim.start, Size: 1}}
	start := victim.start
	if rapid.Bool().Draw(t, "copy the MIG UUID") {
		allocs, err := kube.PodAllocations(m.get(t, victim.name))
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := allocs[0].Runtime(); ok {
			a = a.WithRuntime(id)
		}
	}
	m.n++
	name := fmt.Sprintf("f%d", m.n)
	pod := boundPod(name, a)
	if _, err := m.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.pods = append(m.pods, &modelPod{name: name, start: start, forger: true})
}

// end: a running pod finishes.
func (m *restartModel) end(t *rapid.T) {
	p := m.running(t)
	p.ended = true
	m.updateStatus(t, p.name, func(st *corev1.PodStatus) { st.Phase = corev1.PodSucceeded })
}

// restart: the plugin restarts with its checkpoint kept, lost, or
// corrupted (it refuses to start; the operator removes the file).
func (m *restartModel) restart(t *rapid.T) {
	m.stop()
	switch rapid.SampledFrom([]string{"kept", "lost", "corrupted"}).Draw(t, "checkpoint") {
	case "lost":
		if err := os.Remove(m.ckpt); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	case "corrupted":
		if err := os.WriteFile(m.ckpt, []byte(`{"version":1,"pods":[{"uid":`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: m.client, Hardware: m.hw, SocketDir: m.dir, Checkpoint: m.ckpt})
		if !errors.Is(err, deviceplugin.ErrCheckpoint) {
			t.Fatalf("New on a corrupted checkpoint: %v, want ErrCheckpoint", err)
		}
		if err := os.Remove(m.ckpt); err != nil {
			t.Fatal(err)
		}
	}
	m.start(t)
}

// check: every running pod's device is live, the hardware is legal.
func (m *restartModel) check(t *rapid.T) {
	live := liveMIGs(m.hw)
	for _, p := range m.pods {
		if p.mig != "" && !p.ended && !slices.Contains(live, p.mig) {
			t.Fatalf("running pod %s lost its device %s", p.name, p.mig)
		}
	}
	if err := m.hw.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestRestartModel checks that restarts of the plugin, with its
// checkpoint kept, lost or corrupted, between any two steps of owners
// stripping identities and forgers copying records, never hand one device
// to two pods, never destroy a running pod's device, never admit a forger,
// and that once every pod ended the hardware is empty again.
func TestRestartModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dir, err := os.MkdirTemp("", "dynmig-model-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		hw := fakehal.MustNew(fakehal.Options{})
		d, _ := hw.Device(0)
		m := &restartModel{client: kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}),
			hw: hw, gpu: d.UUID, dir: dir, ckpt: filepath.Join(dir, "checkpoint.json")}
		m.start(t)
		defer func() { m.stop() }()
		t.Repeat(map[string]func(*rapid.T){
			"arrive":  m.arrive,
			"admit":   m.admit,
			"strip":   m.strip,
			"forge":   m.forge,
			"end":     m.end,
			"restart": m.restart,
			"":        m.check,
		})
		// Every pod ends; the node is emptied.
		for _, p := range m.pods {
			if !p.ended {
				p.ended = true
				m.updateStatus(t, p.name, func(st *corev1.PodStatus) { st.Phase = corev1.PodSucceeded })
			}
		}
		deadline := time.Now().Add(eventually)
		for len(liveMIGs(hw)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("instances left after every pod ended: %v", liveMIGs(hw))
			}
			time.Sleep(time.Millisecond)
		}
	})
}
