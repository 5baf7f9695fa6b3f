package chart_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/kube"
)

// TestExamples: with the chart installed as README shows, every file of
// deploy/examples (the device plugin's workloads), applied as it is, gives
// pods that the dynmig scheduler binds and that run with one realized MIG
// instance per requested device, handed to their containers by the
// chart's device-list strategy. (deploy/dra/claim-example.yaml, the DRA
// driver's workload, is e2e/dra's.)
func TestExamples(t *testing.T) {
	defer http.DefaultClient.CloseIdleConnections()
	ctx := cluster.TestContext(t, 10*time.Minute)
	in := installChart(ctx, t, "extender")
	dir := cluster.DeployPath("examples")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	pods := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		created, err := in.c.ApplyManifests(ctx, filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("apply %s: %v", e.Name(), err)
		}
		for _, o := range created {
			if o.GetKind() != "Pod" {
				continue
			}
			var pod corev1.Pod
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &pod); err != nil {
				t.Fatal(err)
			}
			req, err := kube.ParseRequest(&pod)
			if err != nil {
				t.Fatalf("%s: pod %s: %v", e.Name(), pod.Name, err)
			}
			want := 0
			for _, c := range req.Containers {
				want += c.Devices
			}
			allocs := in.admitRealized(ctx, t, &pod)
			if len(allocs) != want {
				t.Errorf("%s: pod %s runs with %d MIG devices, want %d", e.Name(), pod.Name, len(allocs), want)
			}
			for _, a := range allocs {
				t.Logf("%s: pod %s container %d runs on %s at %d on %s", e.Name(), pod.Name, a.ContainerIndex, a.Profile, a.Placement.Start, a.GPUUUID)
				// The node has room for the first preference: it wins.
				if len(req.Preference) > 0 && a.Profile != req.Preference[0] && !strings.HasPrefix(a.Profile, req.Preference[0]+".") {
					t.Errorf("%s: pod %s got %s, not its preference %s", e.Name(), pod.Name, a.Profile, req.Preference[0])
				}
			}
			pods++
		}
	}
	if pods < 3 {
		t.Errorf("deploy/examples gave %d pods, want at least 3", pods)
	}
}
