package dradriver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/kube"
)

// waitFor polls cond until it holds, within the test binary's -timeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRun drives the whole driver through kubeletplugin.Start on a fake
// clientset: the informer lists claims, the ResourceSlice controller
// publishes the catalog, and a NodePrepareResources call on the DRA socket
// (as the kubelet makes it) realizes the allocated device; the slices are
// republished in the new order; Run stops every goroutine when ctx ends.
func TestRun(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30"}})
	// Unix socket paths are short: use a short temporary directory.
	base, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dataDir, regDir, cdiDir := filepath.Join(base, "p"), filepath.Join(base, "r"), filepath.Join(base, "c")
	for _, dir := range []string{dataDir, regDir, cdiDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}})
	// The fake clientset does not fill metadata.generateName, which the
	// ResourceSlice controller uses; the API server would.
	var generated atomic.Int64
	client.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(generated.Add(1), 10)
		}
		return false, nil, nil
	})
	d, err := dradriver.New(dradriver.Config{
		Node: testNode, Hardware: hw, Client: client,
		CDIDir: cdiDir, DataDir: dataDir, RegistrarDir: regDir,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	slices := func() []resourceapi.ResourceSlice {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	waitFor(t, "ResourceSlices", func() bool { return len(slices()) == 4 })
	first := func() string {
		for _, s := range slices() {
			if len(s.Spec.Devices) > 0 && *s.Spec.Devices[0].Attributes[dradriver.AttrProfile].StringValue == "1g.6gb" {
				return s.Spec.Devices[0].Name
			}
		}
		return ""
	}
	dev := first()
	claim := claimFor("uid-run", dev)
	claim.Name = "run"
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The allocation takes the first 1g.6gb slot: the slices are
	// republished with it last among the 1g.6gb devices.
	waitFor(t, "republished order", func() bool { return first() != "" && first() != dev })

	conn, err := grpc.NewClient("unix://"+filepath.Join(dataDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "default", Name: "run", Uid: "uid-run"}},
	})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	got := resp.Claims["uid-run"]
	if got == nil || got.Error != "" || len(got.Devices) != 1 || got.Devices[0].DeviceName != dev || len(got.Devices[0].CdiDeviceIds) != 1 {
		t.Fatalf("response %v, want one CDI device for %s", got, dev)
	}
	if n := len(hw.Snapshot()); n != 1 {
		t.Errorf("live instances = %d, want 1", n)
	}
	uresp, err := drapb.NewDRAPluginClient(conn).NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: "default", Name: "run", Uid: "uid-run"}},
	})
	if err != nil || uresp.Claims["uid-run"] == nil || uresp.Claims["uid-run"].Error != "" {
		t.Fatalf("NodeUnprepareResources: %v, %v", uresp, err)
	}
	if n := len(hw.Snapshot()); n != 0 {
		t.Errorf("live instances = %d after unprepare, want 0", n)
	}

	// A lost GPU is recorded as an Event on the node, by its UID.
	if err := hw.InjectXid(0, "", 79); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the GPUUnhealthy Event", func() bool {
		l, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range l.Items {
			if ev.Reason == kube.ReasonGPUUnhealthy && ev.Regarding.Kind == "Node" && ev.Regarding.UID == "node-uid" &&
				ev.ReportingController == dradriver.EventSource && ev.Type == v1.EventTypeWarning {
				return true
			}
		}
		return false
	})
}

// TestRunNeedsClient: Run without an API client is a configuration error.
func TestRunNeedsClient(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d, err := dradriver.New(dradriver.Config{Node: testNode, Hardware: e.hw, Claims: e.claims, CDIDir: e.cdiDir, DataDir: e.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(context.Background()); !errors.Is(err, dradriver.ErrConfig) {
		t.Errorf("Run = %v, want ErrConfig", err)
	}
}
