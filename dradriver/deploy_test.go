package dradriver_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/dradriver"
)

// draDeployDir is deploy/dra, seen from this package.
const draDeployDir = "../deploy/dra"

// loadDRAManifests decodes every document of every file of deploy/dra
// strictly (unknown kinds and fields fail) and returns them by file.
func loadDRAManifests(t *testing.T) map[string][]runtime.Object {
	t.Helper()
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	files, err := filepath.Glob(filepath.Join(draDeployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", draDeployDir, err)
	}
	out := map[string][]runtime.Object{}
	for _, f := range files {
		name := filepath.Base(f)
		if name == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var generic map[string]any
			if err := yaml.Unmarshal(doc, &generic); err != nil || len(generic) == 0 {
				continue
			}
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", name, i, err)
				continue
			}
			out[name] = append(out[name], obj)
		}
	}
	return out
}

func only[T any](t *testing.T, objs []runtime.Object) []*T {
	t.Helper()
	var out []*T
	for _, o := range objs {
		if v, ok := o.(any).(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestDeployKustomization: the kustomization lists every manifest but the
// example workload.
func TestDeployKustomization(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(draDeployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	var want []string
	for name := range loadDRAManifests(t) {
		if name != "claim-example.yaml" {
			want = append(want, name)
		}
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want %v", got, want)
	}
}

// TestDeployClaimsAllocateAndPrepare: deploy/dra's DeviceClass and claim
// templates, handed to the real allocator on a fake A30 node's
// publication, get the profile they ask for (the memory request the
// smallest profile with enough memory), and the driver prepares them.
func TestDeployClaimsAllocateAndPrepare(t *testing.T) {
	m := loadDRAManifests(t)
	classes := only[resourceapi.DeviceClass](t, m["deviceclass.yaml"])
	if len(classes) != 1 || classes[0].Name != dradriver.DeviceClassName {
		t.Fatalf("deviceclass.yaml: %v, want one DeviceClass %s", classes, dradriver.DeviceClassName)
	}
	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	for _, tpl := range only[resourceapi.ResourceClaimTemplate](t, m["claim-example.yaml"]) {
		templates[tpl.Name] = tpl
	}
	pods := only[corev1.Pod](t, m["claim-example.yaml"])
	if len(pods) != 1 || len(pods[0].Spec.ResourceClaims) != 1 || templates[*pods[0].Spec.ResourceClaims[0].ResourceClaimTemplateName] == nil {
		t.Errorf("claim-example.yaml: the pod does not use one of the templates")
	}
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	var allocated []*resourceapi.ResourceClaim
	for _, tc := range []struct{ template, profile string }{
		{template: "mig-1g-6gb", profile: "1g.6gb"},
		{template: "mig-10gi", profile: "2g.12gb"},
	} {
		tpl := templates[tc.template]
		if tpl == nil {
			t.Fatalf("claim-example.yaml has no template %s", tc.template)
		}
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: tc.template, UID: types.UID("uid-" + tc.template)}, Spec: tpl.Spec.Spec}
		// The API server defaults an exact request to one device.
		for i := range claim.Spec.Devices.Requests {
			if ex := claim.Spec.Devices.Requests[i].Exactly; ex != nil && ex.AllocationMode == "" {
				ex.AllocationMode, ex.Count = resourceapi.DeviceAllocationModeExactCount, 1
			}
		}
		c := allocateWith(t, d.Catalog(), classes[0], claim, allocated...)
		if c == nil {
			t.Fatalf("%s: not allocated on an empty A30", tc.template)
		}
		p, err := dradriver.ParseDeviceName(c.Status.Allocation.Devices.Results[0].Device)
		if err != nil || p.Profile != tc.profile {
			t.Errorf("%s: allocated %v (%v), want a %s", tc.template, p, err, tc.profile)
		}
		allocated = append(allocated, c)
		e.claims.set(true, allocated...)
		if r := prepareOne(t, d, c); r.Err != nil {
			t.Errorf("%s: prepare: %v", tc.template, r.Err)
		}
	}
}

// TestDeployRBAC: the ClusterRole grants exactly what the driver and the
// kubelet plugin library call (see rbac.yaml), to the service account the
// DaemonSet runs as and the admission policy restricts.
func TestDeployRBAC(t *testing.T) {
	m := loadDRAManifests(t)
	roles := only[rbacv1.ClusterRole](t, m["rbac.yaml"])
	if len(roles) != 1 {
		t.Fatalf("rbac.yaml: %d ClusterRoles, want 1", len(roles))
	}
	want := map[string][]string{
		"resource.k8s.io/resourceslices": {"create", "delete", "get", "list", "update", "watch"},
		"resource.k8s.io/resourceclaims": {"get", "list", "watch"},
		"/nodes":                         {"get"},
		"events.k8s.io/events":           {"create", "patch"},
	}
	got := map[string][]string{}
	for _, r := range roles[0].Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = append(got[g+"/"+res], r.Verbs...)
			}
		}
	}
	for k := range got {
		slices.Sort(got[k])
	}
	if len(got) != len(want) {
		t.Errorf("rules cover %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: verbs %v, want %v", k, got[k], v)
		}
	}
	sas := only[corev1.ServiceAccount](t, m["rbac.yaml"])
	bindings := only[rbacv1.ClusterRoleBinding](t, m["rbac.yaml"])
	dss := only[appsv1.DaemonSet](t, m["driver.yaml"])
	policies := only[admissionv1.ValidatingAdmissionPolicy](t, m["node-policy.yaml"])
	pbs := only[admissionv1.ValidatingAdmissionPolicyBinding](t, m["node-policy.yaml"])
	if len(sas) != 1 || len(bindings) != 1 || len(dss) != 1 || len(policies) != 1 || len(pbs) != 1 {
		t.Fatalf("want one ServiceAccount, ClusterRoleBinding, DaemonSet, policy and policy binding")
	}
	sa := sas[0]
	if b := bindings[0]; b.RoleRef.Name != roles[0].Name || len(b.Subjects) != 1 || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %v does not bind %s to %s/%s", b, roles[0].Name, sa.Namespace, sa.Name)
	}
	if dss[0].Namespace != sa.Namespace || dss[0].Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("DaemonSet runs as %s/%s, want %s/%s", dss[0].Namespace, dss[0].Spec.Template.Spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	user := "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
	if mc := policies[0].Spec.MatchConditions; len(mc) != 1 || !strings.Contains(mc[0].Expression, "'"+user+"'") {
		t.Errorf("policy match conditions %v do not name %s", mc, user)
	}
	if pbs[0].Spec.PolicyName != policies[0].Name {
		t.Errorf("policy binding names %s, want %s", pbs[0].Spec.PolicyName, policies[0].Name)
	}
}

