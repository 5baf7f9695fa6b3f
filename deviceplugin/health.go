package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// ErrUnhealthyGPU: a container's reservation would need a new MIG instance
// on a GPU the plugin reports unhealthy. Nothing is created; the kubelet
// fails the pod's admission, and the scheduler, which reads the GPU
// unhealthy from the node registration, places its replacement elsewhere.
var ErrUnhealthyGPU = errors.New("deviceplugin: GPU is unhealthy")

// UnhealthyGPUError names the reservation entry refused with
// [ErrUnhealthyGPU] and the health event that made the GPU unhealthy.
type UnhealthyGPUError struct {
	Pod            string // namespace/name
	ContainerIndex int
	DeviceIndex    int
	GPU            int // NVML index
	GPUUUID        string
	Why            realize.HealthEvent
}

func (e *UnhealthyGPUError) Error() string {
	return fmt.Sprintf("deviceplugin: pod %s container %d device %d: GPU %d (%s) is unhealthy (%v): no new MIG instance is created on it",
		e.Pod, e.ContainerIndex, e.DeviceIndex, e.GPU, e.GPUUUID, e.Why)
}

// Unwrap returns [ErrUnhealthyGPU].
func (e *UnhealthyGPUError) Unwrap() error { return ErrUnhealthyGPU }

// Reasons of the Kubernetes Events the plugin records on its node when a
// GPU's or MIG device's health changes: package kube's, shared with the
// DRA driver.
const (
	ReasonGPUUnhealthy       = kube.ReasonGPUUnhealthy
	ReasonGPUHealthy         = kube.ReasonGPUHealthy
	ReasonMIGDeviceUnhealthy = kube.ReasonMIGDeviceUnhealthy
	ReasonMIGDeviceHealthy   = kube.ReasonMIGDeviceHealthy
	ReasonGPUUnmonitored     = kube.ReasonGPUUnmonitored
	ReasonGPUMonitored       = kube.ReasonGPUMonitored
)

// EventSource is the component name of the plugin's Events.
const EventSource = "dynmig-device-plugin"

// healthTracker is the plugin's view of GPU health, fed by the backend's
// [realize.HealthWatch]. The zero value is ready: everything healthy.
type healthTracker struct {
	mu      sync.Mutex
	state   realize.HealthState
	changed chan struct{}     // closed and replaced on every transition
	seq     uint64            // transitions so far
	bad     map[int]bool      // GPUs that ever had a transition: where to look for MIG marks
	since   map[int]time.Time // when each unhealthy GPU became so

	// held are the containers the kubelet gave each device ID to
	// (healthpods.go).
	held map[string]holder

	// recorded are the UUIDs in the node's health record as last read or
	// written (healthrecord.go), guarded by recMu, which also serialises
	// the record's sync: the health loop and SetAllowlist's publish both
	// run it.
	recMu    sync.Mutex
	recorded map[string]bool
}

// anyRecorded reports whether the node's health record names a GPU.
func (h *healthTracker) anyRecorded() bool {
	h.recMu.Lock()
	defer h.recMu.Unlock()
	return len(h.recorded) > 0
}

// watch returns a channel closed at the next transition.
func (h *healthTracker) watch() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.changed
}

// applyAt records e, which happened at the given time, and reports
// whether it changed anything, with the transition's number; a change
// wakes every ListAndWatch stream.
func (h *healthTracker) applyAt(e realize.HealthEvent, at time.Time) (seq uint64, changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.state.Apply(e) {
		return h.seq, false
	}
	if h.bad == nil {
		h.bad, h.since = map[int]bool{}, map[int]time.Time{}
	}
	h.bad[e.GPU] = true
	if _, bad := h.state.Why(e.GPU); !bad {
		delete(h.since, e.GPU)
	} else if _, ok := h.since[e.GPU]; !ok {
		h.since[e.GPU] = at
	}
	h.seq++
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
	return h.seq, true
}

