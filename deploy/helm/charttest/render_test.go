package charttest_test

import (
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// objects renders the chart and decodes every document strictly (an
// unknown or misspelt field fails) into client-go's types; kinds client-go
// does not know (ServiceMonitor) come back unstructured.
func objects(t *testing.T, opts charttest.Options) []runtime.Object {
	t.Helper()
	docs, err := render(opts)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var out []runtime.Object
	for _, doc := range docs {
		obj, gvk, err := strict.Decode([]byte(doc), nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			out = append(out, u)
			continue
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		_ = gvk
		out = append(out, obj)
	}
	return out
}

func only[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func named[T interface {
	runtime.Object
	GetName() string
}](t *testing.T, objs []runtime.Object, name string) T {
	t.Helper()
	for _, o := range only[T](objs) {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T named %s", zero, name)
	return zero
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

// argValue returns the value of -name=value in args.
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// checkOps: the container serves /metrics, /healthz and /readyz on the port
// its probes and its port named metrics use.
func checkOps(t *testing.T, c corev1.Container) {
	t.Helper()
	addr, ok := argValue(c.Args, "metrics-addr")
	if !ok {
		t.Errorf("%s: no -metrics-addr", c.Name)
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "9400" {
		t.Errorf("%s: -metrics-addr=%s (9400 is dcgm-exporter's)", c.Name, addr)
	}
	var metrics int32
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metrics = p.ContainerPort
		}
	}
	if strconv.Itoa(int(metrics)) != port {
		t.Errorf("%s: port metrics %d, -metrics-addr %s", c.Name, metrics, addr)
	}
	for what, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != what || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s: no %s probe on port metrics", c.Name, what)
		}
	}
	if f, _ := argValue(c.Args, "log-format"); f != "json" {
		t.Errorf("%s: -log-format=%q", c.Name, f)
	}
}

// TestDefaults renders the chart as helm install with no values does.
func TestDefaults(t *testing.T) {
	objs := objects(t, charttest.Options{KubeVersion: "v1.37.2"})
	sched := named[*appsv1.Deployment](t, objs, "dynmig-scheduler")
	if *sched.Spec.Replicas != 2 {
		t.Errorf("scheduler replicas %d", *sched.Spec.Replicas)
	}
	spec := &sched.Spec.Template.Spec
	if img := container(t, spec, "kube-scheduler").Image; img != "registry.k8s.io/kube-scheduler:v1.37.2" {
		t.Errorf("kube-scheduler image %s, want the cluster's version", img)
	}
	ext := container(t, spec, "extender")
	if ext.Image != testRegistry+"/scheduler-extender:0.1.0" {
		t.Errorf("extender image %s", ext.Image)
	}
	addr, _ := argValue(ext.Args, "addr")
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Errorf("extender -addr=%s, want loopback", addr)
	}
	checkOps(t, ext)

	// The scheduler configuration calls the extender where it listens, and
	// names the profile and Lease the plugin and RBAC expect.
	cm := named[*corev1.ConfigMap](t, objs, "dynmig-scheduler-config")
	var cfg struct {
		LeaderElection struct {
			LeaderElect                     bool
			ResourceName, ResourceNamespace string
		} `json:"leaderElection"`
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
		Extenders []struct {
			URLPrefix        string `json:"urlPrefix"`
			BindVerb         string `json:"bindVerb"`
			ManagedResources []struct {
				Name               string `json:"name"`
				IgnoredByScheduler bool   `json:"ignoredByScheduler"`
			} `json:"managedResources"`
		} `json:"extenders"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["kube-scheduler-config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Extenders) != 1 || cfg.Extenders[0].URLPrefix != "http://"+addr || cfg.Extenders[0].BindVerb != "bind" {
		t.Errorf("extenders %+v, want one at http://%s binding", cfg.Extenders, addr)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "dynmig-scheduler" {
		t.Errorf("profiles %+v", cfg.Profiles)
	}
	le := cfg.LeaderElection
	if !le.LeaderElect || le.ResourceName != "dynmig-scheduler" || le.ResourceNamespace != "dynmig-system" {
		t.Errorf("leader election %+v", le)
	}
	role := named[*rbacv1.Role](t, objs, "dynmig-scheduler-leader-election")
	if !slices.Contains(role.Rules[0].ResourceNames, le.ResourceName) {
		t.Errorf("leader election Role names %v, want the Lease %s", role.Rules[0].ResourceNames, le.ResourceName)
	}

	// The device plugin reads the device config ConfigMap the chart makes,
	// at the path its flag names.
	ds := named[*appsv1.DaemonSet](t, objs, "dynmig-device-plugin")
	dp := container(t, &ds.Spec.Template.Spec, "device-plugin")
	checkOps(t, dp)
	if b, _ := argValue(dp.Args, "backend"); b != "nvml" {
		t.Errorf("device plugin -backend=%q", b)
	}
	if s, _ := argValue(dp.Args, "scheduler-names"); s != "dynmig-scheduler" {
		t.Errorf("device plugin -scheduler-names=%q", s)
	}
	file, _ := argValue(dp.Args, "device-config")
	checkConfigMount(t, objs, &ds.Spec.Template.Spec, dp, file, -1)
	if len(only[*appsv1.DaemonSet](objs)) != 1 {
		t.Error("the DRA driver is off by default")
	}
	policy := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, "dynmig-device-plugin-own-node")
	if want := "system:serviceaccount:dynmig-system:" + ds.Spec.Template.Spec.ServiceAccountName; !strings.Contains(policy.Spec.MatchConditions[0].Expression, "'"+want+"'") {
		t.Errorf("node policy matches %q, want %s", policy.Spec.MatchConditions[0].Expression, want)
	}
	for _, svc := range []string{"dynmig-scheduler-metrics", "dynmig-device-plugin-metrics"} {
		named[*corev1.Service](t, objs, svc)
	}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			t.Errorf("unexpected %s by default", u.GetKind())
		}
	}
}

// checkConfigMount: the file the flag names is the ConfigMap's key in a
// directory mount of it (so updates reach it), and its content parses as a
// device config with entries allowlist entries (-1: the default).
func checkConfigMount(t *testing.T, objs []runtime.Object, spec *corev1.PodSpec, c corev1.Container, file string, entries int) {
	t.Helper()
	var cmName string
	for _, m := range c.VolumeMounts {
		if m.MountPath != path.Dir(file) || m.SubPath != "" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cmName = v.ConfigMap.Name
			}
		}
	}
	if cmName == "" {
		t.Fatalf("%s: -device-config=%s is in no ConfigMap directory mount", c.Name, file)
	}
	cm := named[*corev1.ConfigMap](t, objs, cmName)
	data, ok := cm.Data[path.Base(file)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cmName, path.Base(file))
	}
	cfg, err := capability.ParseDeviceConfig([]byte(data))
	if err != nil {
		t.Fatalf("device config does not parse: %v\n%s", err, data)
	}
	if entries < 0 && cfg.Allowlist != nil || entries >= 0 && len(cfg.Allowlist) != entries {
		t.Errorf("device config has %d entries (nil %v), want %d:\n%s", len(cfg.Allowlist), cfg.Allowlist == nil, entries, data)
	}
}

func TestKubeSchedulerTag(t *testing.T) {
	for _, tc := range []struct {
		kube, tag, want string
	}{
		{"v1.34.1", "", "v1.34.1"},
		{"v1.33.5-eks-1a2b3c", "", "v1.33.5"},
		{"v1.36.0+k3s1", "", "v1.36.0"},
		{"v1.37.2", "v1.36.9", "v1.36.9"},
	} {
		vals := map[string]any{"scheduler": map[string]any{"kubeScheduler": map[string]any{"tag": tc.tag}}}
		objs := objects(t, charttest.Options{KubeVersion: tc.kube, Values: vals})
		sched := named[*appsv1.Deployment](t, objs, "dynmig-scheduler")
		if img := container(t, &sched.Spec.Template.Spec, "kube-scheduler").Image; img != "registry.k8s.io/kube-scheduler:"+tc.want {
			t.Errorf("cluster %s, tag %q: image %s, want tag %s", tc.kube, tc.tag, img, tc.want)
		}
	}
}

// TestValues: the values a platform engineer sets reach the objects.
func TestValues(t *testing.T) {
	vals := map[string]any{
		"images":           map[string]any{"registry": "registry.example.com/dynmig", "tag": "v9.9.9"},
		"imagePullSecrets": []any{map[string]any{"name": "pull"}},
		"runtimeClassName": "nvidia",
		"hostPaths":        map[string]any{"kubeletRoot": "/data/kubelet", "cdiDir": "/etc/cdi"},
		"deviceConfig": map[string]any{"migProfileAllowlist": []any{
			map[string]any{"models": []any{"A100"}, "profiles": []any{"1g.10gb", "3g.40gb"}},
		}},
		"devicePlugin": map[string]any{
			"nodeSelector":      map[string]any{"dynmig.io/node": "true"},
			"tolerations":       []any{map[string]any{"key": "gpu", "operator": "Exists"}},
			"priorityClassName": "gpu-critical",
			"resources":         map[string]any{"limits": map[string]any{"memory": "256Mi"}},
		},
		"scheduler": map[string]any{"replicas": 1, "name": "mig-scheduler",
			"affinity": map[string]any{"nodeAffinity": map[string]any{}}},
		"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}},
	}
	objs := objects(t, charttest.Options{KubeVersion: "v1.35.0", Values: vals,
		APIVersions: []string{"monitoring.coreos.com/v1/ServiceMonitor"}})
	ds := named[*appsv1.DaemonSet](t, objs, "dynmig-device-plugin")
	spec := &ds.Spec.Template.Spec
	dp := container(t, spec, "device-plugin")
	if dp.Image != "registry.example.com/dynmig/device-plugin:v9.9.9" {
		t.Errorf("image %s", dp.Image)
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" || spec.PriorityClassName != "gpu-critical" ||
		spec.NodeSelector["dynmig.io/node"] != "true" || len(spec.Tolerations) != 1 || len(spec.ImagePullSecrets) != 1 ||
		dp.Resources.Limits.Memory().String() != "256Mi" {
		t.Errorf("pod spec does not carry the values: %+v", spec)
	}
	if s, _ := argValue(dp.Args, "socket-dir"); s != "/data/kubelet/device-plugins" {
		t.Errorf("-socket-dir=%s", s)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && !strings.HasPrefix(v.HostPath.Path, "/data/kubelet/") && v.HostPath.Path != "/etc/cdi" {
			t.Errorf("host path %s outside the kubelet root", v.HostPath.Path)
		}
	}
	if s, _ := argValue(dp.Args, "scheduler-names"); s != "mig-scheduler" {
		t.Errorf("-scheduler-names=%s", s)
	}
	file, _ := argValue(dp.Args, "device-config")
	checkConfigMount(t, objs, spec, dp, file, 1)
	var headless []*corev1.Service
	for _, svc := range only[*corev1.Service](objs) {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = append(headless, svc)
		}
	}
	if len(headless) != 2 {
		t.Error("want the metrics Services")
	}
	sched := named[*appsv1.Deployment](t, objs, "dynmig-scheduler")
	if *sched.Spec.Replicas != 1 || sched.Spec.Template.Spec.Affinity.NodeAffinity == nil {
		t.Errorf("scheduler replicas %d, affinity %+v", *sched.Spec.Replicas, sched.Spec.Template.Spec.Affinity)
	}
	if len(only[*corev1.ConfigMap](objs)) != 2 || len(only[*appsv1.Deployment](objs)) != 1 {
		t.Error("objects missing")
	}
	var monitors []*unstructured.Unstructured
	for _, u := range only[*unstructured.Unstructured](objs) {
		if u.GetKind() == "ServiceMonitor" {
			monitors = append(monitors, u)
		}
	}
	if len(monitors) != 1 || monitors[0].GetLabels()["release"] != "prom" {
		t.Fatalf("ServiceMonitors %v", monitors)
	}
	sel, _, _ := unstructured.NestedStringMap(monitors[0].Object, "spec", "selector", "matchLabels")
	// Each pod once: the headless Services, not the NodePort in front of
	// the extenders.
	for _, svc := range only[*corev1.Service](objs) {
		selected := true
		for k, v := range sel {
			selected = selected && svc.Labels[k] == v
		}
		if headless := svc.Spec.ClusterIP == corev1.ClusterIPNone; selected != headless {
			t.Errorf("ServiceMonitor selector %v: selects Service %s (headless %v): %v", sel, svc.Name, headless, selected)
		}
	}
}

// TestDRADriver: the DRA driver instead of the device plugin.
func TestDRADriver(t *testing.T) {
	vals := map[string]any{"draDriver": map[string]any{"enabled": true}, "devicePlugin": map[string]any{"enabled": false}}
	objs := objects(t, charttest.Options{KubeVersion: "v1.34.0", Values: vals})
	dss := only[*appsv1.DaemonSet](objs)
	if len(dss) != 1 || dss[0].Name != "dynmig-dra-driver" {
		t.Fatalf("DaemonSets %v, want the DRA driver only", dss)
	}
	spec := &dss[0].Spec.Template.Spec
	c := container(t, spec, "driver")
	checkOps(t, c)
	file, _ := argValue(c.Args, "device-config")
	checkConfigMount(t, objs, spec, c, file, -1)
	found := false
	for _, o := range objs {
		if o.GetObjectKind().GroupVersionKind().Kind == "DeviceClass" {
			found = true
		}
	}
	if !found {
		t.Error("no DeviceClass")
	}
	named[*admissionv1.ValidatingAdmissionPolicy](t, objs, "dynmig-dra-driver-own-node")
}

// TestAdmissionPolicy: the routing policy, in the API version the cluster
// serves.
func TestAdmissionPolicy(t *testing.T) {
	for _, tc := range []struct {
		kube string
		apis []string
		want string
	}{
		{"v1.36.0", []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}, "admissionregistration.k8s.io/v1"},
		{"v1.35.0", []string{"admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}, "admissionregistration.k8s.io/v1beta1"},
		// helm template without a cluster: the version decides.
		{"v1.36.0", nil, "admissionregistration.k8s.io/v1"},
	} {
		vals := map[string]any{"admissionPolicy": map[string]any{"enabled": true}}
		objs := objects(t, charttest.Options{KubeVersion: tc.kube, APIVersions: tc.apis, Values: vals})
		var kinds []string
		for _, o := range objs {
			gvk := o.GetObjectKind().GroupVersionKind()
			if strings.HasPrefix(gvk.Kind, "MutatingAdmissionPolicy") {
				kinds = append(kinds, gvk.GroupVersion().String()+"/"+gvk.Kind)
			}
		}
		want := []string{tc.want + "/MutatingAdmissionPolicy", tc.want + "/MutatingAdmissionPolicyBinding"}
		if !slices.Equal(kinds, want) {
			t.Errorf("APIs %v: %v, want %v", tc.apis, kinds, want)
		}
	}
	objs := objects(t, charttest.Options{KubeVersion: "v1.36.0", APIVersions: []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"},
		Values: map[string]any{"admissionPolicy": map[string]any{"enabled": true}}})
	p := named[*admissionv1.MutatingAdmissionPolicy](t, objs, "dynmig-route-to-scheduler")
	expr := fmt.Sprint(p.Spec.Mutations[0].ApplyConfiguration.Expression)
	if !strings.Contains(expr, `schedulerName: "dynmig-scheduler"`) {
		t.Errorf("mutation %s", expr)
	}
	b := named[*admissionv1.MutatingAdmissionPolicyBinding](t, objs, "dynmig-route-to-scheduler")
	if b.Spec.PolicyName != p.Name {
		t.Errorf("binding names %s", b.Spec.PolicyName)
	}
}

// TestSchedulerConfigMatchesDeploy: the chart's kube-scheduler
// configuration is, with default values, deploy/scheduler/kube-scheduler-config.yaml
// (which deploy's tests decode strictly as kube-scheduler does and check
// against the extender's routes) and, in mode plugin,
// schedplugin/deploy/kube-scheduler-config.yaml (which schedplugin's
// TestDeployConfig loads with kube-scheduler's own loader).
func TestSchedulerConfigMatchesDeploy(t *testing.T) {
	repo := filepath.Join(charttest.ChartDir(), "..", "..", "..")
	for _, tc := range []struct {
		mode, file string
	}{
		{"extender", filepath.Join(repo, "deploy", "scheduler", "kube-scheduler-config.yaml")},
		{"plugin", filepath.Join(repo, "schedplugin", "deploy", "kube-scheduler-config.yaml")},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			objs := objects(t, charttest.Options{KubeVersion: "v1.37.2",
				Values: map[string]any{"scheduler": map[string]any{"mode": tc.mode}}})
			cm := named[*corev1.ConfigMap](t, objs, "dynmig-scheduler-config")
			var chart, deploy map[string]any
			if err := yaml.Unmarshal([]byte(cm.Data["kube-scheduler-config.yaml"]), &chart); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(data, &deploy); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(chart, deploy) {
				t.Errorf("chart's scheduler configuration\n%v\ndiffers from %s\n%v", chart, tc.file, deploy)
			}
		})
	}
}

// TestPluginMode: scheduler.mode plugin runs our kube-scheduler image with
// no extender sidecar (and so no extender metrics Service), on the plugin's
// resources; another mode is refused when rendering.
func TestPluginMode(t *testing.T) {
	objs := objects(t, charttest.Options{KubeVersion: "v1.37.2",
		Values: map[string]any{"scheduler": map[string]any{"mode": "plugin"}}})
	sched := named[*appsv1.Deployment](t, objs, "dynmig-scheduler")
	spec := &sched.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("scheduler pod has %d containers, want kube-scheduler alone", len(spec.Containers))
	}
	ks := container(t, spec, "kube-scheduler")
	if ks.Image != testRegistry+"/kube-scheduler:0.1.0" {
		t.Errorf("kube-scheduler image %s, want the plugin scheduler of the chart's version", ks.Image)
	}
	if mem := ks.Resources.Requests.Memory().String(); mem != "256Mi" {
		t.Errorf("kube-scheduler memory request %s, want the plugin's", mem)
	}
	for _, svc := range only[*corev1.Service](objs) {
		if svc.Name == "dynmig-scheduler-metrics" {
			t.Errorf("mode plugin renders the extender's metrics Service")
		}
	}
	if _, err := render(charttest.Options{KubeVersion: "v1.37.2",
		Values: map[string]any{"scheduler": map[string]any{"mode": "sidecar"}}}); err == nil {
		t.Errorf("scheduler.mode sidecar rendered")
	}
}
