package realize

import (
	"context"
	"errors"
	"fmt"
)

// HealthWatcher is implemented by backends that can tell when a GPU or one
// of its MIG devices stops being usable (nvmlhal from NVML's critical Xid
// and ECC events, fakehal from injected faults). It is optional, as
// [MIGModeSetter] is: a device plugin checks for it with a type assertion
// and, without it, publishes every GPU healthy.
type HealthWatcher interface {
	// WatchHealth starts watching every GPU of the node, counting the
	// events checks says count. Events that happen before the call are
	// not reported; every GPU and MIG device starts healthy in the
	// watch's view unless its first events say otherwise (a GPU whose
	// events cannot be registered is reported unhealthy by the first Next
	// calls). The caller must Close the watch.
	WatchHealth(ctx context.Context, checks HealthChecks) (HealthWatch, error)
}

// HealthWatch is one open health watch. It starts no goroutine: Next does
// its waiting in the caller's goroutine, honouring ctx, so nothing runs
// between calls. Next and Close may be called from different goroutines;
// Close makes a blocked Next return [ErrWatchClosed] promptly (within the
// backend's poll interval, at most a second for nvmlhal).
type HealthWatch interface {
	// Next blocks until the health of a GPU or MIG device changes and
	// returns that transition. It reports transitions only: a second
	// critical error on a GPU already unhealthy is not an event. The
	// exception is a recovery ([CauseRecovered]), reported even for a GPU
	// the watch saw healthy: the caller may hold a failure from before
	// the watch (restored across a restart) that only it clears. It
	// returns ctx.Err() when ctx is done and ErrWatchClosed after Close;
	// a failure of the backend's wait is a [*HardwareError] after which
	// the watch reports every GPU unhealthy, since nothing more can be
	// known about them.
	Next(ctx context.Context) (HealthEvent, error)
	// Close releases the watch's resources (an NVML event set). Calling
	// it again does nothing.
	Close() error
}

// ErrWatchClosed is returned by [HealthWatch.Next] after Close.
var ErrWatchClosed = errors.New("realize: health watch closed")

// NoInstance is the GI and CI ID of a [HealthEvent] about a whole GPU, as
// NVML writes 0xFFFFFFFF into an event's GpuInstanceId and
// ComputeInstanceId when the event hit no particular MIG device.
const NoInstance = ^uint32(0)

// HealthCause says why a [HealthEvent] happened.
type HealthCause uint8

// Causes of health transitions. The zero value is CauseUnknown.
const (
	CauseUnknown HealthCause = iota
	// CauseXid: the driver reported a critical Xid error that is not an
	// application error (HealthEvent.Xid names it).
	CauseXid
	// CauseDoubleBitECC: an uncorrectable (double-bit) ECC error.
	CauseDoubleBitECC
	// CauseUnavailable: the driver reports the GPU unavailable (fallen off
	// the bus, lost, in a state that needs a reset).
	CauseUnavailable
	// CauseRegistration: the GPU's events could not be registered, so its
	// failures could not be seen; it is reported unhealthy, as NVIDIA's
	// device plugin does.
	CauseRegistration
	// CauseWatchFailed: the backend's wait for events failed; every GPU is
	// reported unhealthy.
	CauseWatchFailed
	// CauseRecovered: the driver reports the GPU usable again (NVML's
	// recovery action NONE, or fakehal's Recover). Recovery makes the GPU
	// and every MIG device on it healthy.
	CauseRecovered
	// CauseUnmonitored: no health watch could be opened (the backend's
	// event set could not be created), so nothing is known about the GPU.
	// It is a state of its own, not a failure: [HealthState] reports the
	// GPU unusable while it lasts, and only a [CauseMonitored] event ends
	// it. [HealthMonitor] reports it and retries the watch.
	CauseUnmonitored
	// CauseMonitored: a watch opened again over a GPU that was
	// unmonitored (the event is healthy). It ends the unmonitored state
	// only: a failure recorded before stays.
	CauseMonitored
	// CauseCleared: an operator cleared the GPU's recorded failure (the
	// event is healthy). Like a recovery it makes the GPU and every MIG
	// device on it healthy.
	CauseCleared
)

