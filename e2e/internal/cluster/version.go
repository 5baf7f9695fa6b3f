package cluster

import (
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// KubernetesModule is the module the control plane is built from.
const KubernetesModule = "k8s.io/kubernetes"

// PinnedKubernetesVersion is the k8s.io/kubernetes version go.mod pins and
// the harness was written against. The device manager is built through an
// unexported constructor (see newDeviceManager in node.go), whose signature
// is only known for this version: the harness refuses to start a node on
// any other.
const PinnedKubernetesVersion = "v1.37.2"

// KubernetesVersion returns the k8s.io/kubernetes module version this
// binary was built from, "" if it cannot tell. The API server's own version
// string is a development placeholder, so tests log this instead.
//
// It reads the build information (debug.ReadBuildInfo). Test binaries carry
// no module dependencies there, so it then falls back to the source path
// the compiler recorded for a function of the module, which names the
// module version ("k8s.io/kubernetes@v1.37.2/..."), with or without
// -trimpath.
func KubernetesVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == KubernetesModule {
				if dep.Replace != nil {
					return dep.Replace.Version
				}
				return dep.Version
			}
		}
	}
	fn := runtime.FuncForPC(reflect.ValueOf(kubeapiservertesting.StartTestServer).Pointer())
	if fn == nil {
		return ""
	}
	file, _ := fn.FileLine(fn.Entry())
	_, rest, ok := strings.Cut(file, KubernetesModule+"@")
	if !ok {
		return ""
	}
	version, _, _ := strings.Cut(rest, "/")
	return version
}

var logVersion sync.Once

func logVersionOnce(t *testing.T) {
	logVersion.Do(func() {
		t.Logf("control plane built from %s %s", KubernetesModule, KubernetesVersion())
	})
}
