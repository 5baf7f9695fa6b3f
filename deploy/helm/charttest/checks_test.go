package charttest_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// renderErr renders vals for kube and returns the render's error.
func renderErr(kube string, apis []string, vals map[string]any) error {
	_, err := render(charttest.Options{KubeVersion: kube, APIVersions: apis, Values: vals})
	return err
}

// Helm's render errors are text only; these tests check that the text
// names the offending value, which is what makes the error clear.

// TestSchema: values.schema.json refuses the wrong types that used to
// render into crash-looping pods, naming the value; the right types
// render.
func TestSchema(t *testing.T) {
	sched := func(kv map[string]any) map[string]any { return map[string]any{"scheduler": kv} }
	for _, tc := range []struct {
		name string
		vals map[string]any
		path string // where the schema error must point
	}{
		{"lockTimeout: 120", sched(map[string]any{"extender": map[string]any{"lockTimeout": 120}}), "/scheduler/extender/lockTimeout"},
		{"plugin lockTimeout: 120", sched(map[string]any{"plugin": map[string]any{"lockTimeout": 120}}), "/scheduler/plugin/lockTimeout"},
		{"pollInterval: 10", map[string]any{"deviceConfig": map[string]any{"pollInterval": 10}}, "/deviceConfig/pollInterval"},
		{"pollInterval: \"10\"", map[string]any{"deviceConfig": map[string]any{"pollInterval": "10"}}, "/deviceConfig/pollInterval"},
		{"images.tag: 1.10", map[string]any{"images": map[string]any{"tag": 1.10}}, "/images/tag"},
		{"replicas: \"two\"", sched(map[string]any{"replicas": "two"}), "/scheduler/replicas"},
		{"scheduler: null", map[string]any{"scheduler": nil}, "'scheduler'"},
		{"httpTimeout: 5", sched(map[string]any{"httpTimeout": 5}), "/scheduler/httpTimeout"},
		{"leaseDuration: 15", sched(map[string]any{"leaderElection": map[string]any{"leaseDuration": 15}}), "/scheduler/leaderElection/leaseDuration"},
		{"metricsPort: \"9396\"", map[string]any{"devicePlugin": map[string]any{"metricsPort": "9396"}}, "/devicePlugin/metricsPort"},
		{"unknown key", map[string]any{"devicePlugn": map[string]any{"enabled": false}}, "'devicePlugn'"},
	} {
		err := renderErr("v1.37.2", nil, tc.vals)
		if err == nil {
			t.Errorf("%s: rendered", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: error does not name %s: %v", tc.name, tc.path, err)
		}
	}
	good := map[string]any{
		"images":       map[string]any{"tag": "1.10"},
		"deviceConfig": map[string]any{"pollInterval": "1m30s"},
		"scheduler":    map[string]any{"replicas": 3, "extender": map[string]any{"lockTimeout": "90s"}, "httpTimeout": "2.5s"},
	}
	if err := renderErr("v1.37.2", nil, good); err != nil {
		t.Errorf("well-typed values: %v", err)
	}
}

// TestRenderRefuses: the render fails, naming the values, when the device
// plugin and the DRA driver would share nodes, when several scheduler
// replicas would run without leader election, and when the extender's
// httpTimeout exceeds leaseDuration - renewDeadline.
func TestRenderRefuses(t *testing.T) {
	both := func(dp, dra map[string]any) map[string]any {
		return map[string]any{
			"devicePlugin": map[string]any{"enabled": true, "nodeSelector": dp},
			"draDriver":    map[string]any{"enabled": true, "nodeSelector": dra},
		}
	}
	for _, tc := range []struct {
		name  string
		vals  map[string]any
		names []string // values the error must name; nil: renders
	}{
		{"both on the MIG nodes", both(nil, nil), []string{"devicePlugin.enabled", "draDriver.enabled"}},
		{"both, one narrower", both(map[string]any{"pool": "a"}, nil), []string{"devicePlugin.nodeSelector", "draDriver.nodeSelector"}},
		{"both on different pools", both(map[string]any{"pool": "a"}, map[string]any{"pool": "b"}), nil},
		{"both, the label's value differs", both(map[string]any{"nvidia.com/mig.capable": "false"}, nil), nil},
		{"two replicas without leader election",
			map[string]any{"scheduler": map[string]any{"replicas": 2, "leaderElection": map[string]any{"enabled": false}}},
			[]string{"scheduler.replicas", "scheduler.leaderElection.enabled"}},
		{"one replica without leader election",
			map[string]any{"scheduler": map[string]any{"replicas": 1, "leaderElection": map[string]any{"enabled": false}}}, nil},
		{"httpTimeout over the lease gap", map[string]any{"scheduler": map[string]any{"httpTimeout": "6s"}},
			[]string{"scheduler.httpTimeout", "scheduler.leaderElection.leaseDuration"}},
		{"httpTimeout over a narrower gap",
			map[string]any{"scheduler": map[string]any{"httpTimeout": "1500ms", "leaderElection": map[string]any{"leaseDuration": "1m", "renewDeadline": "59s"}}},
			[]string{"scheduler.httpTimeout"}},
		{"httpTimeout at the gap", map[string]any{"scheduler": map[string]any{"httpTimeout": "5000ms"}}, nil},
		{"httpTimeout within a wider gap",
			map[string]any{"scheduler": map[string]any{"httpTimeout": "1m", "leaderElection": map[string]any{"leaseDuration": "2m30s", "renewDeadline": "1m"}}}, nil},
		{"httpTimeout in mode plugin", map[string]any{"scheduler": map[string]any{"mode": "plugin", "httpTimeout": "6s"}}, nil},
		{"httpTimeout without leader election",
			map[string]any{"scheduler": map[string]any{"replicas": 1, "httpTimeout": "6s", "leaderElection": map[string]any{"enabled": false}}}, nil},
		{"two replicas, scheduler disabled",
			map[string]any{"scheduler": map[string]any{"enabled": false, "replicas": 2, "leaderElection": map[string]any{"enabled": false}}}, nil},
	} {
		err := renderErr("v1.37.2", nil, tc.vals)
		switch {
		case tc.names == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.names != nil && err == nil:
			t.Errorf("%s: rendered", tc.name)
		case err != nil:
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("%s: error does not name %s: %v", tc.name, n, err)
				}
			}
		}
	}
}

