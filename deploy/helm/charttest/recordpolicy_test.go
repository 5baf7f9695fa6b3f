package charttest_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// recordPolicy is the name of the ValidatingAdmissionPolicy that seals
// the allocation record, for release dynmig.
const recordPolicy = "dynmig-sealed-allocation-record"

// recordKey is recordKey (not imported: reservation's
// dependencies are not this module's).
const recordKey = "hami.io/vgpu-mig-allocations"

// TestRecordPolicy: the default rendering seals the allocation record with
// the policy of deploy/admission/allocation-record-policy.yaml, naming the
// chart's own scheduler and device plugin accounts, bound with Deny.
func TestRecordPolicy(t *testing.T) {
	objs := objects(t, charttest.Options{KubeVersion: "v1.37.2"})
	policy := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, recordPolicy)
	binding := named[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, recordPolicy)
	if binding.Spec.PolicyName != recordPolicy || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding %+v, want the policy with Deny", binding.Spec)
	}
	for _, v := range policy.Spec.Validations {
		if !strings.Contains(v.Message+v.MessageExpression, recordKey) {
			t.Errorf("message %q does not name %s", v.Message+v.MessageExpression, recordKey)
		}
	}
	sched := named[*appsv1.Deployment](t, objs, "dynmig-scheduler")
	ds := named[*appsv1.DaemonSet](t, objs, "dynmig-device-plugin")
	// deploy/'s policy names deploy/'s accounts, which have the chart's
	// names for release dynmig in dynmig-system.
	want := deployedPolicy(t, "allocation-record-policy.yaml")
	for _, sa := range []string{sched.Spec.Template.Spec.ServiceAccountName, ds.Spec.Template.Spec.ServiceAccountName} {
		if !strings.Contains(string(mustYAML(t, policy.Spec)), "'system:serviceaccount:dynmig-system:"+sa+"'") {
			t.Errorf("the policy does not name the service account %s", sa)
		}
	}
	if !reflect.DeepEqual(policy.Spec, want.Spec) {
		t.Errorf("the chart's policy differs from deploy/admission's:\nchart:  %s\ndeploy: %s", mustYAML(t, policy.Spec), mustYAML(t, want.Spec))
	}
}

// deployedPolicy decodes the ValidatingAdmissionPolicy that
// deploy/admission/file starts with.
func deployedPolicy(t *testing.T, file string) *admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(charttest.ChartDir(), "..", "..", "admission", file))
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(data), "\n---\n")
	var p admissionv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// mustYAML renders v for a failure message or a text search.
func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRecordPolicyWriters: recordPolicy.writers become user names the
// policy does not check; an entry that is not namespace/name fails the
// render; recordPolicy.enabled false leaves the policy out.
func TestRecordPolicyWriters(t *testing.T) {
	vals := func(rp map[string]any) map[string]any { return map[string]any{"recordPolicy": rp} }
	objs := objects(t, charttest.Options{KubeVersion: "v1.37.2",
		Values: vals(map[string]any{"writers": []any{"hami-system/hami-scheduler", "kube-system/other"}})})
	policy := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, recordPolicy)
	want := `!(request.userInfo.username in ['system:serviceaccount:hami-system:hami-scheduler', 'system:serviceaccount:kube-system:other'])`
	if got := policy.Spec.MatchConditions[0].Expression; got != want {
		t.Errorf("match condition %s, want %s", got, want)
	}
	for _, bad := range []any{"hami-scheduler", "a/b/c", "hami-system/x'] || true || ['", "/name", 7} {
		_, err := render(charttest.Options{KubeVersion: "v1.37.2", Values: vals(map[string]any{"writers": []any{bad}})})
		if err == nil {
			t.Errorf("writers [%v] rendered", bad)
		}
	}
	objs = objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: vals(map[string]any{"enabled": false})})
	for _, p := range only[*admissionv1.ValidatingAdmissionPolicy](objs) {
		if p.Name == recordPolicy {
			t.Error("recordPolicy.enabled false renders the policy")
		}
	}
}

// TestSchedulerWritesNoPods: in either scheduler mode, no role the chart
// binds to the scheduler's service account grants patch or update on
// pods; both modes write the allocation record only in the binding.
func TestSchedulerWritesNoPods(t *testing.T) {
	for _, mode := range []string{"extender", "plugin"} {
		objs := objects(t, charttest.Options{KubeVersion: "v1.37.2",
			Values: map[string]any{"scheduler": map[string]any{"mode": mode}}})
		sa := named[*appsv1.Deployment](t, objs, "dynmig-scheduler").Spec.Template.Spec.ServiceAccountName
		isSA := func(s rbacv1.Subject) bool { return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa }
		bound := map[string]bool{}
		for _, b := range only[*rbacv1.ClusterRoleBinding](objs) {
			if slices.ContainsFunc(b.Subjects, isSA) {
				bound[b.RoleRef.Kind+"/"+b.RoleRef.Name] = true
			}
		}
		for _, b := range only[*rbacv1.RoleBinding](objs) {
			if slices.ContainsFunc(b.Subjects, isSA) {
				bound[b.RoleRef.Kind+"/"+b.RoleRef.Name] = true
			}
		}
		if !bound["ClusterRole/dynmig-scheduler-extender"] {
			t.Fatalf("mode %s: the scheduler is not bound to its ClusterRole: %v", mode, bound)
		}
		for _, r := range only[*rbacv1.ClusterRole](objs) {
			if bound["ClusterRole/"+r.Name] {
				checkNoPodWrites(t, mode, "ClusterRole "+r.Name, r.Rules)
			}
		}
		for _, r := range only[*rbacv1.Role](objs) {
			if bound["Role/"+r.Name] {
				checkNoPodWrites(t, mode, "Role "+r.Name, r.Rules)
			}
		}
	}
}

func checkNoPodWrites(t *testing.T, mode, role string, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, r := range rules {
		if !slices.Contains(r.APIGroups, "") && !slices.Contains(r.APIGroups, "*") {
			continue
		}
		if !slices.Contains(r.Resources, "pods") && !slices.Contains(r.Resources, "*") {
			continue
		}
		for _, v := range r.Verbs {
			if v == "patch" || v == "update" || v == "*" {
				t.Errorf("mode %s: %s, bound to the scheduler, grants %s on pods", mode, role, v)
			}
		}
	}
}
