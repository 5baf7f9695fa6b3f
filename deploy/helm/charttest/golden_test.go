package charttest_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

var update = flag.Bool("update", false, "rewrite testdata from the chart")

// golden is the checked-in `helm template` output the e2e module installs
// (charttest.RenderedFile): the chart with default values and the
// images.registry README's install sets, for a v1.37.2 cluster, release
// dynmig in namespace dynmig-system. The other renderings get the same
// registry from render.
var golden = charttest.Options{KubeVersion: "v1.37.2",
	Values: map[string]any{"images": map[string]any{"registry": testRegistry}}}

// goldenPlugin is golden with scheduler.mode plugin
// (charttest.RenderedPluginFile).
var goldenPlugin = charttest.Options{KubeVersion: "v1.37.2",
	Values: map[string]any{"scheduler": map[string]any{"mode": "plugin"}, "images": map[string]any{"registry": testRegistry}}}

// admission renders the admission policy for a cluster serving
// MutatingAdmissionPolicy v1 (charttest.AdmissionPolicyFile).
var admission = charttest.Options{
	KubeVersion: "v1.37.2",
	APIVersions: []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"},
	Values:      map[string]any{"admissionPolicy": map[string]any{"enabled": true}},
}

// recordWriters renders the sealing policy with the writer the e2e
// module's test account is (charttest.RecordPolicyFile).
var recordWriters = charttest.Options{
	KubeVersion: "v1.37.2",
	Values:      map[string]any{"recordPolicy": map[string]any{"writers": []any{"e2e/migration-writer"}}},
}

// TestRenderedFile: the checked-in renderings are the chart's current
// ones; `go test -run TestRenderedFile -update` rewrites them.
func TestRenderedFile(t *testing.T) {
	docs, err := render(golden)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, charttest.RenderedFile(), docs)
	docs, err = render(goldenPlugin)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, charttest.RenderedPluginFile(), docs)
	docs, err = render(admission)
	if err != nil {
		t.Fatal(err)
	}
	var policy []string
	for _, d := range docs {
		if strings.HasPrefix(d, "# Source: dynmig/templates/admission-policy.yaml\n") {
			policy = append(policy, d)
		}
	}
	if len(policy) != 2 {
		t.Fatalf("admission policy: %d documents, want the policy and its binding", len(policy))
	}
	checkGolden(t, charttest.AdmissionPolicyFile(), policy)
	docs, err = render(recordWriters)
	if err != nil {
		t.Fatal(err)
	}
	policy = policy[:0]
	for _, d := range docs {
		if strings.HasPrefix(d, "# Source: dynmig/templates/record-policy.yaml\n") {
			policy = append(policy, d)
		}
	}
	if len(policy) != 2 {
		t.Fatalf("record policy: %d documents, want the policy and its binding", len(policy))
	}
	checkGolden(t, charttest.RecordPolicyFile(), policy)
}

func checkGolden(t *testing.T, path string, docs []string) {
	t.Helper()
	got := "---\n" + strings.Join(docs, "---\n")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is not the chart's rendering; run go test -run TestRenderedFile -update", path)
	}
}
