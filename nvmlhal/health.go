package nvmlhal

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/realize"
)

var _ realize.HealthWatcher = (*Backend)(nil)

// healthEvents are the NVML event types a health watch registers, where
// the GPU supports them: critical Xids, ECC errors, the GPU unavailable and
// the recovery-action events (R570+; absent from older drivers, which then
// recover only through a new watch after the GPU is reset).
const healthEvents uint64 = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError |
	nvml.EventTypeDoubleBitEccError | nvml.EventTypeGpuUnavailableError | nvml.EventTypeGpuRecoveryAction

// DefaultHealthPoll is the longest a health watch waits inside one NVML
// call (nvmlEventSetWait) before it checks its ctx and Close again.
const DefaultHealthPoll = time.Second

// HealthOptions configures [Backend.WatchHealthWith]. The zero value
// ignores [realize.ApplicationXids] only and polls every
// [DefaultHealthPoll].
type HealthOptions struct {
	// Checks say which Xids count, as NVIDIA's device plugin reads
	// DP_DISABLE_HEALTHCHECKS and DP_ENABLE_HEALTHCHECKS
	// ([realize.ParseHealthChecks]). A watch is opened even when they are
	// [realize.HealthChecks.Off]: not opening one is the caller's choice.
	Checks realize.HealthChecks
	// Poll bounds each NVML wait; zero means DefaultHealthPoll. Next and
	// Close react to ctx and Close within about one Poll.
	Poll time.Duration
}

// WatchHealth is [Backend.WatchHealthWith] with these checks and the
// default poll.
func (b *Backend) WatchHealth(ctx context.Context, checks realize.HealthChecks) (realize.HealthWatch, error) {
	return b.WatchHealthWith(ctx, HealthOptions{Checks: checks})
}

// WatchHealthWith creates an NVML event set and registers every GPU for the
// critical Xid, ECC, unavailable and recovery-action events it supports,
// as NVIDIA's device plugin does. A GPU whose supported events cannot be
// read or registered is reported unhealthy ([realize.CauseRegistration])
// by the watch's first Next calls, since its failures would go unseen; a
// GPU that supports none of them, or whose registration NVML answers
// ERROR_NOT_SUPPORTED (an old or virtualised GPU), is logged and stays
// healthy. Failing to
// create the event set or to count the GPUs is an error and nothing is
// left allocated.
//
// The watch starts no goroutine: [HealthWatch.Next] waits in its caller.
// The library must stay initialised while the watch is open; Close it
// before the matching [Backend.Shutdown].
func (b *Backend) WatchHealthWith(ctx context.Context, opts HealthOptions) (*HealthWatch, error) {
	leave, err := b.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	if err := b.ready("EventSetCreate", -1); err != nil {
		return nil, err
	}
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, hwError("DeviceGetCount", -1, nil, ret)
	}
	set, ret := b.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, hwError("EventSetCreate", -1, nil, ret)
	}
	w := &HealthWatch{b: b, set: set, gpus: make(map[string]int, n), poll: opts.Poll,
		checks: opts.Checks, closed: make(chan struct{})}
	if w.poll <= 0 {
		w.poll = DefaultHealthPoll
	}
	for gpu := range n {
		w.register(gpu)
	}
	return w, nil
}

// register adds one GPU to the set, queueing an unhealthy event when that
// fails.
func (w *HealthWatch) register(gpu int) {
	dev, ret := w.b.lib.DeviceGetHandleByIndex(gpu)
	if ret != nvml.SUCCESS {
		w.registrationFailed(gpu, "DeviceGetHandleByIndex", ret)
		return
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		w.registrationFailed(gpu, "GetUUID", ret)
		return
	}
	w.gpus[uuid] = gpu
	supported, ret := dev.GetSupportedEventTypes()
	if ret != nvml.SUCCESS {
		w.registrationFailed(gpu, "GetSupportedEventTypes", ret)
		return
	}
	mask := healthEvents & supported
	if mask == 0 {
		w.b.log.Warn("GPU supports no health events; its failures will not be seen", "gpu", gpu)
		return
	}
	switch ret := dev.RegisterEvents(mask, w.set); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		// An old or virtualised GPU cannot report events: that says nothing
		// about its health, and taking it out of service for it would do so
		// again after every restart (NVIDIA's device plugin and HAMi agree).
		w.b.log.Warn("GPU cannot register health events; it stays healthy and its failures will not be seen", "gpu", gpu, "nvml", returnName(ret))
	default:
		w.registrationFailed(gpu, "RegisterEvents", ret)
	}
}

