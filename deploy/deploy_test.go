package deploy_test

// The tests of the deploy/ manifests live here, next to the extender whose
// routes and resources the scheduler configuration must match.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
)

// deployDir is the repository's deploy/ directory, seen from this package.
const deployDir = "."

// namespace is where every namespaced dynmig object lives.
const namespace = "dynmig-system"

// schedulerConfig mirrors the fields of kubescheduler.config.k8s.io/v1
// KubeSchedulerConfiguration that deploy/scheduler/kube-scheduler-config.yaml
// uses (k8s.io/kube-scheduler/config/v1, not imported: this module does not
// depend on it). Strict decoding into it fails on any other field, as
// kube-scheduler's own strict decoding would on a misspelt one.
type schedulerConfig struct {
	APIVersion       string `json:"apiVersion"`
	Kind             string `json:"kind"`
	ClientConnection struct {
		Kubeconfig string `json:"kubeconfig"`
	} `json:"clientConnection"`
	LeaderElection struct {
		LeaderElect       bool            `json:"leaderElect"`
		ResourceLock      string          `json:"resourceLock"`
		ResourceName      string          `json:"resourceName"`
		ResourceNamespace string          `json:"resourceNamespace"`
		LeaseDuration     metav1.Duration `json:"leaseDuration"`
		RenewDeadline     metav1.Duration `json:"renewDeadline"`
		RetryPeriod       metav1.Duration `json:"retryPeriod"`
	} `json:"leaderElection"`
	Profiles []struct {
		SchedulerName string `json:"schedulerName"`
	} `json:"profiles"`
	Extenders []struct {
		URLPrefix        string          `json:"urlPrefix"`
		FilterVerb       string          `json:"filterVerb"`
		PrioritizeVerb   string          `json:"prioritizeVerb"`
		BindVerb         string          `json:"bindVerb"`
		Weight           int64           `json:"weight"`
		EnableHTTPS      bool            `json:"enableHTTPS"`
		HTTPTimeout      metav1.Duration `json:"httpTimeout"`
		NodeCacheCapable bool            `json:"nodeCacheCapable"`
		Ignorable        bool            `json:"ignorable"`
		ManagedResources []struct {
			Name               string `json:"name"`
			IgnoredByScheduler bool   `json:"ignoredByScheduler"`
		} `json:"managedResources"`
	} `json:"extenders"`
}

// loadSchedulerConfig decodes the scheduler configuration strictly: no
// unknown or duplicate field, and every key spelt exactly as its field's
// JSON name (encoding/json alone would accept "urlprefix").
func loadSchedulerConfig(t *testing.T) schedulerConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, "scheduler", "kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedulerConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("kube-scheduler-config.yaml: %v", err)
	}
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	for _, bad := range inexactKeys("", generic, reflect.TypeFor[schedulerConfig]()) {
		t.Errorf("kube-scheduler-config.yaml: key %s is not spelt as the field's name", bad)
	}
	return cfg
}

// inexactKeys returns the paths of the keys in v (decoded YAML) that do
// not equal the JSON name of a field of t exactly.
func inexactKeys(at string, v any, t reflect.Type) []string {
	switch v := v.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct || t == reflect.TypeFor[metav1.Duration]() {
			return nil
		}
		var bad []string
		for k, sub := range v {
			f, ok := fieldByJSONName(t, k)
			if !ok {
				bad = append(bad, at+"."+k)
				continue
			}
			bad = append(bad, inexactKeys(at+"."+k, sub, f.Type)...)
		}
		return bad
	case []any:
		if t.Kind() != reflect.Slice {
			return nil
		}
		var bad []string
		for _, e := range v {
			bad = append(bad, inexactKeys(at+"[]", e, t.Elem())...)
		}
		return bad
	}
	return nil
}

