package dradriver_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/realize"
)

var errLost = errors.New("test: GPU is lost")

// lostOnce is a HealthWatcher whose watches fail their first wait (as NVML
// answers GPU_IS_LOST) and then deliver fakehal's events; calls receives
// the number of each Next call.
type lostOnce struct {
	node  *fakehal.Node
	calls chan int
}

func (l *lostOnce) WatchHealth(ctx context.Context, checks realize.HealthChecks) (realize.HealthWatch, error) {
	w, err := l.node.WatchHealth(ctx, checks)
	if err != nil {
		return nil, err
	}
	return &lostWatch{HealthWatch: w, calls: l.calls}, nil
}

type lostWatch struct {
	realize.HealthWatch
	calls chan int
	n     int
}

func (w *lostWatch) Next(ctx context.Context) (realize.HealthEvent, error) {
	w.n++
	w.calls <- w.n
	if w.n == 1 {
		return realize.HealthEvent{}, &realize.HardwareError{Op: "EventSetWait", GPU: -1, Cause: errLost}
	}
	return w.HealthWatch.Next(ctx)
}

// A failed wait does not end the driver's health watch: the events the
// backend reports next are applied (issue 25, defect 7).
func TestHealthWatchSurvivesWaitError(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	d := e.driver(t)
	hw := &lostOnce{node: e.hw, calls: make(chan int, 8)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		dradriver.WatchHealth(d, ctx, hw)
	}()
	defer func() {
		cancel()
		<-done
	}()
	await := func(want int) {
		t.Helper()
		bound, stop := context.WithTimeout(context.Background(), testwait.Bound())
		defer stop()
		for {
			select {
			case n := <-hw.calls:
				if n == want {
					return
				}
			case <-bound.Done():
				t.Fatalf("the health loop never made Next call %d", want)
			}
		}
	}
	await(2) // the wait error was logged and the loop went on
	if err := e.hw.InjectXid(1, "", 79); err != nil {
		t.Fatal(err)
	}
	await(3) // the event was applied
	for _, dev := range d.Catalog().Devices() {
		if dev.GPU == 1 {
			t.Fatalf("GPU 1 lost after a wait error still publishes %s", dev.Name)
		}
	}
}

// WatchHealthStatus tells the kubelet the health of every prepared device
// (KEP-4680): Healthy at first, Unhealthy with the cause once its GPU
// fails, while a device on the other GPU stays Healthy.
func TestWatchHealthStatus(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	d := e.driver(t)
	on0 := claimFor("uid-0", deviceName(t, e.hw, 0, "1g.6gb", 0, 1))
	on1 := claimFor("uid-1", deviceName(t, e.hw, 1, "1g.6gb", 0, 1))
	e.claims.set(true, on0, on1)
	for _, c := range []*resourceapi.ResourceClaim{on0, on1} {
		if r := prepareOne(t, d, c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHealthStatus = %v", err)
		}
	}()
	health := func() map[string]kubeletplugin.DeviceHealth {
		t.Helper()
		select {
		case rep := <-reports:
			out := map[string]kubeletplugin.DeviceHealth{}
			for _, dh := range rep.Devices {
				if dh.PoolName != testNode {
					t.Errorf("device %s in pool %s, want %s", dh.DeviceName, dh.PoolName, testNode)
				}
				out[dh.DeviceName] = dh
			}
			return out
		case <-time.After(testwait.Bound()):
			t.Fatal("no health report")
			return nil
		}
	}
	dev0, dev1 := deviceName(t, e.hw, 0, "1g.6gb", 0, 1), deviceName(t, e.hw, 1, "1g.6gb", 0, 1)
	first := health()
	if len(first) != 2 || first[dev0].Health != kubeletplugin.HealthStatusHealthy || first[dev1].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first report %+v, want both prepared devices Healthy", first)
	}
	d.ApplyHealth(realize.HealthEvent{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79})
	next := health()
	if got := next[dev1]; got.Health != kubeletplugin.HealthStatusUnhealthy || !strings.Contains(got.Message, "xid 79") {
		t.Errorf("device on the failed GPU: %+v, want Unhealthy naming xid 79", got)
	}
	if got := next[dev0]; got.Health != kubeletplugin.HealthStatusHealthy {
		t.Errorf("device on the healthy GPU: %+v, want Healthy", got)
	}
}

// taintsOf returns the driver's published devices by name with their taints.
func taintsOf(t *testing.T, d *dradriver.Driver) map[string][]resourceapi.DeviceTaint {
	t.Helper()
	out := map[string][]resourceapi.DeviceTaint{}
	for _, pool := range d.Resources().Pools {
		for _, s := range pool.Slices {
			for _, dev := range s.Devices {
				if _, dup := out[dev.Name]; dup {
					t.Errorf("device %s published twice", dev.Name)
				}
				out[dev.Name] = dev.Taints
			}
		}
	}
	return out
}

