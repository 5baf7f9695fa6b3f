package chart_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/wiring/cli"
	"github.com/dynmig/dynmig/internal/wiring/devconfig"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedplugin"
)

// renderedPath is the chart's checked-in rendering for scheduler.mode
// mode (deploy/helm/charttest keeps both current).
func renderedPath(mode string) string {
	file := "rendered.yaml"
	if mode == "plugin" {
		file = "rendered-plugin.yaml"
	}
	return filepath.Join(cluster.RepoRoot(), "deploy", "helm", "charttest", "testdata", file)
}

// workloads are the kinds the test runs in process instead of applying.
var workloads = map[string]bool{"Deployment": true, "DaemonSet": true}

// install applies every object of the rendering except the workloads, in
// its order, and returns all of its objects.
func install(t *testing.T, ctx context.Context, c *cluster.Cluster, mode string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := cluster.ReadManifests(renderedPath(mode))
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, o := range objs {
		if workloads[o.GetKind()] {
			continue
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	file := filepath.Join(t.TempDir(), "install.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyManifests(ctx, file); err != nil {
		t.Fatalf("install the chart's objects: %v", err)
	}
	return objs
}

// find converts the rendered object of kind and name into out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
}

func container(t *testing.T, spec *corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// arg returns the value of -name=value in the container's args.
func arg(t *testing.T, c corev1.Container, name string) string {
	t.Helper()
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v
		}
	}
	t.Fatalf("container %s has no -%s", c.Name, name)
	return ""
}

func logger(component string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", component)
}

// serveOps serves the operations endpoints as the binaries do, on a free
// loopback port (the chart's ports would collide with parallel test
// packages), until the test ends.
func serveOps(t *testing.T, ops cli.Ops) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr, stop, err := cli.ServeOps(ctx, "127.0.0.1:0", ops)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); stop() })
	return "http://" + addr.String()
}

// get GETs url and returns the status and body; transport errors are
// status 0.
func get(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestChartInstall: dynmig installed from the chart, in either scheduler
// mode, schedules and realizes a MIG pod; with the extender, its /metrics
// reports the instance as HAMi's scheduler does; every component is
// healthy and ready. Once the pod is deleted, the plugin reclaims its
// instance and removes the instance's CDI spec (the chart's cdi-cri).
func TestChartInstall(t *testing.T) {
	for _, mode := range []string{"extender", "plugin"} {
		t.Run(mode, func(t *testing.T) { testChartInstall(t, mode) })
	}
}

// installed is a running installation of the chart: the control plane,
// one GPU node with the device plugin, and the scheduler pod.
type installed struct {
	c         *cluster.Cluster
	admin     kubernetes.Interface
	node      *cluster.Node
	hw        *fakehal.Node // the node's GPUs
	scheduler string        // the scheduler profile's name
	strategy  deviceplugin.DeviceListStrategy
	cdiDir    string // where the device plugin writes its CDI specs
	pluginOps string // the device plugin's operations endpoints
	extOps    string // the extender's, "" in mode plugin
}

func testChartInstall(t *testing.T, mode string) {
	defer http.DefaultClient.CloseIdleConnections()
	ctx := cluster.TestContext(t, 10*time.Minute)
	in := installChart(ctx, t, mode)
	admin, node, pluginOps, extOps := in.admin, in.node, in.pluginOps, in.extOps

	// A MIG pod through the dynmig scheduler, admitted by the kubelet and
	// realized by the plugin.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods("e2e").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{SchedulerName: in.scheduler, Containers: []corev1.Container{{
			Name: "cuda", Image: "cuda:latest",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				kube.ResourceGPU: resource.MustParse("1"), kube.ResourceGPUMem: resource.MustParse("9000"),
			}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocs := in.admitRealized(ctx, t, pod)
	if len(allocs) != 1 {
		t.Fatalf("train holds %d MIG devices, want 1", len(allocs))
	}
	realized := allocs[0]
	if mode == "extender" {
		checkExtenderMetrics(ctx, t, extOps, node.Name, realized)
	}
	code, body := get(ctx, pluginOps+"/metrics")
	for _, want := range []string{"dynmig_gpu_healthy{", "dynmig_deviceplugin_allocation_mismatches_total 0", "go_goroutines"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("device plugin /metrics lacks %q", want)
		}
	}

	// The pod ends: the plugin reclaims its instance and, under a CDI
	// strategy, removes the instance's spec.
	in.end(ctx, t, pod)
	in.checkReclaimed(ctx, t, allocs)
}

