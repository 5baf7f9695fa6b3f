package charttest_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

var update = flag.Bool("update", false, "rewrite testdata/rendered.yaml from the chart")

// golden is the checked-in `helm template` output the e2e module installs
// (charttest.RenderedFile): the chart with default values for a v1.37.2
// cluster, release dynmig in namespace dynmig-system.
var golden = charttest.Options{KubeVersion: "v1.37.2"}

// TestRenderedFile: the checked-in rendering is the chart's current one;
// `go test -run TestRenderedFile -update` rewrites it.
func TestRenderedFile(t *testing.T) {
	docs, err := charttest.Render(golden)
	if err != nil {
		t.Fatal(err)
	}
	got := "---\n" + strings.Join(docs, "---\n")
	path := charttest.RenderedFile()
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
