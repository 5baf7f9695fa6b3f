package charttest_test

import (
	"io"
	"log"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// everything enables every component: the scheduler, the device plugin
// and the DRA driver on separate pools, the admission policy and the
// ServiceMonitor.
func everything(mode string) charttest.Options {
	return charttest.Options{
		KubeVersion: "v1.37.2",
		APIVersions: []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "monitoring.coreos.com/v1/ServiceMonitor"},
		Values: map[string]any{
			"scheduler":       map[string]any{"mode": mode},
			"devicePlugin":    map[string]any{"nodeSelector": map[string]any{"pool": "dp"}},
			"draDriver":       map[string]any{"enabled": true, "nodeSelector": map[string]any{"pool": "dra"}},
			"admissionPolicy": map[string]any{"enabled": true},
			"metrics":         map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
		},
	}
}

// podSpecs returns the pod template of every Deployment and DaemonSet, by
// workload name.
func podSpecs(objs []runtime.Object) map[string]*corev1.PodSpec {
	out := map[string]*corev1.PodSpec{}
	for _, d := range only[*appsv1.Deployment](objs) {
		out[d.Name] = &d.Spec.Template.Spec
	}
	for _, d := range only[*appsv1.DaemonSet](objs) {
		out[d.Name] = &d.Spec.Template.Spec
	}
	return out
}

// images returns the image of every container of every workload.
func images(objs []runtime.Object) []string {
	var out []string
	for _, spec := range podSpecs(objs) {
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			out = append(out, c.Image)
		}
	}
	return out
}

// TestResources: every container of every component, in both modes, has
// CPU and memory requests and a memory limit.
func TestResources(t *testing.T) {
	for _, mode := range []string{"extender", "plugin"} {
		for name, spec := range podSpecs(objects(t, everything(mode))) {
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				r := c.Resources
				if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
					t.Errorf("mode %s: %s container %s: resources %v, want CPU and memory requests and a memory limit", mode, name, c.Name, r)
				}
			}
		}
	}
}

// TestExtraArgsEnv: each component's extraArgs follow the chart's flags
// in its container, and its extraEnv is in the container's environment.
func TestExtraArgsEnv(t *testing.T) {
	extra := func(n string) map[string]any {
		return map[string]any{"extraArgs": []any{"-extra=" + n}, "extraEnv": []any{map[string]any{"name": "EXTRA", "value": n}}}
	}
	for _, tc := range []struct {
		mode, workload, container string
		vals                      map[string]any
	}{
		{"extender", "dynmig-scheduler", "kube-scheduler", map[string]any{"scheduler": map[string]any{"kubeScheduler": extra("ks")}}},
		{"plugin", "dynmig-scheduler", "kube-scheduler", map[string]any{"scheduler": map[string]any{"kubeScheduler": extra("ks")}}},
		{"extender", "dynmig-scheduler", "extender", map[string]any{"scheduler": map[string]any{"extender": extra("ext")}}},
		{"extender", "dynmig-device-plugin", "device-plugin", map[string]any{"devicePlugin": extra("dp")}},
		{"extender", "dynmig-dra-driver", "driver", map[string]any{"draDriver": extra("dra")}},
	} {
		opts := everything(tc.mode)
		for k, v := range tc.vals {
			merged := map[string]any{}
			if old, ok := opts.Values[k].(map[string]any); ok {
				for ok, ov := range old {
					merged[ok] = ov
				}
			}
			for nk, nv := range v.(map[string]any) {
				merged[nk] = nv
			}
			opts.Values[k] = merged
		}
		spec := podSpecs(objects(t, opts))[tc.workload]
		if spec == nil {
			t.Fatalf("%s: no workload %s", tc.mode, tc.workload)
		}
		c := container(t, spec, tc.container)
		args := slices.Concat(c.Command, c.Args)
		if len(args) == 0 || !strings.HasPrefix(args[len(args)-1], "-extra=") {
			t.Errorf("%s %s/%s: args %v, want the extra flag last", tc.mode, tc.workload, tc.container, args)
		}
		found := false
		for _, e := range c.Env {
			found = found || (e.Name == "EXTRA" && strings.HasSuffix(args[len(args)-1], "="+e.Value))
		}
		if !found {
			t.Errorf("%s %s/%s: env %v lacks EXTRA", tc.mode, tc.workload, tc.container, c.Env)
		}
	}
	if err := renderErr("v1.37.2", nil, map[string]any{"devicePlugin": map[string]any{"extraArgs": []any{7}}}); err == nil || !strings.Contains(err.Error(), "/devicePlugin/extraArgs") {
		t.Errorf("extraArgs [7]: %v", err)
	}
	if err := renderErr("v1.37.2", nil, map[string]any{"draDriver": map[string]any{"extraEnv": []any{map[string]any{"value": "x"}}}}); err == nil || !strings.Contains(err.Error(), "/draDriver/extraEnv") {
		t.Errorf("extraEnv without a name: %v", err)
	}
}