func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func TestSchedulerConfig(t *testing.T) {
	cfg := loadSchedulerConfig(t)
	if cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || cfg.Kind != "KubeSchedulerConfiguration" {
		t.Errorf("apiVersion, kind = %q, %q, want kubescheduler.config.k8s.io/v1, KubeSchedulerConfiguration", cfg.APIVersion, cfg.Kind)
	}
	if cfg.ClientConnection.Kubeconfig != "" {
		t.Errorf("clientConnection.kubeconfig = %q, want empty (in-cluster)", cfg.ClientConnection.Kubeconfig)
	}
	if got := len(cfg.Profiles); got != 1 || cfg.Profiles[0].SchedulerName != "dynmig-scheduler" {
		t.Errorf("profiles = %+v, want one, dynmig-scheduler", cfg.Profiles)
	}

	le := cfg.LeaderElection
	if !le.LeaderElect || le.ResourceLock != "leases" || le.ResourceNamespace != namespace || le.ResourceName == "" {
		t.Errorf("leaderElection = %+v, want leaderElect with a named Lease in %s", le, namespace)
	}
	if !(le.RetryPeriod.Duration < le.RenewDeadline.Duration && le.RenewDeadline.Duration < le.LeaseDuration.Duration) {
		t.Errorf("leaderElection: got retryPeriod %v, renewDeadline %v, leaseDuration %v, want increasing",
			le.RetryPeriod.Duration, le.RenewDeadline.Duration, le.LeaseDuration.Duration)
	}

	if len(cfg.Extenders) != 1 {
		t.Fatalf("got %d extenders, want 1", len(cfg.Extenders))
	}
	ext := cfg.Extenders[0]
	u, err := url.Parse(ext.URLPrefix)
	if err != nil {
		t.Fatalf("urlPrefix: %v", err)
	}
	if ip := net.ParseIP(u.Hostname()); u.Scheme != "http" || ip == nil || !ip.IsLoopback() || ext.EnableHTTPS {
		t.Errorf("urlPrefix %q, enableHTTPS %v: want plain http on a loopback address (the sidecar)", ext.URLPrefix, ext.EnableHTTPS)
	}
	if ext.Weight <= 0 {
		t.Errorf("weight = %d, want > 0 (prioritizeVerb is set)", ext.Weight)
	}
	if ext.Ignorable {
		t.Error("ignorable = true: MIG pods would be placed without a reservation while the extender is down")
	}
	// Leader-election safety: an old leader's last call ends before a
	// new leader can acquire the Lease.
	timeout := ext.HTTPTimeout.Duration
	if timeout == 0 {
		timeout = 5 * time.Second // kube-scheduler's default
	}
	if gap := le.LeaseDuration.Duration - le.RenewDeadline.Duration; timeout > gap {
		t.Errorf("httpTimeout %v > leaseDuration - renewDeadline = %v", timeout, gap)
	}

	got := map[string]bool{}
	for _, r := range ext.ManagedResources {
		got[r.Name] = r.IgnoredByScheduler
	}
	want := map[string]bool{
		// Advertised by the device plugin: the scheduler counts it.
		string(kube.ResourceGPU): false,
		// Advertised by nobody: the scheduler must not, or it never
		// calls the extender ("Insufficient nvidia.com/gpumem").
		string(kube.ResourceGPUMem):           true,
		string(kube.ResourceGPUMemPercentage): true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("managedResources (name: ignoredByScheduler) = %v, want %v", got, want)
	}
}