func (w *HealthWatch) registrationFailed(gpu int, op string, ret nvml.Return) {
	w.b.log.Warn("cannot watch GPU health; reporting it unhealthy", "gpu", gpu, "op", op, "nvml", returnName(ret))
	w.pending = append(w.pending, gpuEvent(gpu, false, realize.CauseRegistration))
}

func gpuEvent(gpu int, healthy bool, cause realize.HealthCause) realize.HealthEvent {
	return realize.HealthEvent{GPU: gpu, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: healthy, Cause: cause}
}

// HealthWatch is nvmlhal's [realize.HealthWatch]: one NVML event set over
// the node's GPUs. Next and Close may be called from different goroutines;
// Next calls are serialised.
type HealthWatch struct {
	b      *Backend
	set    nvml.EventSet
	gpus   map[string]int // GPU UUID -> NVML index, for attributing events
	checks realize.HealthChecks
	poll   time.Duration

	mu       sync.Mutex // held by Next and by Close's Free
	pending  []realize.HealthEvent
	state    realize.HealthState
	failed   bool // the last wait failed: pause one poll before the next
	closed   chan struct{}
	closeOne sync.Once
}

// Next implements [realize.HealthWatch]. It calls nvmlEventSetWait for at
// most the poll interval at a time, so it returns within about one poll of
// ctx ending or Close. A failed wait is returned as a
// [*realize.HardwareError] (Op "EventSetWait", GPU -1) and every GPU is then
// reported unhealthy ([realize.CauseWatchFailed]) by the following calls,
// as NVIDIA's device plugin does; after a failure Next pauses one poll
// before waiting again, so a caller that loops on errors does not spin.
// An event from a GPU the watch cannot attribute marks every GPU
// unhealthy for the same reason.
func (w *HealthWatch) Next(ctx context.Context) (realize.HealthEvent, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if e, ok := w.popTransition(); ok {
			return e, nil
		}
		if err := w.alive(ctx); err != nil {
			return realize.HealthEvent{}, err
		}
		if w.failed {
			if err := w.pause(ctx); err != nil {
				return realize.HealthEvent{}, err
			}
		}
		data, err := w.wait(ctx)
		if err != nil {
			return realize.HealthEvent{}, err
		}
		w.pending = append(w.pending, w.translate(data)...)
	}
}

// popTransition returns the first pending event that changes the health,
// or is a recovery ([realize.HealthWatch]).
func (w *HealthWatch) popTransition() (realize.HealthEvent, bool) {
	for len(w.pending) > 0 {
		e := w.pending[0]
		w.pending = w.pending[1:]
		if w.state.Apply(e) || e.Cause == realize.CauseRecovered {
			return e, true
		}
	}
	return realize.HealthEvent{}, false
}

func (w *HealthWatch) alive(ctx context.Context) error {
	select {
	case <-w.closed:
		return realize.ErrWatchClosed
	default:
	}
	return ctx.Err()
}