// TestAPIChecks: every API outside the core group is checked against the
// cluster, and the render fails naming the minimum Kubernetes version and
// the values that render it.
func TestAPIChecks(t *testing.T) {
	off := map[string]any{"recordPolicy": map[string]any{"enabled": false}, "devicePlugin": map[string]any{"nodePolicy": false}}
	dra := map[string]any{"devicePlugin": map[string]any{"enabled": false}, "draDriver": map[string]any{"enabled": true}}
	mutating := map[string]any{"admissionPolicy": map[string]any{"enabled": true}}
	monitor := map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}
	for _, tc := range []struct {
		name  string
		kube  string
		apis  []string
		vals  map[string]any
		names []string // in the error; nil: renders
	}{
		{"admission policies before 1.30", "v1.29.5", nil, nil, []string{"1.30", "recordPolicy.enabled"}},
		{"admission policies served by a 1.29 cluster", "v1.29.5", []string{"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"}, nil, nil},
		{"no admission policies before 1.30", "v1.29.5", nil, off, nil},
		{"DRA before 1.34", "v1.33.0", nil, dra, []string{"1.34", "draDriver.enabled"}},
		{"DRA at 1.34", "v1.34.0", nil, dra, nil},
		{"routing policy before 1.36", "v1.35.0", nil, mutating, []string{"1.36", "admissionPolicy.enabled"}},
		{"routing policy with the v1beta1 gate", "v1.35.0", []string{"admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}, mutating, nil},
		{"ServiceMonitor without the operator", "v1.37.2", nil, monitor, []string{"metrics.serviceMonitor.enabled"}},
		{"ServiceMonitor with the operator", "v1.37.2", []string{"monitoring.coreos.com/v1"}, monitor, nil},
	} {
		err := renderErr(tc.kube, tc.apis, tc.vals)
		switch {
		case tc.names == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.names != nil && err == nil:
			t.Errorf("%s: rendered", tc.name)
		case err != nil:
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("%s: error does not name %s: %v", tc.name, n, err)
				}
			}
		}
	}
}