// end deletes pod as the kubelet sees it through: a graceful delete, its
// containers terminated, then the final removal.
func (in *installed) end(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := in.admin.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := in.node.Terminate(ctx, pod.Namespace, pod.Name, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := in.node.FinishDeletion(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// checkReclaimed waits until each instance of allocs, whose pod has ended,
// is gone from the hardware and, under a CDI strategy, no spec in the
// plugin's CDI directory names it. A few maintenance passes suffice; the
// wait is bounded well below the test's so that a plugin that keeps a spec
// fails here.
func (in *installed) checkReclaimed(ctx context.Context, t *testing.T, allocs []reservation.Allocation) {
	t.Helper()
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, a := range allocs {
		id, _ := a.Runtime()
		var live, specced bool
		err := cluster.WaitFor(wait, 100*time.Millisecond, "reclamation of "+id.MIGUUID, func(context.Context) (bool, error) {
			live = slices.ContainsFunc(in.hw.Snapshot(), func(gi realize.Instance) bool {
				return slices.ContainsFunc(gi.ComputeInstances, func(ci realize.ComputeInstance) bool { return ci.MIGUUID == id.MIGUUID })
			})
			specced = in.cdiDir != "" && strings.Contains(specText(t, in.cdiDir), id.MIGUUID)
			return !live && !specced, nil
		})
		if err != nil {
			t.Errorf("%v: instance live %v, a CDI spec in %s names it %v", err, live, in.cdiDir, specced)
		}
	}
}

// specText is the content of every file in dir, concatenated.
func specText(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var specs strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		specs.Write(data)
	}
	return specs.String()
}

// installChart installs the chart's rendering for mode and runs its
// components in process with the rendered flags, service accounts and
// configuration, on one node with two fake A100 40GB GPUs; it returns
// once every component is healthy and ready.
func installChart(ctx context.Context, t *testing.T, mode string) *installed {
	t.Helper()
	c := cluster.Start(t, cluster.Options{})
	admin := c.Admin()
	// README's steps before helm install: the privileged namespace.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "dynmig-system", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs := install(t, ctx, c, mode)

	var sched appsv1.Deployment
	find(t, objs, "Deployment", "dynmig-scheduler", &sched)
	var schedConfig corev1.ConfigMap
	find(t, objs, "ConfigMap", "dynmig-scheduler-config", &schedConfig)
	schedFile := filepath.Join(t.TempDir(), "kube-scheduler-config.yaml")
	if err := os.WriteFile(schedFile, []byte(schedConfig.Data["kube-scheduler-config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := cluster.ReadSchedulerConfig(schedFile)
	if err != nil || len(sc.SchedulerNames) != 1 {
		t.Fatalf("the chart's scheduler configuration: %v, %v", sc, err)
	}
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "dynmig-device-plugin", &ds)
	dpC := container(t, &ds.Spec.Template.Spec, "device-plugin")
	var devConfig corev1.ConfigMap
	find(t, objs, "ConfigMap", "dynmig-device-config", &devConfig)
	configFile := arg(t, dpC, "device-config")
	allow, err := devconfig.Parse(configFile, []byte(devConfig.Data[filepath.Base(configFile)]))
	if err != nil {
		t.Fatal(err)
	}

	// The device plugin: the DaemonSet's ServiceAccount, with a token bound
	// to its pod on the node, the DaemonSet's flags and the device config.
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	node, err := c.StartNode(t, "gpu-node-1", cluster.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devconfig.Check(ctx, configFile, hw, allow); err != nil {
		t.Fatal(err)
	}
	ns := ds.Namespace
	pluginPod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dynmig-device-plugin-" + node.Name},
		Spec: corev1.PodSpec{NodeName: node.Name, ServiceAccountName: ds.Spec.Template.Spec.ServiceAccountName,
			Containers: []corev1.Container{{Name: dpC.Name, Image: dpC.Image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Admit(ctx, pluginPod); err != nil {
		t.Fatal(err)
	}
	pluginCfg, err := c.ServiceAccountConfig(ctx, ns, ds.Spec.Template.Spec.ServiceAccountName, cluster.TokenOptions{BoundPod: pluginPod})
	if err != nil {
		t.Fatal(err)
	}
	// The DaemonSet's device-list strategy; its CDI specs go to a
	// directory of the test's, never the machine's -cdi-dir.
	strategy, err := deviceplugin.ParseDeviceListStrategy(arg(t, dpC, "device-list-strategy"))
	if err != nil {
		t.Fatal(err)
	}
	var cdiDir string
	if strategy.CDI() {
		if arg(t, dpC, "cdi-dir") == "" {
			t.Fatalf("the device plugin's strategy %s without -cdi-dir", strategy)
		}
		cdiDir = t.TempDir()
	}
	plugin, err := node.StartPlugin(ctx, t, deviceplugin.Config{
		Client: clientFor(t, pluginCfg), Hardware: hw, Allowlist: allow,
		ResourceName:       arg(t, dpC, "resource"),
		SchedulerNames:     strings.Split(arg(t, dpC, "scheduler-names"), ","),
		DeviceListStrategy: strategy, CDIDir: cdiDir, CDIGenerator: deviceplugin.NewFakeCDI(),
		ReconcileInterval: 300 * time.Millisecond, SocketCheckInterval: 200 * time.Millisecond,
		Logger: logger("device-plugin"),
	})
	if err != nil {
		t.Fatal(err)
	}
	pluginReg, err := cli.NewRegistry(append(plugin.Collectors(), plugin.HealthCollector())...)
	if err != nil {
		t.Fatal(err)
	}
	pluginOps := serveOps(t, cli.Ops{Registry: pluginReg, Ready: func() error {
		select {
		case <-plugin.Ready():
			return nil
		default:
			return errors.New("not registered")
		}
	}})

	// The scheduler pod, on the Deployment's ServiceAccount.
	schedCfg, err := c.ServiceAccountConfig(ctx, sched.Namespace, sched.Spec.Template.Spec.ServiceAccountName, cluster.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	probes := map[string]string{"device plugin": pluginOps}
	var extOps string
	if mode == "plugin" {
		startPluginScheduler(t, c, &sched, schedFile, schedCfg)
	} else {
		extOps = startExtenderScheduler(ctx, t, c, &sched, schedFile, schedCfg)
		probes["extender"] = extOps
	}
	for name, base := range probes {
		for _, probe := range []string{"/healthz", "/readyz"} {
			if err := cluster.WaitFor(ctx, 100*time.Millisecond, name+" "+probe, func(ctx context.Context) (bool, error) {
				code, _ := get(ctx, base+probe)
				return code == http.StatusOK, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}

	return &installed{c: c, admin: admin, node: node, hw: hw, scheduler: sc.SchedulerNames[0], strategy: strategy, cdiDir: cdiDir, pluginOps: pluginOps, extOps: extOps}
}

// admitRealized waits until pod is bound to the node, admits it as the
// kubelet does and waits until every entry of its allocation record has a
// runtime identity; under a CDI strategy it also checks that each
// container's run options name a CDI device whose spec the plugin wrote,
// and each instance has one. It returns the record's entries.
func (in *installed) admitRealized(ctx context.Context, t *testing.T, pod *corev1.Pod) []reservation.Allocation {
	t.Helper()
	var bound *corev1.Pod
	if err := cluster.WaitFor(ctx, 100*time.Millisecond, "pod "+pod.Name+" pending on the node", func(ctx context.Context) (bool, error) {
		pending, err := in.node.PendingPods(ctx)
		if err != nil {
			return false, nil
		}
		for _, p := range pending {
			if p.UID == pod.UID {
				bound = p
			}
		}
		return bound != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	adm, err := in.node.Admit(ctx, bound)
	if err != nil {
		t.Fatal(err)
	}
	var allocs []reservation.Allocation
	if err := cluster.WaitFor(ctx, 100*time.Millisecond, pod.Name+"'s runtime identities", func(ctx context.Context) (bool, error) {
		p, err := in.admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if allocs, err = kube.PodAllocations(p); err != nil || len(allocs) == 0 {
			return false, err
		}
		for _, a := range allocs {
			if _, ok := a.Runtime(); !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if in.cdiDir != "" {
		in.checkCDI(t, adm, allocs)
	}
	return allocs
}

// checkCDI: under cdi-cri the containers of adm were handed one CDI
// device name per instance, and the plugin's CDI directory holds a spec naming each
// realized instance's MIG UUID.
func (in *installed) checkCDI(t *testing.T, adm []cluster.Admission, allocs []reservation.Allocation) {
	t.Helper()
	n := 0
	for _, a := range adm {
		n += len(a.CDIDevices)
	}
	if in.strategy == deviceplugin.DeviceListCDICRI && n != len(allocs) {
		t.Errorf("the containers were handed %d CDI devices for %d MIG instances: %+v", n, len(allocs), adm)
	}
	specs := specText(t, in.cdiDir)
	for _, a := range allocs {
		if id, _ := a.Runtime(); !strings.Contains(specs, id.MIGUUID) {
			t.Errorf("no CDI spec in %s names MIG device %s", in.cdiDir, id.MIGUUID)
		}
	}
}

// startPluginScheduler runs the scheduler pod of mode plugin: our
// kube-scheduler image, alone, with the DynMIG plugin registered as
// schedplugin/cmd/kube-scheduler does.
func startPluginScheduler(t *testing.T, c *cluster.Cluster, sched *appsv1.Deployment, schedFile string, schedCfg *rest.Config) {
	t.Helper()
	spec := &sched.Spec.Template.Spec
	if ks := container(t, spec, "kube-scheduler"); len(spec.Containers) != 1 || !strings.Contains(ks.Image, "/kube-scheduler:") || strings.HasPrefix(ks.Image, "registry.k8s.io/") {
		t.Fatalf("mode plugin's scheduler pod runs %d containers, kube-scheduler image %s", len(spec.Containers), ks.Image)
	}
	if _, err := c.StartSchedulerWith(t, cluster.SchedulerOptions{ConfigFile: schedFile, Client: schedCfg},
		app.WithPlugin(schedplugin.Name, schedplugin.Factory(schedplugin.Options{Logger: logger("schedplugin")}))); err != nil {
		t.Fatal(err)
	}
}

// startExtenderScheduler runs the scheduler pod of mode extender:
// kube-scheduler and the extender sidecar with the Deployment's flags. It
// returns the base URL of the extender's operations endpoints.
func startExtenderScheduler(ctx context.Context, t *testing.T, c *cluster.Cluster, sched *appsv1.Deployment, schedFile string, schedCfg *rest.Config) string {
	t.Helper()
	extC := container(t, &sched.Spec.Template.Spec, "extender")
	extAddr := arg(t, extC, "addr")
	if want, err := cluster.ExtenderAddr(schedFile); err != nil || want != extAddr {
		t.Fatalf("extender -addr=%s, the scheduler calls %s (%v)", extAddr, want, err)
	}
	if host, _, _ := net.SplitHostPort(extAddr); host != "127.0.0.1" {
		t.Errorf("extender -addr=%s, want loopback", extAddr)
	}
	lock, err := time.ParseDuration(arg(t, extC, "lock-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	ext, err := cluster.StartExtender(ctx, t, clientFor(t, schedCfg), extAddr, extender.Options{
		LockTimeout: lock, Resource: corev1.ResourceName(arg(t, extC, "resource")), Logger: logger("extender"),
	})
	if err != nil {
		t.Fatal(err)
	}
	extReg, err := cli.NewRegistry(ext.Collector(), ext.InstanceCollector(reservation.CollectorOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	extOps := serveOps(t, cli.Ops{Registry: extReg, Ready: ext.Ready})
	if _, err := c.StartScheduler(t, cluster.SchedulerOptions{ConfigFile: schedFile, Client: schedCfg}); err != nil {
		t.Fatal(err)
	}
	return extOps
}

// checkExtenderMetrics: the extender exports the realized instance as
// HAMi's scheduler does, and its own series.
func checkExtenderMetrics(ctx context.Context, t *testing.T, extOps, node string, realized reservation.Allocation) {
	t.Helper()
	id, _ := realized.Runtime()
	// The extender exports the realized instance as HAMi's scheduler does.
	var series string
	if err := cluster.WaitFor(ctx, 100*time.Millisecond, "train's hami_node_gpu_mig_instance_info series", func(ctx context.Context) (bool, error) {
		code, body := get(ctx, extOps+"/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, reservation.MetricInstanceInfo+"{") && strings.Contains(line, `mig_uuid="`+id.MIGUUID+`"`) {
				series = line
			}
		}
		return code == http.StatusOK && series != "", nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, label := range []string{
		`node="` + node + `"`, `device_uuid="` + realized.GPUUUID + `"`, `profile="` + realized.Profile + `"`,
		`placement_start="` + itoa(realized.Placement.Start) + `"`, `placement_size="` + itoa(realized.Placement.Size) + `"`,
		`gpu_instance_id="` + itoa(id.GPUInstanceID) + `"`, `compute_instance_id="` + itoa(id.ComputeInstanceID) + `"`,
	} {
		if !strings.Contains(series, label) {
			t.Errorf("series %s lacks %s", series, label)
		}
	}
	t.Logf("extender exports %s", series)
	code, body := get(ctx, extOps+"/metrics")
	for _, want := range []string{"dynmig_scheduler_stale_claims_total 0", "go_goroutines", "process_start_time_seconds"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("extender /metrics lacks %q", want)
		}
	}
}

func itoa[T ~uint32](v T) string { return strconv.FormatUint(uint64(v), 10) }
