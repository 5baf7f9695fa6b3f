package charttest_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// deployDir is the repository's deploy/ directory.
func deployDir() string { return filepath.Join(charttest.ChartDir(), "..", "..") }

// kustomizeObjects decodes, strictly, every resource deploy/'s
// kustomization lists (its configMapGenerator's ConfigMap is the
// scheduler configuration, which TestSchedulerConfigMatchesDeploy
// compares).
func kustomizeObjects(t *testing.T) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir(), "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var out []runtime.Object
	for _, file := range k.Resources {
		data, err := os.ReadFile(filepath.Join(deployDir(), file))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if strings.TrimSpace(stripYAMLComments(string(doc))) == "" {
				continue
			}
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

func stripYAMLComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// key names an object across the two renderings.
func key(o runtime.Object) string {
	m := o.(metav1.Object)
	return o.GetObjectKind().GroupVersionKind().Kind + " " + m.GetNamespace() + "/" + m.GetName()
}

// repository is an image without its registry and tag: the component's
// name, which hack/build-images.sh gives it. Upstream images keep their
// registry.
func repository(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	if strings.HasPrefix(name, "registry.k8s.io/") {
		return name
	}
	return name[strings.LastIndex(name, "/")+1:]
}

// TestAgreesWithDeploy: for every object that deploy/'s kustomization and
// the chart (default values, for the Kubernetes version deploy/ pins)
// both have, the same images (by repository; kube-scheduler's by tag
// too), the same command and args in each container, and the same RBAC
// rules.
func TestAgreesWithDeploy(t *testing.T) {
	deployed := map[string]runtime.Object{}
	for _, o := range kustomizeObjects(t) {
		deployed[key(o)] = o
	}
	chart := objects(t, charttest.Options{KubeVersion: "v1.37.2"})
	shared := 0
	for _, c := range chart {
		d, ok := deployed[key(c)]
		if !ok {
			continue
		}
		shared++
		switch c := c.(type) {
		case *rbacv1.ClusterRole:
			compareRules(t, key(c), c.Rules, d.(*rbacv1.ClusterRole).Rules)
		case *rbacv1.Role:
			compareRules(t, key(c), c.Rules, d.(*rbacv1.Role).Rules)
		case *rbacv1.ClusterRoleBinding:
			d := d.(*rbacv1.ClusterRoleBinding)
			compareBinding(t, key(c), c.RoleRef, d.RoleRef, c.Subjects, d.Subjects)
		case *rbacv1.RoleBinding:
			d := d.(*rbacv1.RoleBinding)
			compareBinding(t, key(c), c.RoleRef, d.RoleRef, c.Subjects, d.Subjects)
		}
		if spec := podSpecs([]runtime.Object{c})[c.(metav1.Object).GetName()]; spec != nil {
			comparePods(t, key(c), spec, podSpecs([]runtime.Object{d})[c.(metav1.Object).GetName()])
		}
	}
	// The objects the comparison must not lose to a rename.
	for _, want := range []string{"Deployment dynmig-system/dynmig-scheduler", "DaemonSet dynmig-system/dynmig-device-plugin",
		"ClusterRole /dynmig-scheduler-extender", "ClusterRole /dynmig-device-plugin", "Role dynmig-system/dynmig-scheduler-leader-election",
		"ClusterRoleBinding /dynmig-scheduler-as-kube-scheduler", "ConfigMap dynmig-system/dynmig-device-config"} {
		_, inDeploy := deployed[want]
		inChart := slices.ContainsFunc(chart, func(o runtime.Object) bool { return key(o) == want })
		if !inDeploy || !inChart {
			t.Errorf("%s: in deploy/ %v, in the chart %v", want, inDeploy, inChart)
		}
	}
	if shared < 10 {
		t.Errorf("the chart and deploy/ share %d objects", shared)
	}
}

func compareRules(t *testing.T, what string, chart, deployed []rbacv1.PolicyRule) {
	t.Helper()
	if !reflect.DeepEqual(chart, deployed) {
		t.Errorf("%s: the chart's rules\n%v\ndeploy/'s\n%v", what, chart, deployed)
	}
}

func compareBinding(t *testing.T, what string, chartRef, deployedRef rbacv1.RoleRef, chart, deployed []rbacv1.Subject) {
	t.Helper()
	if chartRef != deployedRef || !reflect.DeepEqual(chart, deployed) {
		t.Errorf("%s: the chart binds %v to %v, deploy/ %v to %v", what, chartRef, chart, deployedRef, deployed)
	}
}

func comparePods(t *testing.T, what string, chart, deployed *corev1.PodSpec) {
	t.Helper()
	if deployed == nil {
		t.Errorf("%s: deploy/'s has no pod template", what)
		return
	}
	names := func(cs []corev1.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if !slices.Equal(names(chart.Containers), names(deployed.Containers)) {
		t.Errorf("%s: containers %v in the chart, %v in deploy/", what, names(chart.Containers), names(deployed.Containers))
		return
	}
	for i, c := range chart.Containers {
		d := deployed.Containers[i]
		ci, di := c.Image, d.Image
		if repository(ci) != repository(di) || (strings.HasPrefix(ci, "registry.k8s.io/") && ci != di) {
			t.Errorf("%s container %s: image %s in the chart, %s in deploy/", what, c.Name, ci, di)
		}
		if !slices.Equal(c.Command, d.Command) {
			t.Errorf("%s container %s: command\n%v in the chart,\n%v in deploy/", what, c.Name, c.Command, d.Command)
		}
		if !slices.Equal(c.Args, d.Args) {
			t.Errorf("%s container %s: args\n%v in the chart,\n%v in deploy/", what, c.Name, c.Args, d.Args)
		}
	}
}