// Prepared devices hit by a failure are tainted on the ResourceSlice
// (KEP-5055): NoExecute when the GPU is lost (Xid 79), so the pods using
// them are evicted, NoSchedule for other failures; a device of a lost GPU
// is published again for its taint while the GPU's free devices stay
// withdrawn; a recovery removes the taints.
func TestDeviceTaints(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	d := e.driver(t)
	dev0, dev1 := deviceName(t, e.hw, 0, "1g.6gb", 0, 1), deviceName(t, e.hw, 1, "1g.6gb", 0, 1)
	on0, on1 := claimFor("uid-0", dev0), claimFor("uid-1", dev1)
	e.claims.set(true, on0, on1)
	for _, c := range []*resourceapi.ResourceClaim{on0, on1} {
		if r := prepareOne(t, d, c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got := taintsOf(t, d); len(got[dev0])+len(got[dev1]) != 0 {
		t.Fatalf("healthy devices tainted: %v", got)
	}
	free1 := deviceName(t, e.hw, 1, "1g.6gb", 1, 1)

	tests := []struct {
		name       string
		event      realize.HealthEvent
		dev        string
		wantValue  string
		wantEffect resourceapi.DeviceTaintEffect
	}{
		{name: "gpu lost", event: realize.HealthEvent{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79},
			dev: dev1, wantValue: "xid-79", wantEffect: resourceapi.DeviceTaintEffectNoExecute},
		{name: "ecc", event: realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseDoubleBitECC},
			dev: dev0, wantValue: "double-bit-ecc", wantEffect: resourceapi.DeviceTaintEffectNoSchedule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.ApplyHealth(tt.event)
			got := taintsOf(t, d)
			ts, ok := got[tt.dev]
			if !ok || len(ts) != 1 || ts[0].Key != dradriver.TaintKey || ts[0].Value != tt.wantValue || ts[0].Effect != tt.wantEffect {
				t.Errorf("device %s published %v with taints %+v, want one %s=%s:%s", tt.dev, ok, ts, dradriver.TaintKey, tt.wantValue, tt.wantEffect)
			}
			if _, ok := got[free1]; ok {
				t.Errorf("free device %s of the lost GPU is published", free1)
			}
		})
	}
	for gpu := range 2 {
		d.ApplyHealth(realize.HealthEvent{GPU: gpu, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: true, Cause: realize.CauseRecovered})
	}
	got := taintsOf(t, d)
	if len(got[dev0])+len(got[dev1]) != 0 {
		t.Errorf("taints after recovery: %v %v", got[dev0], got[dev1])
	}
	if _, ok := got[free1]; !ok {
		t.Errorf("free device %s not published again after recovery", free1)
	}

	// A failed MIG device on a healthy GPU: its device is tainted where it
	// is published.
	pc, _ := d.Checkpoint().Claim("uid-0")
	rt := pc.Devices[0].Runtime
	d.ApplyHealth(realize.HealthEvent{GPU: 0, GI: rt.GPUInstanceID, CI: rt.ComputeInstanceID, Cause: realize.CauseXid, Xid: 94})
	if ts := taintsOf(t, d)[dev0]; len(ts) != 1 || ts[0].Value != "xid-94" || ts[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("failed MIG device %s: taints %+v, want xid-94:NoSchedule", dev0, ts)
	}
}

// A prepared device whose profile left the allowlist stays published,
// retained; a failure gets it every taint a published device gets (issue
// 35, defect 4): NoExecute beside its NoSchedule retained taint when its
// GPU is lost, so its pods are evicted, and NoSchedule when its MIG device
// fails; it is published once, in its retained slice, and a recovery
// leaves only the retained taint.
func TestRetainedDeviceTaints(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	d := e.driver(t)
	dev := deviceName(t, e.hw, 0, "2g.12gb", 0, 2)
	c := claimFor("uid-r", dev)
	e.claims.set(true, c)
	if r := prepareOne(t, d, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := d.SetAllowlist(context.Background(), capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb"}}}); err != nil {
		t.Fatal(err)
	}
	retained := resourceapi.DeviceTaint{Key: dradriver.RetainedTaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if got := taintsOf(t, d)[dev]; !slices.Equal(got, []resourceapi.DeviceTaint{retained}) {
		t.Fatalf("retained device %s: taints %+v, want only %+v", dev, got, retained)
	}
	pc, _ := d.Checkpoint().Claim("uid-r")
	rt := pc.Devices[0].Runtime
	recovered := realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: true, Cause: realize.CauseRecovered}
	tests := []struct {
		name  string
		event realize.HealthEvent
		want  resourceapi.DeviceTaint
	}{
		{name: "gpu lost", event: realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79},
			want: resourceapi.DeviceTaint{Key: dradriver.TaintKey, Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoExecute}},
		{name: "mig device failed", event: realize.HealthEvent{GPU: 0, GI: rt.GPUInstanceID, CI: rt.ComputeInstanceID, Cause: realize.CauseXid, Xid: 94},
			want: resourceapi.DeviceTaint{Key: dradriver.TaintKey, Value: "xid-94", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.ApplyHealth(tt.event)
			if got := taintsOf(t, d)[dev]; !slices.Equal(got, []resourceapi.DeviceTaint{retained, tt.want}) {
				t.Errorf("retained device %s: taints %+v, want %+v and %+v", dev, got, retained, tt.want)
			}
			d.ApplyHealth(recovered) // a GPU's recovery clears its MIG devices' failures too
		})
	}
	if got := taintsOf(t, d)[dev]; !slices.Equal(got, []resourceapi.DeviceTaint{retained}) {
		t.Errorf("after recovery: taints %+v, want only %+v", got, retained)
	}
}
