package deploy_test

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/dynmig/dynmig/reservation"
)

// recordPolicy is the ValidatingAdmissionPolicy that seals the allocation
// record (deploy/admission/allocation-record-policy.yaml).
const recordPolicy = "dynmig-sealed-allocation-record"

// TestRecordPolicy: deploy/ seals the allocation record at admission. The
// policy refuses what it cannot evaluate, sees pod creations and updates,
// pods/status updates and bindings, is bound with Deny, and every message
// names the record's key. What its rules admit is tested against a real
// API server in e2e/chart.
func TestRecordPolicy(t *testing.T) {
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, o := range loadManifests(t) {
		switch v := o.obj.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			if v.Name == recordPolicy {
				policy = v
			}
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			if v.Spec.PolicyName == recordPolicy {
				binding = v
			}
		}
	}
	if policy == nil || binding == nil {
		t.Fatalf("deploy/ has no ValidatingAdmissionPolicy %s and binding: policy %v, binding %v", recordPolicy, policy != nil, binding != nil)
	}
	if !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding validationActions %v, want [Deny]", binding.Spec.ValidationActions)
	}
	if binding.Spec.MatchResources != nil {
		t.Errorf("binding narrows the policy to %+v, want every namespace", binding.Spec.MatchResources)
	}
	if fp := policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", fp)
	}
	ops := map[string][]string{} // resource -> operations
	for _, r := range policy.Spec.MatchConstraints.ResourceRules {
		if !slices.Equal(r.APIGroups, []string{""}) {
			t.Errorf("rule on API groups %v, want the core group", r.APIGroups)
		}
		for _, res := range r.Resources {
			for _, op := range r.Operations {
				ops[res] = append(ops[res], string(op))
			}
		}
	}
	for res, want := range map[string][]string{
		"pods": {"CREATE", "UPDATE"}, "pods/status": {"UPDATE"}, "pods/binding": {"CREATE"}, "bindings": {"CREATE"},
	} {
		for _, op := range want {
			if !slices.Contains(ops[res], op) {
				t.Errorf("the policy does not see %s of %s", op, res)
			}
		}
	}
	if len(policy.Spec.Validations) == 0 {
		t.Fatal("the policy has no validations")
	}
	for i, v := range policy.Spec.Validations {
		msg := v.Message + v.MessageExpression
		if !strings.Contains(msg, reservation.AnnotationKey) {
			t.Errorf("validation %d: message %q does not name %s", i, msg, reservation.AnnotationKey)
		}
	}
	// The users it names are deploy/'s service accounts.
	all := ""
	for _, v := range policy.Spec.Variables {
		all += v.Expression + "\n"
	}
	for _, v := range policy.Spec.Validations {
		all += v.Expression + "\n"
	}
	for _, user := range []string{"system:serviceaccount:dynmig-system:dynmig-scheduler'", "system:serviceaccount:dynmig-system:dynmig-device-plugin'"} {
		if !strings.Contains(all, "'"+user) {
			t.Errorf("the policy does not name %s", strings.TrimSuffix(user, "'"))
		}
	}
}

// TestSchedulerWritesNoPods: no role deploy/ binds to the scheduler's
// service account grants patch or update on pods. Both scheduler modes
// write the allocation record only in the binding.
func TestSchedulerWritesNoPods(t *testing.T) {
	objs := loadManifests(t)
	const sa = "dynmig-scheduler"
	bound := map[string]bool{} // Kind/name of roles bound to sa
	subjectIsSA := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == sa
		})
	}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			if subjectIsSA(v.Subjects) {
				bound[v.RoleRef.Kind+"/"+v.RoleRef.Name] = true
			}
		case *rbacv1.RoleBinding:
			if subjectIsSA(v.Subjects) {
				bound[v.RoleRef.Kind+"/"+v.RoleRef.Name] = true
			}
		}
	}
	if !bound["ClusterRole/dynmig-scheduler-extender"] {
		t.Fatalf("the scheduler is not bound to ClusterRole dynmig-scheduler-extender: %v", bound)
	}
	for _, o := range objs {
		var rules []rbacv1.PolicyRule
		switch v := o.obj.(type) {
		case *rbacv1.ClusterRole:
			rules = v.Rules
		case *rbacv1.Role:
			rules = v.Rules
		default:
			continue
		}
		if !bound[o.kind+"/"+o.meta.GetName()] {
			continue
		}
		if verbs := podWrites(rules); len(verbs) > 0 {
			t.Errorf("%s: %s %s, bound to the scheduler, grants %v on pods", o.file, o.kind, o.meta.GetName(), verbs)
		}
	}
}

// podWrites returns the verbs among patch, update and * that rules grant
// on pods of the core group.
func podWrites(rules []rbacv1.PolicyRule) []string {
	var verbs []string
	for _, r := range rules {
		if !slices.Contains(r.APIGroups, "") && !slices.Contains(r.APIGroups, "*") {
			continue
		}
		if !slices.Contains(r.Resources, "pods") && !slices.Contains(r.Resources, "*") {
			continue
		}
		for _, v := range r.Verbs {
			if v == "patch" || v == "update" || v == "*" {
				verbs = append(verbs, v)
			}
		}
	}
	return verbs
}