// anyBadMIG reports whether some MIG device is marked unhealthy on its own.
func (h *healthTracker) anyBadMIG() bool { return len(h.gpusWithBadMIG()) > 0 }

// gpusWithBadMIG lists the GPUs with MIG devices unhealthy on their own.
func (h *healthTracker) gpusWithBadMIG() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for gpu := range h.bad {
		if h.state.UnhealthyMIGDevices(gpu) > 0 {
			out = append(out, gpu)
		}
	}
	return out
}

// forgetGone drops the marks of the GPU's MIG devices not in live (GI, CI)
// and wakes ListAndWatch when it dropped any.
func (h *healthTracker) forgetGone(gpu int, live map[[2]uint32]bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := false
	for _, e := range h.state.UnhealthyMIG(gpu) {
		if !live[[2]uint32{e.GI, e.CI}] && h.state.Forget(gpu, e.GI, e.CI) {
			changed = true
		}
	}
	if changed && h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
	return changed
}

// gpu reports whether the GPU takes new instances, with the event that
// made it unhealthy when it does not.
func (h *healthTracker) gpu(index int) (realize.HealthEvent, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	why, bad := h.state.Why(index)
	return why, !bad
}

// GPUHealth reports whether the GPU with the NVML index takes new MIG
// instances and, when it does not, the event that made it unhealthy
// (its first failure, else the event that made it unmonitored).
func (p *Plugin) GPUHealth(index int) (why realize.HealthEvent, healthy bool) {
	return p.health.gpu(index)
}

// why returns the event that made the GPU unhealthy and when, and false
// when it is healthy.
func (h *healthTracker) why(index int) (realize.HealthEvent, time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, bad := h.state.Why(index)
	return e, h.since[index], bad
}

// badMIGDevices counts the GPU's MIG devices unhealthy on their own.
func (h *healthTracker) badMIGDevices(index int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state.UnhealthyMIGDevices(index)
}

// markGPUs returns a copy of gpus with Unhealthy set from the tracker, for
// publishing: the node registration then carries each GPU's health.
func (h *healthTracker) markGPUs(gpus []capability.GPU) []capability.GPU {
	out := make([]capability.GPU, len(gpus))
	copy(out, gpus)
	for i := range out {
		if _, ok := h.gpu(out[i].Index); !ok {
			out[i].Unhealthy = true
		}
	}
	return out
}

