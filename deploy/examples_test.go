package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
)

// examplesDir holds the workloads users write for the device plugin
// (deploy/dra/claim-example.yaml is the DRA driver's).
var examplesDir = filepath.Join(deployDir, "examples")

// examplePods decodes every document of every file of deploy/examples
// strictly (an unknown kind or field fails the test) and returns its pods
// by file.
func examplePods(t *testing.T) map[string][]*corev1.Pod {
	t.Helper()
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	entries, err := os.ReadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string][]*corev1.Pod{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			t.Errorf("%s: not a YAML file; deploy/examples holds only workloads", e.Name())
			continue
		}
		data, err := os.ReadFile(filepath.Join(examplesDir, e.Name()))
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
				t.Fatalf("%s: %v", e.Name(), err)
			}
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", e.Name(), i, err)
				continue
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				t.Errorf("%s, document %d: %T, want a Pod", e.Name(), i, obj)
				continue
			}
			pods[e.Name()] = append(pods[e.Name()], pod)
		}
	}
	return pods
}

// TestExamples: every example decodes strictly and is a complete dynmig
// MIG pod: the dynmig scheduler, the opt-in, a request kube.ParseRequest
// accepts, in the default namespace (so that kubectl apply -f puts it in
// the reader's), with the chart's scheduler name.
func TestExamples(t *testing.T) {
	pods := examplePods(t)
	for _, file := range []string{"mig-pod.yaml", "two-containers.yaml", "profile-preference.yaml"} {
		if len(pods[file]) != 1 {
			t.Errorf("%s: %d pods, want 1", file, len(pods[file]))
		}
	}
	for file, ps := range pods {
		for _, p := range ps {
			if p.Namespace != "" {
				t.Errorf("%s: pod %s names namespace %s; examples go where kubectl applies them", file, p.Name, p.Namespace)
			}
			if p.Spec.SchedulerName != "dynmig-scheduler" {
				t.Errorf("%s: pod %s: schedulerName %q, want dynmig-scheduler", file, p.Name, p.Spec.SchedulerName)
			}
			req, err := kube.ParseRequest(p)
			if err != nil {
				t.Errorf("%s: pod %s is not a MIG pod: %v", file, p.Name, err)
				continue
			}
			if devices(req) == 0 {
				t.Errorf("%s: pod %s requests no MIG device", file, p.Name)
			}
		}
	}
	if got := pods["two-containers.yaml"]; len(got) == 1 {
		if req, err := kube.ParseRequest(got[0]); err == nil && devices(req) != 2 {
			t.Errorf("two-containers.yaml: %d MIG devices, want one for each of two containers", devices(req))
		}
	}
	if got := pods["profile-preference.yaml"]; len(got) == 1 {
		if req, err := kube.ParseRequest(got[0]); err == nil && len(req.Preference) == 0 {
			t.Errorf("profile-preference.yaml: no profile preference")
		}
	}
}

// devices counts the MIG devices of every container of req.
func devices(req placement.Request) int {
	n := 0
	for _, c := range req.Containers {
		n += c.Devices
	}
	return n
}