// TestNodeLabel: the node components select nodeLabel=true (default
// nvidia.com/mig.capable) plus their own nodeSelector, and NOTES.txt names
// the label.
func TestNodeLabel(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want map[string]string
	}{
		{nil, map[string]string{"nvidia.com/mig.capable": "true"}},
		{map[string]any{"nodeLabel": "example.com/mig"}, map[string]string{"example.com/mig": "true"}},
		{map[string]any{"devicePlugin": map[string]any{"nodeSelector": map[string]any{"pool": "a"}}},
			map[string]string{"nvidia.com/mig.capable": "true", "pool": "a"}},
		{map[string]any{"nodeLabel": ""}, nil},
	} {
		objs := objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: tc.vals})
		got := named[*appsv1.DaemonSet](t, objs, "dynmig-device-plugin").Spec.Template.Spec.NodeSelector
		if len(got) != len(tc.want) {
			t.Errorf("values %v: nodeSelector %v, want %v", tc.vals, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("values %v: nodeSelector %v, want %v", tc.vals, got, tc.want)
			}
		}
		notes, err := notes(charttest.Options{KubeVersion: "v1.37.2", Values: tc.vals})
		if err != nil {
			t.Fatal(err)
		}
		for k := range tc.want {
			if k != "pool" && !strings.Contains(notes, k+"=true") {
				t.Errorf("values %v: NOTES.txt does not name the node label %s:\n%s", tc.vals, k, notes)
			}
		}
	}
}

// TestHealthChecksValue: devicePlugin.healthChecks and
// draDriver.healthChecks render as the variables NVIDIA's device plugin
// reads, and an entry that is no Xid, "all" or "xids" fails the render.
func TestHealthChecksValue(t *testing.T) {
	vals := map[string]any{
		"devicePlugin": map[string]any{"nodeSelector": map[string]any{"dynmig.io/dra": "false"}, "healthChecks": map[string]any{"disable": "48,63", "enable": "79"}},
		"draDriver":    map[string]any{"enabled": true, "nodeSelector": map[string]any{"dynmig.io/dra": "true"}, "healthChecks": map[string]any{"disable": "xids", "enable": ""}},
		"nodeLabel":    "nvidia.com/mig.capable",
	}
	objs := objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: vals})
	for _, tc := range []struct{ ds, container, disable, enable string }{
		{"dynmig-device-plugin", "device-plugin", "48,63", "79"},
		{"dynmig-dra-driver", "driver", "xids", ""},
	} {
		ds := named[*appsv1.DaemonSet](t, objs, tc.ds)
		c := container(t, &ds.Spec.Template.Spec, tc.container)
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env["DP_DISABLE_HEALTHCHECKS"] != tc.disable || env["DP_ENABLE_HEALTHCHECKS"] != tc.enable {
			t.Errorf("%s: DP_DISABLE_HEALTHCHECKS=%q DP_ENABLE_HEALTHCHECKS=%q, want %q and %q", tc.ds,
				env["DP_DISABLE_HEALTHCHECKS"], env["DP_ENABLE_HEALTHCHECKS"], tc.disable, tc.enable)
		}
	}
	bad := map[string]any{"devicePlugin": map[string]any{"healthChecks": map[string]any{"disable": "48;63", "enable": ""}}}
	if _, err := charttest.Render(charttest.Options{KubeVersion: "v1.37.2", Values: bad}); err == nil {
		t.Error(`healthChecks.disable "48;63" rendered; want a schema error`)
	}
}
