package charttest_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// TestEnvPolicy: by default every namespace but the release's own is
// checked, for every kind of container and each device-selecting variable;
// the operator's list replaces the default, and enabled: false drops it.
func TestEnvPolicy(t *testing.T) {
	objs := objects(t, charttest.Options{KubeVersion: "v1.37.2", Namespace: "gpu-nodes"})
	policy := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, "dynmig-no-device-env")
	binding := named[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, "dynmig-no-device-env")
	if binding.Spec.PolicyName != policy.Name {
		t.Errorf("binding names policy %q", binding.Spec.PolicyName)
	}
	if got := binding.Spec.ValidationActions; !slices.Equal(got, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("validationActions %v, want [Deny]", got)
	}
	if got := exempt(t, binding); !slices.Equal(got, []string{"gpu-nodes"}) {
		t.Errorf("exempt namespaces %v, want the release's", got)
	}
	if len(policy.Spec.Validations) != 3 {
		t.Fatalf("%d validations, want one per container list", len(policy.Spec.Validations))
	}
	for i, field := range []string{"containers", "initContainers", "ephemeralContainers"} {
		if v := policy.Spec.Validations[i]; !strings.Contains(v.Expression, "object.spec."+field+".exists(") {
			t.Errorf("validation %d does not check %s: %s", i, field, v.Expression)
		}
	}
	for _, name := range []string{"NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES", "NVIDIA_IMEX_CHANNELS"} {
		if !strings.Contains(policy.Spec.Variables[0].Expression, `"`+name+`"`) {
			t.Errorf("variable %s not refused: %s", name, policy.Spec.Variables[0].Expression)
		}
	}
	rules := policy.Spec.MatchConstraints.ResourceRules[0]
	if !slices.Contains(rules.Resources, "pods/ephemeralcontainers") || !slices.Contains(rules.Operations, admissionv1.Create) {
		t.Errorf("rules %+v miss pod creation or ephemeral containers", rules)
	}

	// deploy/admission/env-policy.yaml is the same policy; deploy's tests evaluate
	// its expressions on pods.
	deployed := deployedPolicy(t, "env-policy.yaml")
	if !reflect.DeepEqual(policy.Spec, deployed.Spec) {
		t.Errorf("the chart's policy differs from deploy/admission/env-policy.yaml:\n%+v\n%+v", policy.Spec, deployed.Spec)
	}

	objs = objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: map[string]any{"envPolicy": map[string]any{"exemptNamespaces": []any{"gpu-operator", "dynmig-system"}}}})
	if got := exempt(t, named[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, "dynmig-no-device-env")); !slices.Equal(got, []string{"gpu-operator", "dynmig-system"}) {
		t.Errorf("exempt namespaces %v, want the operator's list", got)
	}
	objs = objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: map[string]any{"envPolicy": map[string]any{"enabled": false}}})
	for _, p := range only[*admissionv1.ValidatingAdmissionPolicy](objs) {
		if p.Name == "dynmig-no-device-env" {
			t.Error("envPolicy.enabled: false still renders the policy")
		}
	}
}

func exempt(t *testing.T, b *admissionv1.ValidatingAdmissionPolicyBinding) []string {
	t.Helper()
	sel := b.Spec.MatchResources.NamespaceSelector
	if sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Key != "kubernetes.io/metadata.name" || sel.MatchExpressions[0].Operator != "NotIn" {
		t.Fatalf("binding selects namespaces by %+v", sel)
	}
	return sel.MatchExpressions[0].Values
}