var causeNames = [...]string{"unknown", "xid", "double-bit-ecc", "unavailable", "registration", "watch-failed", "recovered",
	"unmonitored", "monitored", "cleared"}

// ParseHealthCause returns the cause whose [HealthCause.String] is s.
func ParseHealthCause(s string) (HealthCause, bool) {
	for i, name := range causeNames {
		if name == s {
			return HealthCause(i), true
		}
	}
	return 0, false
}

// String returns a short lower-case name, such as "xid".
func (c HealthCause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// HealthEvent is one health transition of a GPU or of one MIG device on it.
// Watches set GI and CI to [NoInstance] for whole-GPU events, so the zero
// value names MIG device 0/0 of GPU 0 (unhealthy, cause unknown).
type HealthEvent struct {
	GPU int // NVML device index
	// GI and CI are the MIG device's GPU and compute instance IDs when the
	// event hit one MIG device (NVML says which), both [NoInstance] when
	// it concerns the whole GPU.
	GI, CI  uint32
	Healthy bool        // the state after the transition
	Cause   HealthCause // why
	Xid     uint64      // the Xid for CauseXid, else 0
}

// WholeGPU reports whether the event concerns the whole GPU rather than one
// MIG device.
func (e HealthEvent) WholeGPU() bool { return e.GI == NoInstance || e.CI == NoInstance }

// String describes the event, e.g. "GPU 2 MIG 1/0 unhealthy (xid 79)".
func (e HealthEvent) String() string {
	where := fmt.Sprintf("GPU %d", e.GPU)
	if !e.WholeGPU() {
		where += fmt.Sprintf(" MIG %d/%d", e.GI, e.CI)
	}
	state := "unhealthy"
	if e.Healthy {
		state = "healthy"
	}
	why := e.Cause.String()
	if e.Cause == CauseXid {
		why = fmt.Sprintf("xid %d", e.Xid)
	}
	return fmt.Sprintf("%s %s (%s)", where, state, why)
}

// ApplicationXids are the Xid errors that a faulty application causes and
// that leave the GPU usable; a [HealthWatcher] ignores them unless its
// [HealthChecks] enable them. The list is
// the one NVIDIA's Kubernetes device plugin ignores (k8s-device-plugin,
// internal/rm/health.go: 13 graphics engine exception, 31 GPU memory page
// fault, 43 GPU stopped processing, 45 preemptive cleanup after previous
// errors, 68 video processor exception, 109 context switch timeout), whose
// meanings are in NVIDIA's Xid catalogue
// (https://docs.nvidia.com/deploy/xid-errors/). Do not modify it; set
// [HealthChecks] instead.
var ApplicationXids = []uint64{13, 31, 43, 45, 68, 109}

// IsApplicationXid reports whether xid is in [ApplicationXids].
func IsApplicationXid(xid uint64) bool {
	for _, a := range ApplicationXids {
		if a == xid {
			return true
		}
	}
	return false
}

// HealthState is the health of a node's GPUs and MIG devices as a sequence
// of [HealthEvent] values leaves it: everything is healthy until an event
// says otherwise. A device plugin keeps one to answer ListAndWatch and to
// refuse new instances on an unhealthy GPU. The zero value is ready to use
// (everything healthy). A HealthState is not safe for concurrent use.
type HealthState struct {
	gpus  map[int]HealthEvent    // unhealthy GPUs, by index
	migs  map[migKey]HealthEvent // unhealthy MIG devices
	unmon map[int]HealthEvent    // unmonitored GPUs ([CauseUnmonitored])
}

type migKey struct {
	gpu    int
	gi, ci uint32
}

// Apply records e and reports whether it changed anything. A healthy
// whole-GPU event (recovery) also makes every MIG device on the GPU
// healthy.
//
// The first cause is kept: an unhealthy event about a GPU or MIG device
// that is already unhealthy changes nothing, so [HealthState.Why] keeps
// naming the event that took it out of service (the Xid 79 that lost the
// GPU, not the Xid 48 that followed).
//
// The unmonitored state ([CauseUnmonitored]) is kept apart from failures:
// it is set by an unhealthy CauseUnmonitored event and cleared only by a
// healthy [CauseMonitored] one, which touches nothing else; a recovery
// does not end it. A MIG-device event with either cause is treated as
// one about its whole GPU.
func (s *HealthState) Apply(e HealthEvent) bool {
	if e.Cause == CauseUnmonitored || e.Cause == CauseMonitored {
		return s.applyMonitoring(e)
	}
	if e.WholeGPU() {
		_, was := s.gpus[e.GPU]
		if !e.Healthy {
			if was {
				return false
			}
			if s.gpus == nil {
				s.gpus = make(map[int]HealthEvent)
			}
			s.gpus[e.GPU] = e
			return true
		}
		changed := was
		delete(s.gpus, e.GPU)
		for k := range s.migs {
			if k.gpu == e.GPU {
				delete(s.migs, k)
				changed = true
			}
		}
		return changed
	}
	k := migKey{e.GPU, e.GI, e.CI}
	_, was := s.migs[k]
	if e.Healthy {
		delete(s.migs, k)
		return was
	}
	if was {
		return false
	}
	if s.migs == nil {
		s.migs = make(map[migKey]HealthEvent)
	}
	s.migs[k] = e
	return true
}

func (s *HealthState) applyMonitoring(e HealthEvent) bool {
	_, was := s.unmon[e.GPU]
	if e.Healthy {
		delete(s.unmon, e.GPU)
		return was
	}
	if was {
		return false
	}
	if s.unmon == nil {
		s.unmon = make(map[int]HealthEvent)
	}
	e.GI, e.CI = NoInstance, NoInstance
	s.unmon[e.GPU] = e
	return true
}

// GPUHealthy reports whether the GPU as a whole is healthy: neither failed
// nor unmonitored. An unhealthy MIG device does not make its GPU
// unhealthy.
func (s *HealthState) GPUHealthy(gpu int) bool {
	_, bad := s.gpus[gpu]
	_, unmon := s.unmon[gpu]
	return !bad && !unmon
}

// Unmonitored reports whether the GPU is in the unmonitored state
// ([CauseUnmonitored]).
func (s *HealthState) Unmonitored(gpu int) bool {
	_, unmon := s.unmon[gpu]
	return unmon
}

// MIGHealthy reports whether the MIG device gi/ci of the GPU is healthy:
// neither it nor its GPU is unhealthy.
func (s *HealthState) MIGHealthy(gpu int, gi, ci uint32) bool {
	if !s.GPUHealthy(gpu) {
		return false
	}
	_, bad := s.migs[migKey{gpu, gi, ci}]
	return !bad
}

// Why returns the event that made the GPU unhealthy (its first failure,
// else the event that made it unmonitored), and false when it is healthy.
func (s *HealthState) Why(gpu int) (HealthEvent, bool) {
	if e, ok := s.gpus[gpu]; ok {
		return e, true
	}
	e, ok := s.unmon[gpu]
	return e, ok
}

// UnhealthyMIGDevices counts the MIG devices of the GPU that are marked
// unhealthy on their own (not through their GPU).
func (s *HealthState) UnhealthyMIGDevices(gpu int) int {
	n := 0
	for k := range s.migs {
		if k.gpu == gpu {
			n++
		}
	}
	return n
}

// UnhealthyMIG returns the events that marked the GPU's MIG devices
// unhealthy on their own, in no particular order.
func (s *HealthState) UnhealthyMIG(gpu int) []HealthEvent {
	var out []HealthEvent
	for k, e := range s.migs {
		if k.gpu == gpu {
			out = append(out, e)
		}
	}
	return out
}

// Forget drops the unhealthy mark of MIG device gi/ci of the GPU, for a
// device that no longer exists (its instance was destroyed when its pod
// ended), and reports whether there was one. A new instance that gets the
// same IDs then starts healthy.
func (s *HealthState) Forget(gpu int, gi, ci uint32) bool {
	k := migKey{gpu, gi, ci}
	_, was := s.migs[k]
	delete(s.migs, k)
	return was
}
