package dradriver

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// HealthRefresh is how often [Driver.WatchHealthStatus] sends a report
// when nothing changed, well within the kubelet's staleness timeout
// (HealthTimeout).
const (
	HealthRefresh = 10 * time.Second
	HealthTimeout = 45 * time.Second
)

// WatchHealthStatus implements kubeletplugin.DRAPlugin (KEP-4680): it
// sends [Driver.HealthReport] at once, again at every health change and
// every [HealthRefresh], until ctx ends. The kubelet shows the health in
// the status of the pods that use the devices. New devices are left to the
// publication: an unhealthy GPU publishes none.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(HealthRefresh)
	defer tick.Stop()
	for {
		changed := d.healthChanged()
		select {
		case reports <- d.HealthReport():
		case <-ctx.Done():
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// healthChanged returns a channel closed at the next health change.
func (d *Driver) healthChanged() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.healthed == nil {
		d.healthed = make(chan struct{})
	}
	return d.healthed
}

// HealthReport returns the health of every prepared device: Unhealthy when
// its GPU is unhealthy or unmonitored or its MIG device failed, with the
// cause ([realize.HealthState.Why]) in the message; Healthy otherwise.
func (d *Driver) HealthReport() kubeletplugin.DeviceHealthReport {
	ck := d.Checkpoint()
	cat := d.Catalog()
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	var rep kubeletplugin.DeviceHealthReport
	for _, pc := range ck.Claims {
		for _, pd := range pc.Devices {
			dh := kubeletplugin.DeviceHealth{PoolName: d.cfg.Node, DeviceName: pd.Device, Health: kubeletplugin.HealthStatusHealthy,
				LastUpdated: now, HealthCheckTimeout: HealthTimeout}
			var g capability.GPU
			ok := false
			if cat != nil {
				g, ok = cat.GPU(pd.Partition.GPUUUID)
			}
			switch {
			case !ok:
				dh.Health, dh.Message = kubeletplugin.HealthStatusUnknown, "GPU "+pd.Partition.GPUUUID+" is not on the node"
			case !d.health.GPUHealthy(g.Index):
				why, _ := d.health.Why(g.Index)
				dh.Health, dh.Message = kubeletplugin.HealthStatusUnhealthy, why.String()
			case !d.health.MIGHealthy(g.Index, pd.Runtime.GPUInstanceID, pd.Runtime.ComputeInstanceID):
				dh.Health = kubeletplugin.HealthStatusUnhealthy
				dh.Message = fmt.Sprintf("GPU %d MIG %d/%d unhealthy", g.Index, pd.Runtime.GPUInstanceID, pd.Runtime.ComputeInstanceID)
				for _, e := range d.health.UnhealthyMIG(g.Index) {
					if e.GI == pd.Runtime.GPUInstanceID && e.CI == pd.Runtime.ComputeInstanceID {
						dh.Message = e.String()
					}
				}
			}
			rep.Devices = append(rep.Devices, dh)
		}
	}
	return rep
}

// watchHealth applies the backend's health events until ctx is done; a
// GPU-level transition republishes. It follows a [realize.HealthMonitor]:
// a watch that cannot be opened makes every GPU unmonitored (published
// with no devices) and is retried with backoff, and a failed wait is
// logged while the watch keeps running, so that what the backend reports
// next (every GPU unhealthy after a lost GPU, then the recoveries) is
// applied.
func (d *Driver) watchHealth(ctx context.Context, hw realize.HealthWatcher) {
	d.mu.Lock()
	gpus := make([]int, 0, len(d.gpus))
	for _, g := range d.gpus {
		gpus = append(gpus, g.Index)
	}
	d.mu.Unlock()
	w := realize.NewHealthMonitor(hw, gpus, realize.HealthMonitorOptions{Checks: d.cfg.HealthChecks, Logger: d.log})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		switch {
		case ctx.Err() != nil || errors.Is(err, realize.ErrWatchClosed):
			return
		case err != nil:
			d.log.Warn("waiting for GPU health events; the watch goes on", "err", err)
			continue
		}
		if d.applyHealth(ev) {
			d.recordHealthEvent(ctx, ev)
		}
	}
}

// ApplyHealth records a health event. Any change wakes
// [Driver.WatchHealthStatus] and rebuilds the publication: an unhealthy
// GPU publishes no free devices, and prepared devices hit by a failure
// are tainted ([Driver.Resources]).
func (d *Driver) ApplyHealth(ev realize.HealthEvent) { d.applyHealth(ev) }

// applyHealth is ApplyHealth; it reports whether the event changed
// anything.
func (d *Driver) applyHealth(ev realize.HealthEvent) bool {
	d.mu.Lock()
	changed := d.health.Apply(ev)
	if changed && d.healthed != nil {
		close(d.healthed)
		d.healthed = nil
	}
	after := d.health.GPUHealthy(ev.GPU)
	d.mu.Unlock()
	if changed {
		d.log.Info("GPU health changed", "gpu", ev.GPU, "gpu_healthy", after, "event", ev.String())
		d.rebuild()
	}
	return changed
}

// recordHealthEvent records an Event on the node for one health
// transition the watch applied. Failures are logged by client-go: an Event
// is information, never a reason to stop.
func (d *Driver) recordHealthEvent(ctx context.Context, ev realize.HealthEvent) {
	d.mu.Lock()
	events, ref := d.events, d.nodeRef
	var uuid string
	for _, g := range d.full {
		if g.Index == ev.GPU {
			uuid = g.UUID
		}
	}
	d.mu.Unlock()
	if events == nil {
		return
	}
	var consequence string
	switch {
	case ev.Cause == realize.CauseUnmonitored:
		consequence = "its health cannot be watched, so it publishes no free devices until it can; prepared devices stay with their claims"
	case !ev.Healthy && ev.WholeGPU():
		consequence = "it publishes no free devices, and its prepared devices are tainted " + TaintKey
	case !ev.Healthy:
		consequence = "its prepared device is tainted " + TaintKey
	}
	kind, reason, note := kube.HealthEventFor(ev, uuid, consequence)
	events.Eventf(ref.Get(ctx), nil, kind, reason, kube.HealthAction, "%s", note)
}

// TaintKey is the key of the device taints (KEP-5055) the driver puts on
// the prepared devices of a failed GPU or MIG device; the value names the
// cause, such as "xid-79".
const TaintKey = DriverName + "/unhealthy"

// taint returns the taint of a prepared device with runtime identity rt on
// the GPU, and false when neither the GPU nor the MIG device is unhealthy.
// The caller holds d.mu.
func (d *Driver) taint(gpu int, rt reservation.RuntimeIdentity) (resourceapi.DeviceTaint, bool) {
	why, bad := d.health.Why(gpu)
	if !bad {
		if d.health.MIGHealthy(gpu, rt.GPUInstanceID, rt.ComputeInstanceID) {
			return resourceapi.DeviceTaint{}, false
		}
		for _, e := range d.health.UnhealthyMIG(gpu) {
			if e.GI == rt.GPUInstanceID && e.CI == rt.ComputeInstanceID {
				why = e
			}
		}
	}
	t := resourceapi.DeviceTaint{Key: TaintKey, Value: why.Cause.String(), Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if why.Cause == realize.CauseXid {
		t.Value = fmt.Sprintf("xid-%d", why.Xid)
	}
	lost := why.Cause == realize.CauseUnavailable || why.Cause == realize.CauseWatchFailed || why.Cause == realize.CauseXid && why.Xid == 79
	if lost && why.WholeGPU() {
		t.Effect = resourceapi.DeviceTaintEffectNoExecute
	}
	return t, true
}