// publish brings the node's health record in line (which may find GPUs
// an operator cleared) and writes the node registration with each GPU's
// current health.
func (p *Plugin) publish(ctx context.Context) error {
	if err := p.syncHealthRecord(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	gpus := p.health.markGPUs(p.gpus)
	p.mu.Unlock()
	if _, err := p.publisher.PublishGPUs(ctx, gpus); err != nil {
		return fmt.Errorf("deviceplugin: publish node registration: %w", err)
	}
	return nil
}

// publishRetry is how long the health loop waits before publishing again
// after the API server refused a registration update.
const publishRetry = 5 * time.Second

// recordInterval is how often the health loop reads the node's health
// record while it names a GPU, to see whether an operator cleared it.
var recordInterval = 30 * time.Second

// pruneInterval is how often the health loop looks for unhealthy MIG
// devices that no longer exist, while there are any.
var pruneInterval = 30 * time.Second

// openHealth subscribes to the backend's health events when it is a
// [realize.HealthWatcher]; nil otherwise (every GPU stays healthy). It
// returns a [realize.HealthMonitor]: when the backend cannot open a watch,
// the GPUs are reported unmonitored (not healthy) and the watch is retried
// with backoff. [Plugin.Run] makes the first attempt before it reports
// ready, so that no transition after Ready is missed.
func (p *Plugin) openHealth(ctx context.Context) realize.HealthWatch {
	hw, ok := p.cfg.Hardware.(realize.HealthWatcher)
	if !ok {
		p.log.Info("backend reports no GPU health; every GPU is published healthy")
		return nil
	}
	p.mu.Lock()
	gpus := make([]int, 0, len(p.gpus))
	for _, g := range p.gpus {
		gpus = append(gpus, g.Index)
	}
	p.mu.Unlock()
	m := realize.NewHealthMonitor(hw, gpus, realize.HealthMonitorOptions{Checks: p.cfg.HealthChecks, Logger: p.log})
	if err := m.Open(ctx); err != nil {
		p.log.Error("cannot watch GPU health; the GPUs are reported unmonitored and the watch is retried", "err", err)
	}
	return m
}

// watchHealth follows w's health events until ctx is done, and closes w.
// Each transition is logged, recorded as an Event on the node,
// republished in the node registration (retried every publishRetry while
// the API server refuses it) and sent to ListAndWatch. It runs in a
// goroutine of [Plugin.Run].
func (p *Plugin) watchHealth(ctx context.Context, w realize.HealthWatch) {
	defer func() {
		if err := w.Close(); err != nil {
			p.log.Warn("closing the health watch", "err", err)
		}
	}()
	unpublished := false
	for {
		e, err := p.nextHealth(ctx, w, unpublished)
		switch {
		case ctx.Err() != nil || errors.Is(err, realize.ErrWatchClosed):
			return
		case errors.Is(err, context.DeadlineExceeded): // time to retry the publish, prune or check the record
			p.pruneMIGHealth(ctx)
			p.refreshHolders(ctx)
			if !unpublished && !p.health.anyRecorded() {
				continue
			}
		case err != nil:
			p.log.Error("waiting for GPU health events", "err", err) // the watch reports the GPUs next
			continue
		default:
			_, changed := p.health.applyAt(e, p.cfg.Clock.Now())
			if !changed {
				continue
			}
			p.log.Warn("GPU health changed", "event", e.String())
			p.recordHealthEvent(ctx, e)
			p.recordPodEvents(e)
		}
		unpublished = false
		if err := p.publish(ctx); err != nil {
			p.log.Error("publishing GPU health; retrying", "err", err)
			unpublished = true
		}
	}
}

// nextHealth waits for the next event, no longer than publishRetry while a
// publish is owed, pruneInterval while MIG devices are marked unhealthy
// and recordInterval while the node's health record names a GPU (to see
// an operator clear it).
func (p *Plugin) nextHealth(ctx context.Context, w realize.HealthWatch, unpublished bool) (realize.HealthEvent, error) {
	wait := time.Duration(0)
	if p.health.anyBadMIG() {
		wait = pruneInterval
	}
	if p.health.anyRecorded() && (wait == 0 || recordInterval < wait) {
		wait = recordInterval
	}
	if unpublished && (wait == 0 || publishRetry < wait) {
		wait = publishRetry
	}
	if wait == 0 {
		return w.Next(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return w.Next(ctx)
}

// pruneMIGHealth forgets unhealthy marks of MIG devices whose instance is
// gone, so that a device ID taken out for a failed MIG device returns once
// the device's pod has ended and its instance was reclaimed. A listing that
// fails keeps the marks.
func (p *Plugin) pruneMIGHealth(ctx context.Context) {
	changed := false
	for _, gpu := range p.health.gpusWithBadMIG() {
		insts, err := p.cfg.Hardware.Instances(ctx, gpu)
		if err != nil {
			p.log.Warn("listing instances to prune MIG device health", "gpu", gpu, "err", err)
			continue
		}
		live := map[[2]uint32]bool{}
		for _, in := range insts {
			for _, ci := range in.ComputeInstances {
				live[[2]uint32{in.GIID, ci.ID}] = true
			}
		}
		changed = p.health.forgetGone(gpu, live) || changed
	}
	if changed {
		p.log.Info("unhealthy MIG devices that no longer exist are forgotten")
	}
}

// recordHealthEvent records an Event on the node for one transition
// (events.go). Failures are logged: an Event is information, never a
// reason to stop.
func (p *Plugin) recordHealthEvent(ctx context.Context, e realize.HealthEvent) {
	var consequence string
	switch {
	case e.Cause == realize.CauseUnmonitored:
		consequence = "its health cannot be watched, so no new MIG instances on it until it can; running pods keep theirs"
	case !e.Healthy && e.WholeGPU():
		consequence = "no new MIG instances on it; running pods keep theirs"
	case !e.Healthy:
		consequence = "the MIG device's pod keeps it until it ends"
	}
	kind, reason, note := kube.HealthEventFor(e, p.gpuUUID(e.GPU), consequence)
	p.events.Eventf(p.nodeRef.Get(ctx), nil, kind, reason, HealthAction, "%s", note)
}

// gpuUUID returns the UUID of the discovered GPU at index, "" if none.
func (p *Plugin) gpuUUID(index int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.gpus {
		if g.Index == index {
			return g.UUID
		}
	}
	return ""
}

// refuseUnhealthy refuses a container whose reservation, in the recorded
// view (view, [nodeRecord.overlay]), has an entry not yet realized on an
// unhealthy GPU: realizing it would create a new instance there. Realized
// entries, the devices the checkpoint says were handed out, are handed out
// as before; health alone never destroys or withholds an instance that
// exists. The caller does not hold p.mu.
func (p *Plugin) refuseUnhealthy(view reservation.Pod, ci int) error {
	allocs, err := reservation.DecodeString(view.Annotations[reservation.AnnotationKey])
	if err != nil {
		return nil // the manager refuses a malformed record with its own error
	}
	for _, a := range allocs {
		if a.ContainerIndex != ci {
			continue
		}
		if _, realized := a.Runtime(); realized {
			continue
		}
		index, ok := p.gpuIndex(a.GPUUUID)
		if !ok {
			continue // an unknown GPU is the manager's to refuse
		}
		if why, healthy := p.health.gpu(index); !healthy {
			return &UnhealthyGPUError{Pod: view.Namespace + "/" + view.Name, ContainerIndex: ci, DeviceIndex: a.DeviceIndex,
				GPU: index, GPUUUID: a.GPUUUID, Why: why}
		}
	}
	return nil
}

// gpuIndex returns the NVML index of the discovered GPU with uuid.
func (p *Plugin) gpuIndex(uuid string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.gpus {
		if g.UUID == uuid {
			return g.Index, true
		}
	}
	return 0, false
}

// HealthCollector returns a Prometheus collector of the plugin's GPU
// health: dynmig_gpu_healthy{node,gpu,uuid} is 1 for a healthy GPU and 0
// for an unhealthy one, and dynmig_gpu_unhealthy_mig_devices counts the
// MIG devices unhealthy on their own, for every MIG-enabled GPU the plugin
// discovered. Register it on the registry the program serves.
func (p *Plugin) HealthCollector() prometheus.Collector { return healthCollector{p} }

var (
	gpuHealthyDesc = prometheus.NewDesc("dynmig_gpu_healthy",
		"1 when the GPU takes new MIG instances, 0 when the device plugin reports it unhealthy.",
		[]string{"node", "gpu", "uuid"}, nil)
	badMIGDesc = prometheus.NewDesc("dynmig_gpu_unhealthy_mig_devices",
		"MIG devices of the GPU that the device plugin reports unhealthy on their own.",
		[]string{"node", "gpu", "uuid"}, nil)
)

type healthCollector struct{ p *Plugin }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gpuHealthyDesc
	ch <- badMIGDesc
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.Lock()
	gpus := append([]capability.GPU(nil), c.p.gpus...)
	c.p.mu.Unlock()
	for _, g := range gpus {
		if g.MIGMode != capability.MIGEnabled {
			continue
		}
		labels := []string{c.p.cfg.Node, strconv.Itoa(g.Index), g.UUID}
		healthy := 0.0
		if _, ok := c.p.health.gpu(g.Index); ok {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(gpuHealthyDesc, prometheus.GaugeValue, healthy, labels...)
		ch <- prometheus.MustNewConstMetric(badMIGDesc, prometheus.GaugeValue, float64(c.p.health.badMIGDevices(g.Index)), labels...)
	}
}