func (w *HealthWatch) pause(ctx context.Context) error {
	t := time.NewTimer(w.poll)
	defer t.Stop()
	select {
	case <-t.C:
		w.failed = false
		return nil
	case <-w.closed:
		return realize.ErrWatchClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait makes one bounded NVML wait. A timeout returns no event and no
// error; a failure queues every GPU unhealthy and is returned.
func (w *HealthWatch) wait(ctx context.Context) ([]nvml.EventData, error) {
	leave, err := w.b.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	if err := w.b.ready("EventSetWait", -1); err != nil {
		w.failed = true // shut down under the watch: pause before the next try
		return nil, err
	}
	data, ret := w.set.Wait(uint32(w.poll.Milliseconds()))
	switch ret {
	case nvml.SUCCESS:
		return []nvml.EventData{data}, nil
	case nvml.ERROR_TIMEOUT:
		return nil, nil
	}
	w.failed = true
	w.b.log.Error("waiting for GPU health events failed; reporting every GPU unhealthy", "nvml", returnName(ret))
	w.pending = append(w.pending, w.allUnhealthy(realize.CauseWatchFailed)...)
	return nil, hwError("EventSetWait", -1, nil, ret)
}

// allUnhealthy returns an unhealthy event for every GPU, by index.
func (w *HealthWatch) allUnhealthy(cause realize.HealthCause) []realize.HealthEvent {
	out := make([]realize.HealthEvent, 0, len(w.gpus))
	for _, gpu := range w.gpus {
		out = append(out, gpuEvent(gpu, false, cause))
	}
	slices.SortFunc(out, func(a, b realize.HealthEvent) int { return a.GPU - b.GPU })
	return out
}

// translate turns one NVML event into health events (none for ignored
// Xids and corrected ECC errors).
func (w *HealthWatch) translate(data []nvml.EventData) []realize.HealthEvent {
	var out []realize.HealthEvent
	for _, d := range data {
		gpu, ok := w.gpuOf(d.Device)
		if !ok {
			w.b.log.Warn("health event from a GPU that cannot be identified; reporting every GPU unhealthy", "type", d.EventType, "data", d.EventData)
			out = append(out, w.allUnhealthy(realize.CauseUnknown)...)
			continue
		}
		e := realize.HealthEvent{GPU: gpu, GI: d.GpuInstanceId, CI: d.ComputeInstanceId}
		if e.WholeGPU() {
			e.GI, e.CI = realize.NoInstance, realize.NoInstance
		}
		switch d.EventType {
		case nvml.EventTypeXidCriticalError:
			if !w.checks.CountsXid(d.EventData) {
				w.b.log.Info("ignoring Xid (an application's, or disabled)", "gpu", gpu, "xid", d.EventData)
				continue
			}
			e.Cause, e.Xid = realize.CauseXid, d.EventData
		case nvml.EventTypeDoubleBitEccError:
			e.Cause = realize.CauseDoubleBitECC
		case nvml.EventTypeGpuUnavailableError:
			e.Cause = realize.CauseUnavailable
		case nvml.EventTypeGpuRecoveryAction:
			if nvml.DeviceGpuRecoveryAction(d.EventData) != nvml.GPU_RECOVERY_ACTION_NONE {
				e.Cause = realize.CauseUnavailable // the driver asks for a reset, reboot or drain
				break
			}
			e = gpuEvent(gpu, true, realize.CauseRecovered)
		default: // single-bit ECC: corrected by the hardware
			w.b.log.Info("corrected GPU event", "gpu", gpu, "type", d.EventType)
			continue
		}
		w.b.log.Warn("GPU health event", "event", e.String())
		out = append(out, e)
	}
	return out
}

// gpuOf finds the NVML index of an event's device by UUID.
func (w *HealthWatch) gpuOf(dev nvml.Device) (int, bool) {
	if dev == nil {
		return 0, false
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return 0, false
	}
	gpu, ok := w.gpus[uuid]
	return gpu, ok
}

// Close implements [realize.HealthWatch]: it makes Next return
// [realize.ErrWatchClosed], waits for a Next in progress to leave (at most
// about one poll) and frees the event set. A failed free is a
// [*realize.HardwareError]; calling Close again returns nil.
func (w *HealthWatch) Close() error {
	var err error
	w.closeOne.Do(func() {
		close(w.closed)
		w.mu.Lock()
		defer w.mu.Unlock()
		leave, gerr := w.b.enter(context.Background())
		if gerr != nil {
			err = gerr
			return
		}
		defer leave()
		if w.b.ready("EventSetFree", -1) != nil {
			return // the library is shut down, and its event sets with it
		}
		if ret := w.set.Free(); ret != nvml.SUCCESS {
			err = hwError("EventSetFree", -1, nil, ret)
		}
	})
	return err
}
