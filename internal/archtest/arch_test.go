package archtest_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/dynmig/dynmig"

// pkg is what go list -json says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages lists the module's packages with their imports and
// dependencies, test files excluded, as the toolchain resolves them.
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p
	}
	return pkgs
}

// layer gives each package directory its row in the architecture table;
// a package may import only packages of its own or a lower layer.
// internal/ has two levels (see [TestInternalLevels]): leaf helpers on the
// ground floor (a new one starts at layer 0, std only) and the wiring the
// binaries share, beside the components at layer 7.
func layer(rel string) int {
	top, _, _ := strings.Cut(rel, "/")
	switch {
	case rel == "internal/leaf/slotmap":
		return 2
	case strings.HasPrefix(rel, "internal/leaf/"):
		return 0 // gpulock, atomicfile, testwait, devnodes
	case top == "capability":
		return 1
	case rel == "placement/placementtest" || rel == "reservation/reservationtest":
		return 3
	case top == "placement" || rel == "reservation" || top == "schedule":
		return 2
	case top == "realize":
		return 4
	case top == "fakehal" || top == "nvmlhal":
		return 5
	case top == "kube":
		return 6
	case top == "deviceplugin" || top == "extender" || top == "dradriver" || strings.HasPrefix(rel, "internal/wiring/"):
		return 7
	}
	return 8 // cmd, examples, systemtest, deploy: anything
}

// isWiring reports whether rel is wiring the binaries share.
func isWiring(rel string) bool { return strings.HasPrefix(rel, "internal/wiring/") }

// TestInternalLevels keeps internal/'s two levels visible and apart:
// every internal package is a leaf helper (internal/leaf/..., which the
// library's layers build on) or wiring the binaries share
// (internal/wiring/..., which opens hardware, reads flags and files and
// starts servers); only the binaries (cmd/, examples/, systemtest) and
// other wiring import wiring, never a library package.
func TestInternalLevels(t *testing.T) {
	pkgs := listPackages(t)
	for rel, p := range pkgs {
		if strings.HasPrefix(rel, "internal/") && rel != "internal/archtest" &&
			!strings.HasPrefix(rel, "internal/leaf/") && !isWiring(rel) {
			t.Errorf("%s is neither internal/leaf/... nor internal/wiring/...: say which level it is", rel)
		}
		for _, imp := range p.Imports {
			dep := strings.TrimPrefix(imp, module+"/")
			if dep != imp && isWiring(dep) && !isWiring(rel) && layer(rel) < 8 {
				t.Errorf("%s imports %s: only the binaries and other wiring import internal/wiring", rel, dep)
			}
		}
	}
}

// TestArrowsPointDown: no package imports one of a higher layer.
func TestArrowsPointDown(t *testing.T) {
	pkgs := listPackages(t)
	for rel, p := range pkgs {
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if layer(dep) > layer(rel) {
				t.Errorf("%s (layer %d) imports %s (layer %d): arrows point down only", rel, layer(rel), dep, layer(dep))
			}
		}
	}
}

// TestExternalDependencies: only nvmlhal reaches go-nvml (cgo), only the
// nvmlhal tree, the backend wiring's cgo file and the binaries reach
// NVIDIA's container toolkit (cgo, a large module), nothing below kube
// reaches Kubernetes, and the fake-node demo links no client-go.
func TestExternalDependencies(t *testing.T) {
	pkgs := listPackages(t)
	for rel, p := range pkgs {
		for _, d := range p.Deps {
			switch {
			case strings.HasPrefix(d, "github.com/NVIDIA/go-nvml") && !strings.HasPrefix(rel, "nvmlhal") &&
				layer(rel) < 7:
				t.Errorf("%s depends on go-nvml: only nvmlhal may", rel)
			case strings.HasPrefix(d, "github.com/NVIDIA/nvidia-container-toolkit") && !strings.HasPrefix(rel, "nvmlhal/") &&
				rel != "internal/wiring/backend" && layer(rel) < 8:
				t.Errorf("%s depends on %s: only nvmlhal/nvcdigen and the nvml backend's wiring may", rel, d)
			case strings.HasPrefix(d, "k8s.io/") && layer(rel) < 6:
				t.Errorf("%s depends on %s: only kube and above may import Kubernetes", rel, d)
			case strings.HasPrefix(d, "k8s.io/client-go") && rel == "examples/lifecycle":
				t.Errorf("examples/lifecycle depends on %s: the fake-node demo must not link client-go", d)
			case d == "k8s.io/kubernetes" || strings.HasPrefix(d, "k8s.io/kubernetes/"):
				t.Errorf("%s depends on %s: the main module never imports k8s.io/kubernetes", rel, d)
			}
		}
	}
}
