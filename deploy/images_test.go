package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository root, seen from this package.
const repoRoot = ".."

// image is what TestImages requires of one component's build recipe.
type image struct {
	dockerfile, command string
	cgo                 bool   // built with cgo (the nvml backend)
	base                string // the final stage's base image
	module              string // the command's module directory, "" for the root
	component           string // hack/build-images.sh's name for it
}

var images = []image{
	{"extender.Dockerfile", "dynmig-scheduler-extender", false, "gcr.io/distroless/static-debian12:nonroot", "", "scheduler-extender"},
	{"device-plugin.Dockerfile", "dynmig-device-plugin", true, "gcr.io/distroless/base-debian12", "", "device-plugin"},
	{"dra-driver.Dockerfile", "dynmig-dra-driver", true, "gcr.io/distroless/base-debian12", "", "dra-driver"},
	{"kube-scheduler.Dockerfile", "kube-scheduler", false, "gcr.io/distroless/static-debian12:nonroot", "schedplugin", "kube-scheduler"},
}

// TestImages checks the build recipes without building them (CI has no
// container daemon): a pinned Go builder of the go.mod language version,
// cgo only where NVML needs it, the bases docs/deploying.md names, the version stamp
// on the variables internal/wiring/cli reads, and hack/build-images.sh building
// every one.
func TestImages(t *testing.T) {
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod: no go directive")
	}
	cliVars, err := os.ReadFile(filepath.Join(repoRoot, "internal", "wiring", "cli", "version.go"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, "hack", "build-images.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`(?m)^ARG GO_IMAGE=golang:` + regexp.QuoteMeta(string(goVersion[1])) + `\.\d+-bookworm$`)
	for _, im := range images {
		data, err := os.ReadFile(filepath.Join(repoRoot, "build", im.dockerfile))
		if err != nil {
			t.Fatal(err)
		}
		df := string(data)
		if !pinned.MatchString(df) {
			t.Errorf("%s: the Go builder is not pinned to a go%s.N release", im.dockerfile, goVersion[1])
		}
		froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(df, -1)
		if len(froms) == 0 || froms[len(froms)-1][1] != im.base {
			t.Errorf("%s: final stage FROM %v, want %s", im.dockerfile, froms, im.base)
		}
		if cgo := strings.Contains(df, "CGO_ENABLED=1"); cgo != im.cgo || strings.Contains(df, "CGO_ENABLED=0") == im.cgo {
			t.Errorf("%s: cgo %v, want %v", im.dockerfile, cgo, im.cgo)
		}
		if !strings.Contains(df, "./cmd/"+im.command) {
			t.Errorf("%s does not build ./cmd/%s", im.dockerfile, im.command)
		}
		if im.module != "" && !strings.Contains(df, "cd "+im.module+" && CGO_ENABLED=") {
			t.Errorf("%s does not build in module %s", im.dockerfile, im.module)
		}
		if _, err := os.Stat(filepath.Join(repoRoot, im.module, "cmd", im.command)); err != nil {
			t.Errorf("%s: %v", im.dockerfile, err)
		}
		for _, v := range []string{"version", "revision"} {
			if !strings.Contains(df, "-X github.com/dynmig/dynmig/internal/wiring/cli."+v+"=") {
				t.Errorf("%s: no version stamp on internal/wiring/cli.%s", im.dockerfile, v)
			}
			if !regexp.MustCompile(`(?m)^\s+` + v + `\s+string$`).Match(cliVars) {
				t.Errorf("internal/wiring/cli has no string variable %s for the linker to set", v)
			}
		}
		if !regexp.MustCompile(`(?m)^for component in .*\b` + im.component + `\b`).Match(script) {
			t.Errorf("hack/build-images.sh does not build %s", im.component)
		}
	}
	// The plugin scheduler reports the Kubernetes version it is built from.
	mod, err := os.ReadFile(filepath.Join(repoRoot, "schedplugin", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	kube := regexp.MustCompile(`(?m)^require k8s\.io/kubernetes (v\S+)$`).FindSubmatch(mod)
	df, err := os.ReadFile(filepath.Join(repoRoot, "build", "kube-scheduler.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if kube == nil || !strings.Contains(string(df), "ARG KUBE_VERSION="+string(kube[1])+"\n") {
		t.Errorf("kube-scheduler.Dockerfile: KUBE_VERSION is not schedplugin/go.mod's k8s.io/kubernetes %s", kube)
	}
}

// TestManifestImages: every image of ours that a kustomization names
// (deploy/, deploy/dra, schedplugin/deploy) is one hack/build-images.sh
// builds, under the placeholder registry `kustomize edit set image`
// replaces; kube-scheduler's tag is a Kubernetes version in the supported
// range (the chart's kubeVersion minimum up to the Kubernetes minor this
// module is built against), never a newer minor.
func TestManifestImages(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(repoRoot, "hack", "build-images.sh"))
	if err != nil {
		t.Fatal(err)
	}
	loop := regexp.MustCompile(`(?m)^for component in (.*); do$`).FindSubmatch(script)
	if loop == nil {
		t.Fatal("hack/build-images.sh: no component loop")
	}
	built := strings.Fields(string(loop[1]))
	imageLine := regexp.MustCompile(`(?m)^\s+image:\s*(\S+)`)
	ours := 0
	for _, file := range []string{"device-plugin.yaml", "scheduler/deployment.yaml", "dra/driver.yaml",
		"../schedplugin/deploy/deployment-patch.yaml"} {
		data, err := os.ReadFile(filepath.Join(deployDir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range imageLine.FindAllSubmatch(data, -1) {
			image := string(m[1])
			if strings.HasPrefix(image, "registry.k8s.io/kube-scheduler:") {
				checkKubeSchedulerTag(t, file, strings.TrimPrefix(image, "registry.k8s.io/kube-scheduler:"))
				continue
			}
			name, ok := strings.CutPrefix(image, "example.invalid/dynmig/")
			name, tagged := strings.CutSuffix(name, ":PLACEHOLDER")
			if !ok || !tagged || !slices.Contains(built, name) {
				t.Errorf("%s: image %s is not example.invalid/dynmig/<one of %v>:PLACEHOLDER", file, image, built)
			}
			ours++
		}
	}
	if ours != 4 {
		t.Errorf("%d images of ours in the manifests, want the extender, device plugin, DRA driver and kube-scheduler", ours)
	}
}

// checkKubeSchedulerTag: tag is vMAJOR.MINOR.PATCH with 1.MINOR between
// deploy/helm/dynmig/Chart.yaml's kubeVersion minimum and go.mod's
// k8s.io/api minor.
func checkKubeSchedulerTag(t *testing.T, file, tag string) {
	t.Helper()
	minor := func(re, text, what string) int {
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: no version", what)
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	chart, err := os.ReadFile(filepath.Join(deployDir, "helm", "dynmig", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	lo := minor(`(?m)^kubeVersion: ">=1\.(\d+)\.`, string(chart), "Chart.yaml kubeVersion")
	hi := minor(`(?m)^\s+k8s\.io/api v0\.(\d+)\.`, string(gomod), "go.mod k8s.io/api")
	got := minor(`^v1\.(\d+)\.\d+$`, tag, file+": kube-scheduler tag "+tag)
	if got < lo || got > hi {
		t.Errorf("%s: kube-scheduler %s is outside the supported 1.%d to 1.%d", file, tag, lo, hi)
	}
}
