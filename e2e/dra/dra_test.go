package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

const (
	nodeName  = "gpu-node-1"
	namespace = "default" // the example templates' namespace
	// featureGates enables partitionable devices (KEP-4815) explicitly in
	// the API server and kube-scheduler: on by default (beta) in v1.37,
	// and what the driver's shared counters need. resource.k8s.io/v1 and
	// DynamicResourceAllocation are GA.
	featureGates = "--feature-gates=DRAPartitionableDevices=true"
	// examplePod is deploy/dra/claim-example.yaml's pod.
	examplePod = "mig-1g-6gb-example"
	driverSA   = "dynmig-dra-driver"
	driverNS   = "dynmig-system"
)

// schedulerConfig is a plain default-profile KubeSchedulerConfiguration:
// the DynamicResources plugin is in the default profile.
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
`

// TestDRA runs the DRA path of dynmig end to end:
//
//   - kube-apiserver with resource.k8s.io/v1 and DRAPartitionableDevices,
//     deploy/dra's DeviceClass, RBAC and node admission policy applied;
//   - the DRA driver (dradriver, Run) over one fakehal
//     A30, authenticated as its ServiceAccount with a token bound to a
//     driver pod on the node (so deploy/dra/node-policy.yaml admits its
//     writes), publishing ResourceSlices through kubeletplugin's
//     ResourceSlice controller;
//   - the kubelet's own plugin manager (pkg/kubelet/pluginmanager)
//     watching the driver's registrar directory and the kubelet's DRA
//     manager (pkg/kubelet/cm/dra, NewManager with its state in a
//     temporary directory) as the registered handler: prepare and
//     unprepare go through Manager.PrepareResources and
//     Manager.UnprepareResources, which call the driver's
//     NodePrepareResources and NodeUnprepareResources over its DRA socket
//     as the kubelet does before starting and after stopping a pod's
//     containers. The kubelet parts use the admin client;
//   - a default-profile kube-scheduler whose DynamicResources plugin
//     allocates the claims of pods from the published devices and binds
//     the pods;
//   - kube-controller-manager's resourceclaim controller
//     (pkg/controller/resourceclaim), which creates each pod's claim from
//     its ResourceClaimTemplate and unreserves and deallocates it when the
//     pod is gone. No garbage collector runs: the test deletes a
//     deallocated claim whose pod is gone, as it would.
//
// The workload is deploy/dra/claim-example.yaml as it is (its templates
// and its pod, a 1g.6gb claim), and further pods using its templates.
//
// Before the driver starts, the test waits for the kubelet's startup wipe
// of the node's ResourceSlices (a sentinel slice of another driver
// disappears), and checks that the driver's bound token cannot write a
// slice of another node (node-policy.yaml refuses it).
//
// It checks that the scheduler's allocations name the driver's devices,
// the first 1g.6gb device in the published order for the first claim; that
// after prepare fakehal holds exactly the allocated placements and each
// claim's CDI spec names its MIG device's UUID; that with the GPU full a
// further claim's pod stays Pending; that unprepare destroys exactly the
// claim's instance and the freed slot is allocated and realized again for
// the pending pod; and that a restarted driver (a new instance over the
// same directories) adopts every prepared instance, destroys nothing, and
// unprepares through the kubelet afterwards; and that a force-deleted
// pod's device, whose container still runs, stays its instance through
// maintenance and a driver restart while the claim the control plane
// handed it to is refused, until the kubelet unprepares the old claim;
// and that when the allowlist narrows, a prepared device of a dropped
// profile stays published, so its slots are not handed out again.
func TestDRA(t *testing.T) {
	ctx := cluster.TestContext(t, 5*time.Minute)
	start := time.Now()
	c := cluster.Start(t, cluster.Options{APIServerFlags: []string{"--runtime-config=resource.k8s.io/v1=true", featureGates}})
	admin := c.Admin()
	if _, err := c.ApplyManifests(ctx,
		cluster.DeployPath("namespace.yaml"),
		cluster.DeployPath("dra", "deviceclass.yaml"),
		cluster.DeployPath("dra", "rbac.yaml"),
		cluster.DeployPath("dra", "node-policy.yaml"),
	); err != nil {
		t.Fatal(err)
	}
	createNode(t, ctx, admin)
	startClaimController(t, admin)
	t.Logf("control plane up in %v", time.Since(start).Round(time.Millisecond))

	// Short directories: Unix socket paths are limited to about 100 bytes.
	base, err := os.MkdirTemp("", "dynmig-dra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dirs := struct{ reg, data, cdi, kubelet string }{
		filepath.Join(base, "reg"), filepath.Join(base, "p"), filepath.Join(base, "cdi"), filepath.Join(base, "kubelet"),
	}
	for _, d := range []string{dirs.reg, dirs.data, dirs.cdi, dirs.kubelet} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	// The kubelet side first: its DRA plugin manager wipes the node's
	// ResourceSlices when it starts, as a restarted kubelet does. A
	// sentinel slice of another driver on the node shows when that wipe
	// is done, so that it cannot race with the driver's first publication.
	sentinel := createSentinelSlice(t, ctx, admin)
	k := startKubelet(t, admin, dirs.reg, dirs.kubelet)
	if err := cluster.WaitFor(ctx, 50*time.Millisecond, "the kubelet's startup wipe of the node's ResourceSlices", func(ctx context.Context) (bool, error) {
		_, err := admin.ResourceV1().ResourceSlices().Get(ctx, sentinel, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}

	// The driver, as its DaemonSet pod on the node would run it.
	driverPod, err := admin.CoreV1().Pods(driverNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: driverSA + "-" + nodeName},
		Spec: corev1.PodSpec{
			NodeName:           nodeName,
			ServiceAccountName: driverSA,
			Containers:         []corev1.Container{{Name: "driver", Image: "dra-driver:e2e"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	driverCfg, err := c.ServiceAccountConfig(ctx, driverNS, driverSA, cluster.TokenOptions{BoundPod: driverPod})
	if err != nil {
		t.Fatal(err)
	}
	driverClient, err := kubernetes.NewForConfig(driverCfg)
	if err != nil {
		t.Fatal(err)
	}
	checkOwnNodeOnly(t, ctx, driverClient)
	hw := fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30"}})
	cfg := dradriver.Config{
		Node: nodeName, Hardware: hw, Client: driverClient,
		CDIDir: dirs.cdi, DataDir: dirs.data, RegistrarDir: dirs.reg,
		MaintainInterval: time.Second,
	}
	drv := startDriver(t, cfg)
	k.waitRegistered(t, ctx)
	published := waitPublished(t, ctx, admin, drv.d)
	t.Logf("driver registered, %d devices published in %d ResourceSlices, at %v", len(drv.d.Catalog().Devices()), published, time.Since(start).Round(time.Millisecond))

	// The first 1g.6gb device in the published order, before anything is
	// allocated.
	want := firstOfProfile(drv.d.Catalog(), "1g.6gb")
	// The example's templates and its pod (a 1g.6gb claim), which stays
	// Pending until the scheduler starts.
	if _, err := c.ApplyManifests(ctx, cluster.DeployPath("dra", "claim-example.yaml")); err != nil {
		t.Fatal(err)
	}
	schedFile := filepath.Join(t.TempDir(), "kube-scheduler-config.yaml")
	if err := os.WriteFile(schedFile, []byte(schedulerConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartScheduler(t, cluster.SchedulerOptions{ConfigFile: schedFile, Flags: []string{featureGates}}); err != nil {
		t.Fatal(err)
	}

	e := &env{t: t, ctx: ctx, admin: admin, hw: hw, k: k, cdiDir: dirs.cdi, prepared: map[string]dradriver.Partition{}}

	// 1. The example pod's 1g.6gb device: the first one in the
	// published order.
	a := e.waitScheduled(examplePod)
	if got := a.devices[0]; got != want {
		t.Errorf("the example pod's claim allocated %s, want the first published 1g.6gb device %s", got, want)
	}
	e.prepare(a)

	// 2. At least 10 GiB: the smallest profile that fits, 2g.12gb on an A30.
	b := e.schedule("b", "mig-10gi")
	if p := e.partition(b.devices[0]); !strings.HasPrefix(p.Profile, "2g.12gb") {
		t.Errorf("claim b allocated %s (%s), want a 2g.12gb device", b.devices[0], p.Profile)
	}
	e.prepare(b)

	// 3. The last free slot.
	cc := e.schedule("c", "mig-1g-6gb")
	e.prepare(cc)
	t.Logf("GPU full (%d instances) at %v", len(hw.Snapshot()), time.Since(start).Round(time.Millisecond))

	// 4. The GPU is full: a further claim's pod stays Pending.
	e.createPod("d", "mig-1g-6gb")
	e.waitUnschedulable("d")

	// 5. The example pod (a) ends: the kubelet unprepares its claim,
	// which destroys exactly its instance; then the pod and its claim go
	// away.
	e.unprepare(a)
	e.deletePod(a)
	// The freed slot is allocated to the pending pod and realized again.
	d := e.waitScheduled("d")
	if !slices.Equal(d.devices, a.devices) {
		t.Errorf("claim d allocated %v, want the freed device %v", d.devices, a.devices)
	}
	e.prepare(d)
	t.Logf("freed slot reused at %v", time.Since(start).Round(time.Millisecond))

	// 6. Restart the driver: the new instance adopts every prepared
	// instance from its checkpoint; nothing is destroyed or created.
	before := instanceKeys(hw.Snapshot())
	created := hw.Calls(fakehal.OpCreateGI)
	if created != 4 {
		t.Errorf("GPU instances created = %d, want 4 (claims a, b, c, d)", created)
	}
	drv.stop(t)
	drv = startDriver(t, cfg)
	k.waitRegistered(t, ctx)
	waitPublished(t, ctx, admin, drv.d)
	if _, err := drv.d.Maintain(ctx); err != nil {
		t.Errorf("maintenance after restart: %v", err)
	}
	if got := instanceKeys(hw.Snapshot()); !slices.Equal(got, before) {
		t.Errorf("instances after the driver restarted = %v, want %v", got, before)
	}
	if n := hw.Calls(fakehal.OpCreateGI); n != created {
		t.Errorf("GPU instances created after the driver restarted = %d, want 0", n-created)
	}
	if n := hw.Calls(fakehal.OpDestroyGI); n != 1 {
		t.Errorf("GPU instances destroyed = %d, want 1 (claim a's, before the restart)", n)
	}
	if got, want := len(drv.d.Checkpoint().Claims), 3; got != want {
		t.Errorf("restarted driver's checkpoint holds %d claims, want %d", got, want)
	}
	// The kubelet reaches the restarted driver: unprepare through it.
	e.unprepare(b)
	e.deletePod(b)
	t.Logf("restart checked at %v", time.Since(start).Round(time.Millisecond))

	// 7. The GPU falls off the bus: the prepared devices (claims c and d)
	// are tainted NoExecute on the ResourceSlice, and the recovery event
	// removes the taints.
	if err := hw.InjectXid(0, "", 79); err != nil {
		t.Fatal(err)
	}
	tainted := func(ctx context.Context) (map[string]bool, error) {
		l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, s := range l.Items {
			if s.Spec.Driver != dradriver.DriverName {
				continue
			}
			for _, dev := range s.Spec.Devices {
				for _, tt := range dev.Taints {
					if tt.Key == dradriver.TaintKey && tt.Value == "xid-79" && tt.Effect == resourceapi.DeviceTaintEffectNoExecute {
						out[dev.Name] = true
					}
				}
			}
		}
		return out, nil
	}
	if err := cluster.WaitFor(ctx, 50*time.Millisecond, "NoExecute taints on the prepared devices", func(ctx context.Context) (bool, error) {
		got, err := tainted(ctx)
		return err == nil && len(got) == 2 && got[cc.devices[0]] && got[d.devices[0]], nil
	}); err != nil {
		t.Fatal(err)
	}
	// The loss and the recovery are Events on the node, written under the
	// driver's own identity (its RBAC).
	nodeEvent := func(reason string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			l, err := admin.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, ev := range l.Items {
				if ev.Reason == reason && ev.Regarding.Kind == "Node" && ev.Regarding.Name == nodeName && ev.ReportingController == dradriver.EventSource {
					return true, nil
				}
			}
			return false, nil
		}
	}
	if err := cluster.WaitFor(ctx, 50*time.Millisecond, "the GPUUnhealthy Event", nodeEvent(kube.ReasonGPUUnhealthy)); err != nil {
		t.Fatal(err)
	}
	if err := hw.Recover(0); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 50*time.Millisecond, "the GPUHealthy Event", nodeEvent(kube.ReasonGPUHealthy)); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 50*time.Millisecond, "the taints gone after recovery", func(ctx context.Context) (bool, error) {
		got, err := tainted(ctx)
		return err == nil && len(got) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("device taints checked at %v", time.Since(start).Round(time.Millisecond))

	// 8. A force-deleted pod whose container still holds its device: the
	// control plane deallocates its claim and hands the device to a new
	// claim before the kubelet unprepares the old one. First fill the
	// GPU but for c's slot.
	f := e.schedule("f", "mig-10gi")
	e.prepare(f)
	cInst, ok := e.instanceAt(e.partition(cc.devices[0]))
	if !ok {
		t.Fatal("no instance for claim c")
	}
	cMIG := cInst.ComputeInstances[0].MIGUUID
	// c's container still has the device open, between CUDA contexts:
	// NVML shows no process on it, so only the kubelet knows it is in use.
	e.deletePod(cc) // grace 0: the claim is deallocated and deleted at once
	g := e.schedule("g", "mig-1g-6gb")
	if !slices.Equal(g.devices, cc.devices) {
		t.Fatalf("claim g allocated %v, want c's freed device %v", g.devices, cc.devices)
	}
	e.refusedPrepare(g)
	if _, err := drv.d.Maintain(ctx); err != nil {
		t.Errorf("maintenance beside the force-deleted claim: %v", err)
	}
	e.checkHardware() // c's instance is kept: only the kubelet releases it
	// A restart in between changes nothing.
	drv.stop(t)
	drv = startDriver(t, cfg)
	k.waitRegistered(t, ctx)
	waitPublished(t, ctx, admin, drv.d)
	if _, err := drv.d.Maintain(ctx); err != nil {
		t.Errorf("maintenance after restart: %v", err)
	}
	e.checkHardware()
	e.refusedPrepare(g)
	// The container stops; the kubelet unprepares c; g gets a new instance.
	e.unprepare(cc)
	e.prepare(g)
	if gInst, ok := e.instanceAt(e.partition(g.devices[0])); !ok || gInst.ComputeInstances[0].MIGUUID == cMIG {
		t.Errorf("claim g got %+v, want a new instance (c's was %s)", gInst, cMIG)
	}
	t.Logf("force-deleted pod checked at %v", time.Since(start).Round(time.Millisecond))

	// 9. The allowlist narrows to 1g.6gb while f holds a 2g.12gb device
	// and the GPU is full: f's device stays published (retained), so the
	// scheduler hands its slots to no one, until f is unprepared and gone.
	if err := drv.d.SetAllowlist(ctx, capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb"}}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ctx, admin, drv.d)
	if !slices.ContainsFunc(drv.d.Catalog().Devices(), func(d dradriver.PublishedDevice) bool { return d.Retained && d.Name == f.devices[0] }) {
		t.Errorf("f's device %s is not published as retained after the allowlist narrowed", f.devices[0])
	}
	e.createPod("h", "mig-1g-6gb")
	e.waitUnschedulable("h")
	e.unprepare(f)
	e.deletePod(f)
	h := e.waitScheduled("h")
	if p := e.partition(h.devices[0]); p.Placement.Start < 2 {
		t.Errorf("claim h allocated %s, want one of f's freed slots", h.devices[0])
	}
	e.prepare(h)
	t.Logf("narrowed allowlist checked at %v", time.Since(start).Round(time.Millisecond))
}

// refusedPrepare checks that the kubelet's prepare of the pod's claim
// fails (its device is still held by another claim) and changes nothing.
func (e *env) refusedPrepare(s scheduled) {
	e.t.Helper()
	before := instanceKeys(e.hw.Snapshot())
	if err := e.k.mgr.PrepareResources(e.ctx, s.pod); err == nil {
		e.t.Fatalf("kubelet DRA manager: prepare pod %s succeeded on a device another claim still holds", s.pod.Name)
	}
	if got := instanceKeys(e.hw.Snapshot()); !slices.Equal(got, before) {
		e.t.Errorf("instances after a refused prepare = %v, want %v", got, before)
	}
	e.checkHardware()
}

// env is the test's view of the node: hardware, the kubelet's DRA
// manager, and the claims prepared so far.
type env struct {
	t      *testing.T
	ctx    context.Context
	admin  kubernetes.Interface
	hw     *fakehal.Node
	k      *kubelet
	cdiDir string
	// prepared maps a prepared claim's name to its device's partition.
	prepared map[string]dradriver.Partition
}

// scheduled is a pod bound by the scheduler and its claim's allocation.
type scheduled struct {
	pod     *corev1.Pod
	claim   *resourceapi.ResourceClaim
	devices []string
}

func (e *env) createPod(name, template string) {
	e.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: &template}},
			Containers: []corev1.Container{{
				Name: "cuda", Image: "cuda:e2e",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "mig"}}},
			}},
		},
	}
	if _, err := e.admin.CoreV1().Pods(namespace).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// schedule creates a pod with a claim of the template and waits until the
// scheduler has bound it.
func (e *env) schedule(name, template string) scheduled {
	e.t.Helper()
	e.createPod(name, template)
	return e.waitScheduled(name)
}

func (e *env) waitScheduled(name string) scheduled {
	e.t.Helper()
	var s scheduled
	err := cluster.WaitFor(e.ctx, 50*time.Millisecond, "pod "+name+" bound", func(ctx context.Context) (bool, error) {
		pod, err := e.admin.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName == "" {
			return false, nil
		}
		s.pod = pod
		return true, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if s.pod.Spec.NodeName != nodeName {
		e.t.Fatalf("pod %s bound to %q, want %q", name, s.pod.Spec.NodeName, nodeName)
	}
	// The resourceclaim controller's claim for the pod's "mig" claim.
	var claimName string
	for _, st := range s.pod.Status.ResourceClaimStatuses {
		if st.Name == "mig" && st.ResourceClaimName != nil {
			claimName = *st.ResourceClaimName
		}
	}
	if claimName == "" {
		e.t.Fatalf("bound pod %s has no generated claim: %v", name, s.pod.Status.ResourceClaimStatuses)
	}
	claim, err := e.admin.ResourceV1().ResourceClaims(namespace).Get(e.ctx, claimName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	s.claim = claim
	if claim.Status.Allocation == nil {
		e.t.Fatalf("claim %s of bound pod %s has no allocation", claimName, name)
	}
	if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == s.pod.UID }) {
		e.t.Errorf("claim %s reserved for %v, want pod %s", claimName, claim.Status.ReservedFor, s.pod.UID)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != dradriver.DriverName || r.Pool != nodeName || r.Request != "gpu" {
			e.t.Errorf("claim %s allocation result %+v, want request gpu of driver %s in pool %s", claimName, r, dradriver.DriverName, nodeName)
		}
		s.devices = append(s.devices, r.Device)
	}
	if len(s.devices) != 1 {
		e.t.Fatalf("claim %s allocated %v, want one device", claimName, s.devices)
	}
	e.partition(s.devices[0])
	e.t.Logf("pod %s bound; claim %s allocated %s", name, claimName, s.devices[0])
	return s
}

// partition decodes one of the driver's device names.
func (e *env) partition(device string) dradriver.Partition {
	e.t.Helper()
	p, err := dradriver.ParseDeviceName(device)
	if err != nil {
		e.t.Fatalf("allocated device %q is not one of the driver's: %v", device, err)
	}
	return p
}

// waitUnschedulable waits until the scheduler reports the pod
// unschedulable, and checks it is still unbound a moment later.
func (e *env) waitUnschedulable(name string) {
	e.t.Helper()
	err := cluster.WaitFor(e.ctx, 50*time.Millisecond, "pod "+name+" unschedulable", func(ctx context.Context) (bool, error) {
		pod, err := e.admin.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s bound to %s with the GPU full", name, pod.Spec.NodeName)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	time.Sleep(time.Second)
	pod, err := e.admin.CoreV1().Pods(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
		e.t.Fatalf("pod %s: node %q phase %s, want Pending and unbound", name, pod.Spec.NodeName, pod.Status.Phase)
	}
	e.t.Logf("pod %s Pending: unschedulable", name)
}

// prepare prepares the pod's claims through the kubelet's DRA manager and
// checks the hardware and the CDI spec.
func (e *env) prepare(s scheduled) {
	e.t.Helper()
	if err := e.k.mgr.PrepareResources(e.ctx, s.pod); err != nil {
		e.t.Fatalf("kubelet DRA manager: prepare pod %s: %v", s.pod.Name, err)
	}
	infos, err := e.k.mgr.GetContainerClaimInfos(s.pod, &s.pod.Spec.Containers[0])
	if err != nil {
		e.t.Fatal(err)
	}
	var cdiIDs []string
	for _, info := range infos {
		for _, dev := range info.DriverState[dradriver.DriverName].Devices {
			if dev.DeviceName != s.devices[0] || dev.PoolName != nodeName {
				e.t.Errorf("kubelet's claim info for %s names %s/%s, want %s/%s", s.pod.Name, dev.PoolName, dev.DeviceName, nodeName, s.devices[0])
			}
			cdiIDs = append(cdiIDs, dev.CDIDeviceIDs...)
		}
	}
	if len(cdiIDs) != 1 {
		e.t.Fatalf("kubelet's CDI devices for %s = %v, want one", s.pod.Name, cdiIDs)
	}
	p := e.partition(s.devices[0])
	e.prepared[s.pod.Name] = p
	e.checkHardware()
	inst, ok := e.instanceAt(p)
	if !ok {
		e.t.Fatalf("no instance at %s's placement", s.pod.Name)
	}
	e.checkCDI(cdiIDs[0], inst.ComputeInstances[0].MIGUUID)
}

// unprepare unprepares the pod's claims through the kubelet's DRA manager
// (as after its containers stopped) and checks that exactly its instance
// is gone, with its CDI spec.
func (e *env) unprepare(s scheduled) {
	e.t.Helper()
	p := e.prepared[s.pod.Name]
	inst, ok := e.instanceAt(p)
	if !ok {
		e.t.Fatalf("no instance at %s's placement before unprepare", s.pod.Name)
	}
	mig := inst.ComputeInstances[0].MIGUUID
	if err := e.k.mgr.UnprepareResources(e.ctx, s.pod); err != nil {
		e.t.Fatalf("kubelet DRA manager: unprepare pod %s: %v", s.pod.Name, err)
	}
	delete(e.prepared, s.pod.Name)
	e.checkHardware()
	if f := e.cdiFileWith(mig); f != "" {
		e.t.Errorf("CDI spec %s still names %s after unprepare", f, mig)
	}
}

// deletePod deletes the pod (as the kubelet does once its containers
// stopped and its claims are unprepared), waits until the resourceclaim
// controller has unreserved and deallocated its generated claim and
// dropped the claim's finalizer, and deletes the claim, as the garbage
// collector would (its owner, the pod, is gone; no garbage collector runs
// here).
func (e *env) deletePod(s scheduled) {
	e.t.Helper()
	zero := int64(0)
	pods := e.admin.CoreV1().Pods(namespace)
	if err := pods.Delete(e.ctx, s.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		e.t.Fatal(err)
	}
	err := cluster.WaitFor(e.ctx, 50*time.Millisecond, "pod "+s.pod.Name+" deleted", func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, s.pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	claims := e.admin.ResourceV1().ResourceClaims(namespace)
	err = cluster.WaitFor(e.ctx, 50*time.Millisecond, "claim "+s.claim.Name+" deallocated", func(ctx context.Context) (bool, error) {
		c, err := claims.Get(ctx, s.claim.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return len(c.Status.ReservedFor) == 0 && c.Status.Allocation == nil && len(c.Finalizers) == 0, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := claims.Delete(e.ctx, s.claim.Name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// checkHardware checks that fakehal holds exactly the prepared claims'
// placements, each with one compute instance.
func (e *env) checkHardware() {
	e.t.Helper()
	var want []string
	for _, p := range e.prepared {
		want = append(want, e.key(p))
	}
	slices.Sort(want)
	got := instanceKeys(e.hw.Snapshot())
	if !slices.Equal(got, want) {
		e.t.Errorf("fakehal instances = %v, want exactly the prepared placements %v", got, want)
	}
	for _, in := range e.hw.Snapshot() {
		if len(in.ComputeInstances) != 1 {
			e.t.Errorf("instance %s has %d compute instances, want 1", instanceKey(in), len(in.ComputeInstances))
		}
	}
}

// key names a partition as instanceKey names an instance.
func (e *env) key(p dradriver.Partition) string {
	e.t.Helper()
	for i := range e.hw.NumGPUs() {
		if dev, ok := e.hw.Device(i); ok && strings.EqualFold(dev.UUID, p.GPUUUID) {
			return fmt.Sprintf("gpu%d[%d,%d)", i, p.Placement.Start, p.Placement.Start+p.Placement.Size)
		}
	}
	e.t.Fatalf("partition %v names no GPU of the node", p)
	return ""
}

func (e *env) instanceAt(p dradriver.Partition) (realize.Instance, bool) {
	k := e.key(p)
	for _, in := range e.hw.Snapshot() {
		if instanceKey(in) == k && len(in.ComputeInstances) > 0 {
			return in, true
		}
	}
	return realize.Instance{}, false
}

func instanceKey(in realize.Instance) string {
	return fmt.Sprintf("gpu%d[%d,%d)", in.GPU, in.Placement.Start, in.Placement.Start+in.Placement.Size)
}

func instanceKeys(ins []realize.Instance) []string {
	out := make([]string, 0, len(ins))
	for _, in := range ins {
		out = append(out, instanceKey(in))
	}
	slices.Sort(out)
	return out
}

// checkCDI checks that the CDI device the kubelet got is defined in a spec
// in the CDI directory that names the MIG device's UUID.
func (e *env) checkCDI(id, migUUID string) {
	e.t.Helper()
	_, name, ok := strings.Cut(id, "=")
	if !ok {
		e.t.Fatalf("CDI device ID %q is not qualified", id)
	}
	f := e.cdiFileWith(migUUID)
	if f == "" {
		e.t.Fatalf("no CDI spec in the CDI directory names %s", migUUID)
	}
	data, err := os.ReadFile(f)
	if err != nil {
		e.t.Fatal(err)
	}
	if !strings.Contains(string(data), name) {
		e.t.Errorf("CDI spec %s names %s but not the device %s", filepath.Base(f), migUUID, name)
	}
}

// cdiFileWith returns the CDI spec file that contains s, or "".
func (e *env) cdiFileWith(s string) string {
	e.t.Helper()
	ents, err := os.ReadDir(e.cdiDir)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ent := range ents {
		p := filepath.Join(e.cdiDir, ent.Name())
		data, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(data), s) {
			return p
		}
	}
	return ""
}

// firstOfProfile is the catalog's first device of the profile.
func firstOfProfile(cat *dradriver.Catalog, profile string) string {
	for _, d := range cat.Devices() {
		if d.Partition.Profile == profile {
			return d.Name
		}
	}
	return ""
}

// createNode creates a Ready Node object, as the harness's fake kubelet
// does.
func createNode(t *testing.T, ctx context.Context, admin kubernetes.Interface) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{
		"kubernetes.io/hostname": nodeName, "kubernetes.io/os": "linux",
		"nvidia.com/mig.capable": "true", "dynmig.io/dra": "true",
	}}}
	created, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
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
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPublished waits until the API server holds the driver's current
// catalog for the node (every device, once) and returns the number of
// slices.
func waitPublished(t *testing.T, ctx context.Context, admin kubernetes.Interface, d *dradriver.Driver) int {
	t.Helper()
	var n int
	err := cluster.WaitFor(ctx, 50*time.Millisecond, "the driver's ResourceSlices", func(ctx context.Context) (bool, error) {
		cat := d.Catalog()
		if cat == nil {
			return false, nil
		}
		l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		var names []string
		n = 0
		for _, s := range l.Items {
			if s.Spec.Driver != dradriver.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName || s.DeletionTimestamp != nil {
				continue
			}
			n++
			for _, dev := range s.Spec.Devices {
				names = append(names, dev.Name)
			}
		}
		var want []string
		for _, dev := range cat.Devices() {
			want = append(want, dev.Name)
		}
		slices.Sort(names)
		slices.Sort(want)
		return len(want) > 0 && slices.Equal(names, want), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runningDriver is a driver's Run in the background.
type runningDriver struct {
	d      *dradriver.Driver
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startDriver(t *testing.T, cfg dradriver.Config) *runningDriver {
	t.Helper()
	d, err := dradriver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningDriver{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Run and waits for it; Run's error fails the test.
func (r *runningDriver) stop(t *testing.T) {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
		if r.err != nil {
			t.Errorf("driver Run: %v", r.err)
		}
	})
}

// kubelet is the kubelet's DRA side: its plugin manager watching the
// registrar directory with the DRA manager as the DRAPlugin handler.
type kubelet struct {
	mgr     *dra.Manager
	plugins *draplugin.DRAPluginManager
	last    *draplugin.DRAPlugin
}

// neverReady is a config.SourcesReady that never is: the DRA manager's
// reconcile loop, which unprepares the claims of pods that are not active,
// then does nothing (the test calls UnprepareResources itself).
type neverReady struct{}

func (neverReady) AddSource(string) {}
func (neverReady) AllReady() bool   { return false }

type allReady struct{}

func (allReady) AddSource(string) {}
func (allReady) AllReady() bool   { return true }

func startKubelet(t *testing.T, admin kubernetes.Interface, regDir, stateDir string) *kubelet {
	t.Helper()
	logger := klog.Background().WithName("kubelet")
	mgr, err := dra.NewManager(logger, admin, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	getNode := func(ctx context.Context) (*corev1.Node, error) {
		return admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	}
	if err := mgr.Start(ctx, func() []*corev1.Pod { return nil }, getNode, neverReady{}); err != nil {
		cancel()
		t.Fatal(err)
	}
	plugins, ok := mgr.GetWatcherHandler().(*draplugin.DRAPluginManager)
	if !ok {
		cancel()
		mgr.Stop()
		t.Fatalf("DRA manager's watcher handler is a %T", mgr.GetWatcherHandler())
	}
	pm := pluginmanager.NewPluginManager(regDir, &record.FakeRecorder{})
	pm.AddHandler(registerapi.DRAPlugin, plugins)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pm.Run(ctx, allReady{}, stop)
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		cancel()
		mgr.Stop()
	})
	return &kubelet{mgr: mgr, plugins: plugins}
}

// waitRegistered waits until the driver has (again) registered with the
// kubelet: a plugin other than the one seen last.
func (k *kubelet) waitRegistered(t *testing.T, ctx context.Context) {
	t.Helper()
	err := cluster.WaitFor(ctx, 50*time.Millisecond, "the driver's registration with the kubelet", func(context.Context) (bool, error) {
		p, err := k.plugins.GetPlugin(dradriver.DriverName)
		if err != nil || p == k.last {
			return false, nil
		}
		k.last = p
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// createSentinelSlice creates a ResourceSlice of another driver on the
// node and returns its name.
func createSentinelSlice(t *testing.T, ctx context.Context, admin kubernetes.Interface) string {
	t.Helper()
	node := nodeName
	s, err := admin.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sentinel-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   "sentinel.e2e.example.com",
			Pool:     resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
			NodeName: &node,
			Devices:  []resourceapi.Device{{Name: "sentinel"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Name
}

// checkOwnNodeOnly checks that deploy/dra/node-policy.yaml holds for the
// driver's token, bound to its pod on nodeName: a ResourceSlice of
// another node is refused at admission. The policy takes effect shortly
// after it is created, so a slice admitted before then is deleted and the
// write tried again.
func checkOwnNodeOnly(t *testing.T, ctx context.Context, client kubernetes.Interface) {
	t.Helper()
	other := "other-node"
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "forged-" + other},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   dradriver.DriverName,
			Pool:     resourceapi.ResourcePool{Name: other, ResourceSliceCount: 1},
			NodeName: &other,
			Devices:  []resourceapi.Device{{Name: "forged"}},
		},
	}
	err := cluster.WaitFor(ctx, 100*time.Millisecond, "the node admission policy to refuse another node's slice", func(ctx context.Context) (bool, error) {
		_, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
		switch {
		case err == nil:
			// Admitted before the policy took effect.
			_ = client.ResourceV1().ResourceSlices().Delete(ctx, slice.Name, metav1.DeleteOptions{})
			return false, nil
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			t.Logf("driver's slice for %s refused: %v", other, err)
			return true, nil
		default:
			return false, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startClaimController runs kube-controller-manager's resourceclaim
// controller (k8s.io/kubernetes/pkg/controller/resourceclaim) with the
// admin client: it creates each pod's claims from their templates, and
// deallocates and deletes them when the pod is gone.
func startClaimController(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	logger := klog.Background().WithName("resourceclaim-controller")
	factory := informers.NewSharedInformerFactory(admin, 0)
	ctrl, err := resourceclaim.NewController(logger, admin,
		factory.Core().V1().Pods(),
		// Used only with the GenericWorkload feature, off by default.
		factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrl.Run(ctx, 2)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
}
