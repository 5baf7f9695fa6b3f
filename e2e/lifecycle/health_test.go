package lifecycle_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/kube"
)

// TestGPUHealth: fakehal injects Xid 79 on the GPU of a running MIG pod.
// The node registration marks the GPU, the running pod gets an Event, a new
// pod lands on the other GPU, the mark survives a device-plugin restart
// (the plugin's own node record, under the deployed admission policy), and
// the driver's recovery event brings the GPU back.
func TestGPUHealth(t *testing.T) {
	e := startEnv(t, &extenderScheduling{})
	victim := e.create(e.migPod("victim", 5000))
	e.waitBound(victim.Name)
	realized := e.admitNext(victim.Name)
	failed := -1
	for i := range e.hw.NumGPUs() {
		if e.gpuUUID(i) == realized[0].GPUUUID {
			failed = i
		}
	}
	if failed < 0 {
		t.Fatalf("the victim's GPU %s is not on the node", realized[0].GPUUUID)
	}
	registered := func(ctx context.Context) (unhealthy, recorded bool, ok bool) {
		n, err := e.admin.CoreV1().Nodes().Get(ctx, e.node.Name, metav1.GetOptions{})
		if err != nil {
			return false, false, false
		}
		gpus, err := kube.NodeGPUs(n)
		if err != nil {
			return false, false, false
		}
		for _, g := range gpus {
			if g.Index == failed {
				_, rec := n.Annotations[deviceplugin.HealthRecordAnnotation]
				return g.Unhealthy, rec, true
			}
		}
		return false, false, false
	}

	if err := e.hw.InjectXid(failed, "", 79); err != nil {
		t.Fatal(err)
	}
	e.wait("the registration to mark the failed GPU, and the plugin to record it", func(ctx context.Context) (bool, error) {
		bad, rec, ok := registered(ctx)
		return ok && bad && rec, nil
	})
	e.wait("a GPUUnhealthy Event on the running pod", func(ctx context.Context) (bool, error) {
		list, err := e.admin.CoreV1().Events(testNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Pod" && ev.InvolvedObject.Name == victim.Name && ev.Reason == deviceplugin.ReasonGPUUnhealthy &&
				strings.Contains(ev.Message, "xid 79") {
				return true, nil
			}
		}
		return false, nil
	})

	newcomer := e.create(e.migPod("newcomer", 5000))
	if got := allocations(t, e.waitBound(newcomer.Name)); got[0].GPUUUID == realized[0].GPUUUID {
		t.Fatalf("a new pod was placed on the failed GPU %s", got[0].GPUUUID)
	}
	e.admitNext(newcomer.Name)

	if err := e.plugin.Stop(); err != nil {
		t.Fatalf("plugin stopped with %v", err)
	}
	e.startPlugin()
	if bad, rec, ok := registered(e.ctx); !ok || !bad || !rec {
		t.Fatalf("after the restart: registered %v, GPU unhealthy %v, recorded %v; want the failed GPU still out", ok, bad, rec)
	}

	if err := e.hw.Recover(failed); err != nil {
		t.Fatal(err)
	}
	e.wait("the recovered GPU healthy again and its record gone", func(ctx context.Context) (bool, error) {
		bad, rec, ok := registered(ctx)
		return ok && !bad && !rec, nil
	})
}