// TestDeployDaemonSet: the directories the driver's flags name are the
// host directories mounted at the same paths, and the node comes from the
// pod's spec.nodeName.
func TestDeployDaemonSet(t *testing.T) {
	ds := only[appsv1.DaemonSet](t, loadDRAManifests(t)["driver.yaml"])
	if len(ds) != 1 || len(ds[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatal("driver.yaml: want one DaemonSet with one container")
	}
	spec := ds[0].Spec.Template.Spec
	c := spec.Containers[0]
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		if hostPaths[vm.Name] == vm.MountPath {
			mounted[vm.MountPath] = true
		}
	}
	for _, flag := range []string{"-cdi-dir=", "-plugin-data-dir=", "-registrar-dir="} {
		found := false
		for _, a := range c.Args {
			if dir, ok := strings.CutPrefix(a, flag); ok {
				found = true
				if !mounted[dir] {
					t.Errorf("%s%s is not the same host directory mounted there", flag, dir)
				}
			}
		}
		if !found {
			t.Errorf("args %v lack %s", c.Args, flag)
		}
	}
	if !slices.ContainsFunc(c.Args, func(a string) bool {
		return strings.HasSuffix(a, dradriver.DriverName) && strings.HasPrefix(a, "-plugin-data-dir=")
	}) {
		t.Errorf("plugin data directory is not named after the driver %s", dradriver.DriverName)
	}
	env := false
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			env = true
		}
	}
	if !env {
		t.Error("NODE_NAME does not come from spec.nodeName")
	}
}

// TestDeployPolicyExpressions: every CEL expression of the admission
// policy compiles (the API server type-checks them against the objects;
// here every variable is dynamic, which still catches syntax errors and
// unknown functions).
func TestDeployPolicyExpressions(t *testing.T) {
	policies := only[admissionv1.ValidatingAdmissionPolicy](t, loadDRAManifests(t)["node-policy.yaml"])
	if len(policies) != 1 {
		t.Fatal("node-policy.yaml: want one ValidatingAdmissionPolicy")
	}
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("variables", cel.DynType),
	)
	if err != nil {
		t.Fatal(err)
	}
	p := policies[0].Spec
	var exprs []string
	for _, m := range p.MatchConditions {
		exprs = append(exprs, m.Expression)
	}
	for _, v := range p.Variables {
		exprs = append(exprs, v.Expression)
	}
	for _, v := range p.Validations {
		exprs = append(exprs, v.Expression, v.MessageExpression)
	}
	for _, x := range exprs {
		if x == "" {
			continue
		}
		if _, iss := env.Compile(x); iss.Err() != nil {
			t.Errorf("%q: %v", x, iss.Err())
		}
	}
}