// TestSchedulerConfigRoutes calls the extender's handler at each verb the
// configuration names, as kube-scheduler would: POST urlPrefix/verb.
func TestSchedulerConfigRoutes(t *testing.T) {
	ext := loadSchedulerConfig(t).Extenders[0]
	srv := httptest.NewServer(extender.New(fake.NewClientset(), extender.Options{}).Handler())
	defer srv.Close()
	pod := `{"metadata":{"name":"p","namespace":"default","uid":"u1"}}`
	tests := []struct {
		name string
		verb string
		body string
	}{
		{name: "filter", verb: ext.FilterVerb, body: `{"Pod":` + pod + `,"NodeNames":["n1"]}`},
		{name: "prioritize", verb: ext.PrioritizeVerb, body: `{"Pod":` + pod + `,"NodeNames":["n1"]}`},
		{name: "bind", verb: ext.BindVerb, body: `{"PodName":"p","PodNamespace":"default","PodUID":"u1","Node":"n1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.verb == "" {
				t.Fatalf("%sVerb is empty", tt.name)
			}
			// The configured prefix is the sidecar's address; the path is
			// what matters here.
			p, err := url.JoinPath(ext.URLPrefix, tt.verb)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(p)
			resp, err := http.Post(srv.URL+u.Path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("POST %s: got %d %s, want 200", u.Path, resp.StatusCode, body)
			}
			if !json.Valid(body) {
				t.Errorf("POST %s: reply %q is not JSON", u.Path, body)
			}
		})
	}
}

// object is one document of a manifest file.
type object struct {
	file string
	obj  runtime.Object
	meta metav1.Object
	kind string
}

// knownKinds are the kinds deploy/ may contain; namespaced says whether
// the kind lives in a namespace.
var knownKinds = map[string]bool{
	"Namespace": false, "ServiceAccount": true,
	"ClusterRole": false, "ClusterRoleBinding": false, "Role": true, "RoleBinding": true,
	"Deployment": true, "DaemonSet": true, "PodDisruptionBudget": true, "ConfigMap": true,
	"ValidatingAdmissionPolicy": false, "ValidatingAdmissionPolicyBinding": false,
}

// notObjects are the YAML files under deploy/ that hold no API objects;
// deploy/dra/ is a separate deployment path with its own checks.
var notObjects = []string{"kustomization.yaml", "scheduler/kube-scheduler-config.yaml"}

// manifestFiles returns the object files under deploy/, relative to it.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(deployDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(deployDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		// deploy/dra is dradriver's to test; deploy/helm holds templates,
		// which deploy/helm/charttest renders and tests; deploy/examples
		// holds workloads, which examples_test.go checks.
		if d.IsDir() && (rel == "dra" || rel == "helm" || rel == "examples") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(rel, ".yaml") || strings.HasSuffix(rel, ".yml")) && !slices.Contains(notObjects, rel) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// loadManifests decodes every document of every manifest file strictly:
// a kind the client-go scheme does not know, or a field its type lacks
// (case-sensitively), fails the test.
func loadManifests(t *testing.T) []object {
	t.Helper()
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var objs []object
	for _, file := range manifestFiles(t) {
		data, err := os.ReadFile(filepath.Join(deployDir, file))
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
				t.Fatalf("%s: %v", file, err)
			}
			var generic map[string]any
			if err := yaml.Unmarshal(doc, &generic); err != nil {
				t.Fatalf("%s, document %d: %v", file, i, err)
			}
			if len(generic) == 0 {
				continue // comments only
			}
			obj, gvk, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", file, i, err)
				continue
			}
			meta, err := metaOf(obj)
			if err != nil {
				t.Fatalf("%s, document %d: %v", file, i, err)
			}
			namespaced, known := knownKinds[gvk.Kind]
			switch {
			case !known:
				t.Errorf("%s, document %d: kind %s is not one deploy/ uses", file, i, gvk.Kind)
			case meta.GetName() == "":
				t.Errorf("%s, document %d: %s has no metadata.name", file, i, gvk.Kind)
			case namespaced && meta.GetNamespace() == "":
				t.Errorf("%s: %s %s has no namespace", file, gvk.Kind, meta.GetName())
			case !namespaced && meta.GetNamespace() != "":
				t.Errorf("%s: cluster-scoped %s %s has namespace %q", file, gvk.Kind, meta.GetName(), meta.GetNamespace())
			}
			objs = append(objs, object{file: file, obj: obj, meta: meta, kind: gvk.Kind})
		}
	}
	return objs
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, errors.New("no object metadata")
	}
	return m, nil
}

// allowedRules is every (API group, resource) dynmig's roles may name, with
// the verbs allowed on it: what the extender, the device plugin and
// kube-scheduler's leader election call, nothing more (see the comments in
// deploy/rbac). In particular: no delete, no Secrets, no wildcards.
var allowedRules = map[string][]string{
	"/pods":                      {"get", "list", "watch", "patch"},
	"/pods/binding":              {"create"},
	"/nodes":                     {"get", "list", "watch", "patch"},
	"events.k8s.io/events":       {"create", "patch"},
	"coordination.k8s.io/leases": {"get", "create", "update"},
}

// builtinRoles are the roles deploy/ binds without defining them.
var builtinRoles = []string{"ClusterRole/system:kube-scheduler", "ClusterRole/system:volume-scheduler",
	"Role/extension-apiserver-authentication-reader"}

// required is what each component's code calls (the audit behind
// deploy/rbac): group/resource -> verbs, per role that must grant it.
var required = map[string]map[string][]string{
	// extender and kube.SchedulerView.
	"dynmig-scheduler-extender": {
		"/pods":                {"get", "list", "watch"},
		"/pods/binding":        {"create"},
		"/nodes":               {"list", "watch"},
		"events.k8s.io/events": {"create", "patch"},
	},
	// deviceplugin and the kube adapters it uses.
	"dynmig-device-plugin": {
		"/pods":                {"get", "list", "watch", "patch"},
		"/nodes":               {"get", "patch"},
		"events.k8s.io/events": {"create", "patch"},
	},
	// kube-scheduler's leader election on its own Lease.
	"dynmig-scheduler-leader-election": {
		"coordination.k8s.io/leases": {"get", "create", "update"},
	},
}

func TestManifests(t *testing.T) {
	objs := loadManifests(t)
	if len(objs) == 0 {
		t.Fatal("no manifests found under deploy/")
	}
	names := map[string]bool{} // Kind/namespace/name
	for _, o := range objs {
		key := o.kind + "/" + o.meta.GetNamespace() + "/" + o.meta.GetName()
		if names[key] {
			t.Errorf("%s: %s defined twice", o.file, key)
		}
		names[key] = true
		if ns := o.meta.GetNamespace(); ns != "" && ns != namespace &&
			!(o.kind == "RoleBinding" && o.meta.GetName() == "dynmig-scheduler-authentication-reader" && ns == "kube-system") {
			t.Errorf("%s: %s %s in namespace %q, want %s", o.file, o.kind, o.meta.GetName(), ns, namespace)
		}
	}
	has := func(kind, ns, name string) bool { return names[kind+"/"+ns+"/"+name] }
	if !has("Namespace", "", namespace) {
		t.Errorf("no Namespace %s", namespace)
	}
	for role := range required {
		if !has("ClusterRole", "", role) && !has("Role", namespace, role) {
			t.Errorf("no role %s, which grants what its component calls", role)
		}
	}

	for _, o := range objs {
		switch v := o.obj.(type) {
		case *rbacv1.ClusterRole:
			checkRules(t, o, v.Rules)
		case *rbacv1.Role:
			checkRules(t, o, v.Rules)
		case *rbacv1.ClusterRoleBinding:
			checkBinding(t, o, v.RoleRef, v.Subjects, "", has)
		case *rbacv1.RoleBinding:
			checkBinding(t, o, v.RoleRef, v.Subjects, v.Namespace, has)
		case *appsv1.Deployment:
			checkPodSpec(t, o, &v.Spec.Template.Spec, has)
		case *appsv1.DaemonSet:
			checkPodSpec(t, o, &v.Spec.Template.Spec, has)
		}
	}
}

func checkRules(t *testing.T, o object, rules []rbacv1.PolicyRule) {
	t.Helper()
	granted := map[string][]string{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("%s: %s %s grants non-resource URLs %v", o.file, o.kind, o.meta.GetName(), r.NonResourceURLs)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				allowed, ok := allowedRules[key]
				if !ok {
					t.Errorf("%s: %s %s names %q, which no dynmig component needs", o.file, o.kind, o.meta.GetName(), key)
					continue
				}
				for _, verb := range r.Verbs {
					if !slices.Contains(allowed, verb) {
						t.Errorf("%s: %s %s grants %s on %q, want only %v", o.file, o.kind, o.meta.GetName(), verb, key, allowed)
					}
					granted[key] = append(granted[key], verb)
				}
			}
		}
	}
	for key, verbs := range required[o.meta.GetName()] {
		for _, verb := range verbs {
			if !slices.Contains(granted[key], verb) {
				t.Errorf("%s: %s %s lacks %s on %q, which its component calls", o.file, o.kind, o.meta.GetName(), verb, key)
			}
		}
	}
}

func checkBinding(t *testing.T, o object, ref rbacv1.RoleRef, subjects []rbacv1.Subject, ns string, has func(kind, ns, name string) bool) {
	t.Helper()
	refNS := ""
	if ref.Kind == "Role" {
		refNS = ns
	}
	if !has(ref.Kind, refNS, ref.Name) && !slices.Contains(builtinRoles, ref.Kind+"/"+ref.Name) {
		t.Errorf("%s: %s %s refers to %s %s, defined nowhere", o.file, o.kind, o.meta.GetName(), ref.Kind, ref.Name)
	}
	if len(subjects) == 0 {
		t.Errorf("%s: %s %s has no subjects", o.file, o.kind, o.meta.GetName())
	}
	for _, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind || !has("ServiceAccount", s.Namespace, s.Name) {
			t.Errorf("%s: %s %s binds %s %s/%s, not a ServiceAccount of deploy/", o.file, o.kind, o.meta.GetName(), s.Kind, s.Namespace, s.Name)
		}
	}
}

func checkPodSpec(t *testing.T, o object, spec *corev1.PodSpec, has func(kind, ns, name string) bool) {
	t.Helper()
	if !has("ServiceAccount", o.meta.GetNamespace(), spec.ServiceAccountName) {
		t.Errorf("%s: %s %s runs as service account %q, defined nowhere", o.file, o.kind, o.meta.GetName(), spec.ServiceAccountName)
	}
}

// TestSchedulerDeployment checks that the Deployment runs kube-scheduler on
// the generated configuration and the extender where urlPrefix points.
func TestSchedulerDeployment(t *testing.T) {
	cfg := loadSchedulerConfig(t)
	var dep *appsv1.Deployment
	for _, o := range loadManifests(t) {
		if d, ok := o.obj.(*appsv1.Deployment); ok && d.Name == "dynmig-scheduler" {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("no Deployment dynmig-scheduler")
	}
	if r := dep.Spec.Replicas; r == nil || *r < 2 || !cfg.LeaderElection.LeaderElect {
		t.Errorf("replicas %v with leaderElect %v: want at least 2 with leader election", r, cfg.LeaderElection.LeaderElect)
	}
	spec := dep.Spec.Template.Spec
	mounts := map[string]string{} // volume -> mount path
	var scheduler, ext *corev1.Container
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		switch c.Name {
		case "kube-scheduler":
			scheduler = c
		case "extender":
			ext = c
		}
	}
	if scheduler == nil || ext == nil {
		t.Fatal("want containers kube-scheduler and extender")
	}

	// --config names the generated ConfigMap's key (the file's name) in its mount.
	var config string
	for _, a := range append(slices.Clone(scheduler.Command), scheduler.Args...) {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			config = v
		}
	}
	var volume string
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == "dynmig-scheduler-config" {
			volume = v.Name
		}
	}
	if want := path.Join(mounts[volume], "kube-scheduler-config.yaml"); volume == "" || config != want {
		t.Errorf("kube-scheduler --config=%q, want %q from ConfigMap dynmig-scheduler-config", config, want)
	}
	kustomization, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources          []string `json:"resources"`
		ConfigMapGenerator []struct {
			Name  string   `json:"name"`
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(kustomization, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.ConfigMapGenerator) != 1 || k.ConfigMapGenerator[0].Name != "dynmig-scheduler-config" ||
		!slices.Equal(k.ConfigMapGenerator[0].Files, []string{"scheduler/kube-scheduler-config.yaml"}) {
		t.Errorf("kustomization configMapGenerator = %+v, want dynmig-scheduler-config from scheduler/kube-scheduler-config.yaml", k.ConfigMapGenerator)
	}
	files := manifestFiles(t)
	slices.Sort(files)
	slices.Sort(k.Resources)
	if !slices.Equal(files, k.Resources) {
		t.Errorf("kustomization resources = %v, want every manifest file %v", k.Resources, files)
	}

	// The extender listens where urlPrefix points.
	var addr string
	for _, a := range ext.Args {
		if v, ok := strings.CutPrefix(a, "-addr="); ok {
			addr = v
		}
	}
	u, err := url.Parse(cfg.Extenders[0].URLPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if addr != u.Host {
		t.Errorf("extender -addr=%q, want %q (urlPrefix %s)", addr, u.Host, cfg.Extenders[0].URLPrefix)
	}
}