// TestSchedulerPod: the scheduler runs at system-cluster-critical and its
// kube-scheduler container has a readiness probe on /readyz, in both
// modes.
func TestSchedulerPod(t *testing.T) {
	for _, mode := range []string{"extender", "plugin"} {
		spec := podSpecs(objects(t, everything(mode)))["dynmig-scheduler"]
		if spec.PriorityClassName != "system-cluster-critical" {
			t.Errorf("mode %s: priorityClassName %q", mode, spec.PriorityClassName)
		}
		p := container(t, spec, "kube-scheduler").ReadinessProbe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port != intstr.FromString("https") || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("mode %s: kube-scheduler readiness probe %+v", mode, p)
		}
	}
}

// TestLabels: every object the chart renders, with every component on,
// carries app.kubernetes.io/name and app.kubernetes.io/version (the
// chart's appVersion), and so does every pod template.
func TestLabels(t *testing.T) {
	for _, mode := range []string{"extender", "plugin"} {
		objs := objects(t, everything(mode))
		for _, o := range objs {
			m, ok := o.(metav1.Object)
			if !ok {
				u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
				if err != nil {
					t.Fatal(err)
				}
				m = &metav1.ObjectMeta{Name: "unstructured", Labels: labelsOf(u)}
			}
			checkLabels(t, mode, o.GetObjectKind().GroupVersionKind().Kind+" "+m.GetName(), m.GetLabels())
		}
		for name, spec := range podSpecs(objs) {
			_ = spec
			checkLabels(t, mode, "pod template of "+name, templateLabels(objs, name))
		}
	}
}

func checkLabels(t *testing.T, mode, what string, labels map[string]string) {
	t.Helper()
	if labels["app.kubernetes.io/name"] == "" || labels["app.kubernetes.io/version"] != "0.1.0" {
		t.Errorf("mode %s: %s: labels %v lack app.kubernetes.io/name or version", mode, what, labels)
	}
}

func labelsOf(u map[string]any) map[string]string {
	meta, _ := u["metadata"].(map[string]any)
	raw, _ := meta["labels"].(map[string]any)
	out := map[string]string{}
	for k, v := range raw {
		out[k], _ = v.(string)
	}
	return out
}

func templateLabels(objs []runtime.Object, name string) map[string]string {
	for _, d := range only[*appsv1.Deployment](objs) {
		if d.Name == name {
			return d.Spec.Template.Labels
		}
	}
	for _, d := range only[*appsv1.DaemonSet](objs) {
		if d.Name == name {
			return d.Spec.Template.Labels
		}
	}
	return nil
}

// TestSchedulerNodePort: in mode extender the extender's /metrics is on
// NodePort 31993, as the design names the endpoint; a value moves or
// removes it, and mode plugin (no extender) has none.
func TestSchedulerNodePort(t *testing.T) {
	svc := func(objs []runtime.Object) *corev1.Service {
		for _, s := range only[*corev1.Service](objs) {
			if s.Spec.Type == corev1.ServiceTypeNodePort {
				return s
			}
		}
		return nil
	}
	s := svc(objects(t, charttest.Options{KubeVersion: "v1.37.2"}))
	if s == nil || len(s.Spec.Ports) != 1 || s.Spec.Ports[0].NodePort != 31993 || s.Spec.Ports[0].Port != 9395 ||
		s.Spec.Ports[0].TargetPort != intstr.FromString("metrics") || s.Spec.Selector["app.kubernetes.io/name"] != "dynmig-scheduler" {
		t.Fatalf("default NodePort Service %+v", s)
	}
	if s := svc(objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: map[string]any{"metrics": map[string]any{"schedulerNodePort": 32000}}})); s == nil || s.Spec.Ports[0].NodePort != 32000 {
		t.Errorf("schedulerNodePort 32000: %+v", s)
	}
	for _, vals := range []map[string]any{
		{"metrics": map[string]any{"schedulerNodePort": 0}},
		{"scheduler": map[string]any{"mode": "plugin"}},
		{"scheduler": map[string]any{"enabled": false}},
	} {
		if s := svc(objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: vals})); s != nil {
			t.Errorf("values %v: NodePort Service %s", vals, s.Name)
		}
	}
	if err := renderErr("v1.37.2", nil, map[string]any{"metrics": map[string]any{"schedulerNodePort": "31993"}}); err == nil || !strings.Contains(err.Error(), "/metrics/schedulerNodePort") {
		t.Errorf("schedulerNodePort \"31993\": %v", err)
	}
}

// TestLint: helm lint finds nothing to warn about, with the default
// values (as `helm lint deploy/helm/dynmig` runs: the render's own checks
// do not fail in lint mode) and with every component on.
func TestLint(t *testing.T) {
	// Lint mode logs each fail it skips through the standard logger.
	defer log.SetOutput(log.Writer())
	log.SetOutput(io.Discard)
	kv, err := chartutil.ParseKubeVersion("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range map[string]map[string]any{
		"defaults":   nil,
		"registry":   withRegistry(charttest.Options{}).Values,
		"everything": withRegistry(everything("plugin")).Values,
	} {
		l := lint.AllWithKubeVersion(charttest.ChartDir(), vals, "dynmig-system", kv)
		for _, m := range l.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("%s: %v", name, m)
			}
		}
	}
}
