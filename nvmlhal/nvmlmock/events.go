package nvmlmock

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

var _ nvml.EventSet = (*EventSet)(nil)

// OpEventSetWait fails the next EventSet.Wait, for [Server.FailNext], as
// when the driver loses a GPU while a client waits (ERROR_GPU_IS_LOST) or
// answers ERROR_UNKNOWN.
const OpEventSetWait Op = "EventSetWait"

// OpRegisterEvents fails the next Device.RegisterEvents, for
// [Server.FailNext].
const OpRegisterEvents Op = "RegisterEvents"

// DefaultSupportedEvents is the event mask every GPU reports supported
// unless [Server.SetSupportedEvents] changes it: what a data-centre GPU
// under a current driver reports (Xid, single- and double-bit ECC, P-state,
// clock, GPU unavailable and recovery action events).
const DefaultSupportedEvents uint64 = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError |
	nvml.EventTypeDoubleBitEccError | nvml.EventTypePState | nvml.EventTypeClock |
	nvml.EventTypeGpuUnavailableError | nvml.EventTypeGpuRecoveryAction

// eventHub holds the server's event sets and per-GPU supported masks. It
// has its own lock so that a blocked Wait never holds the state lock.
type eventHub struct {
	mu        sync.Mutex
	sets      []*EventSet
	supported map[int]uint64 // overrides of DefaultSupportedEvents by GPU index
}

// EventSet is a strict NVML event set: Wait returns only events of the
// types registered for the device they hit, in the order they happened;
// registering a type the GPU does not support is ERROR_NOT_SUPPORTED; a
// freed set is ERROR_INVALID_ARGUMENT on every call, as a stale handle.
type EventSet struct {
	srv   *Server
	regs  map[*Device]uint64 // registered masks; guarded by srv.events.mu
	queue []nvml.EventData   // guarded by srv.events.mu
	freed bool               // guarded by srv.events.mu
	wake  chan struct{}      // signalled when queue grows
}

// EventSetCreate creates an empty event set.
func (s *Server) EventSetCreate() (nvml.EventSet, nvml.Return) {
	defer s.mu.Unlock()
	if !s.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	set := &EventSet{srv: s, regs: make(map[*Device]uint64), wake: make(chan struct{}, 1)}
	s.events.mu.Lock()
	s.events.sets = append(s.events.sets, set)
	s.events.mu.Unlock()
	return set, nvml.SUCCESS
}

// EventSetWait is set.Wait.
func (s *Server) EventSetWait(set nvml.EventSet, timeoutms uint32) (nvml.EventData, nvml.Return) {
	return set.Wait(timeoutms)
}

// EventSetFree is set.Free.
func (s *Server) EventSetFree(set nvml.EventSet) nvml.Return { return set.Free() }

// DeviceRegisterEvents is dev.RegisterEvents.
func (s *Server) DeviceRegisterEvents(dev nvml.Device, mask uint64, set nvml.EventSet) nvml.Return {
	return dev.RegisterEvents(mask, set)
}

// DeviceGetSupportedEventTypes is dev.GetSupportedEventTypes.
func (s *Server) DeviceGetSupportedEventTypes(dev nvml.Device) (uint64, nvml.Return) {
	return dev.GetSupportedEventTypes()
}

// SetSupportedEvents sets the event types GPU gpu reports supported, as an
// older GPU or driver reports fewer (0 for none). It panics on an index out
// of range.
func (s *Server) SetSupportedEvents(gpu int, mask uint64) {
	_ = s.devices[gpu]
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	if s.events.supported == nil {
		s.events.supported = make(map[int]uint64)
	}
	s.events.supported[gpu] = mask
}

// supportedEvents returns GPU index's mask; s.events.mu must be held.
func (s *Server) supportedEvents(index int) uint64 {
	if m, ok := s.events.supported[index]; ok {
		return m
	}
	return DefaultSupportedEvents
}

// GetSupportedEventTypes reports the event types the GPU supports.
func (d *Device) GetSupportedEventTypes() (uint64, nvml.Return) {
	if !d.srv.lock() {
		d.srv.mu.Unlock()
		return 0, nvml.ERROR_UNINITIALIZED
	}
	d.srv.mu.Unlock()
	d.srv.events.mu.Lock()
	defer d.srv.events.mu.Unlock()
	return d.srv.supportedEvents(d.index), nvml.SUCCESS
}

// RegisterEvents adds mask to the events set receives from the GPU. A type
// the GPU does not support is ERROR_NOT_SUPPORTED and registers nothing;
// a set that is not this server's, or freed, is ERROR_INVALID_ARGUMENT.
func (d *Device) RegisterEvents(mask uint64, set nvml.EventSet) nvml.Return {
	if !d.srv.lock() {
		d.srv.mu.Unlock()
		return nvml.ERROR_UNINITIALIZED
	}
	ret, failed := d.srv.fault(OpRegisterEvents)
	d.srv.mu.Unlock()
	if failed {
		return ret
	}
	es, ok := set.(*EventSet)
	if !ok || es == nil || es.srv != d.srv {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d.srv.events.mu.Lock()
	defer d.srv.events.mu.Unlock()
	if es.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if mask&^d.srv.supportedEvents(d.index) != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	es.regs[d] |= mask
	return nvml.SUCCESS
}

// Wait returns the oldest pending event, waiting up to timeoutms
// milliseconds for one (ERROR_TIMEOUT when none comes).
func (e *EventSet) Wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	if ret := e.waitFault(); ret != nvml.SUCCESS {
		return nvml.EventData{}, ret
	}
	timer := time.NewTimer(time.Duration(timeoutms) * time.Millisecond)
	defer timer.Stop()
	for {
		data, ret, ok := e.pop()
		if ok {
			return data, ret
		}
		select {
		case <-e.wake:
		case <-timer.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
}

// waitFault checks initialisation and injected Wait failures.
func (e *EventSet) waitFault() nvml.Return {
	defer e.srv.mu.Unlock()
	if !e.srv.lock() {
		return nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := e.srv.fault(OpEventSetWait); ok {
		return ret
	}
	return nvml.SUCCESS
}

// pop takes the oldest event; ok is false when there is none to return.
func (e *EventSet) pop() (nvml.EventData, nvml.Return, bool) {
	e.srv.events.mu.Lock()
	defer e.srv.events.mu.Unlock()
	if e.freed {
		return nvml.EventData{}, nvml.ERROR_INVALID_ARGUMENT, true
	}
	if len(e.queue) == 0 {
		return nvml.EventData{}, nvml.SUCCESS, false
	}
	data := e.queue[0]
	e.queue = e.queue[1:]
	return data, nvml.SUCCESS, true
}

// Free releases the set; a second Free is ERROR_INVALID_ARGUMENT.
func (e *EventSet) Free() nvml.Return {
	if !e.srv.lock() {
		e.srv.mu.Unlock()
		return nvml.ERROR_UNINITIALIZED
	}
	e.srv.mu.Unlock()
	hub := &e.srv.events
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if e.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	e.freed, e.queue, e.regs = true, nil, nil
	for i, s := range hub.sets {
		if s == e {
			hub.sets = append(hub.sets[:i], hub.sets[i+1:]...)
			break
		}
	}
	select { // a Wait in progress sees the set freed
	case e.wake <- struct{}{}:
	default:
	}
	return nvml.SUCCESS
}

// The versioned and GPU-operational event calls are not served: a backend
// that needs them must say so.

// Wait_v3 is not served: ERROR_NOT_SUPPORTED.
func (e *EventSet) Wait_v3(uint32) (nvml.EventSetWaitData_v3, nvml.Return) {
	return nvml.EventSetWaitData_v3{}, nvml.ERROR_NOT_SUPPORTED
}

// GetContextCount_v1 is not served: ERROR_NOT_SUPPORTED.
func (e *EventSet) GetContextCount_v1() (nvml.GetContextCount_v1, nvml.Return) {
	return nvml.GetContextCount_v1{}, nvml.ERROR_NOT_SUPPORTED
}

// GetContextData_v1 is not served: ERROR_NOT_SUPPORTED.
func (e *EventSet) GetContextData_v1(d nvml.GetContextData_v1) (nvml.GetContextData_v1, nvml.Return) {
	return d, nvml.ERROR_NOT_SUPPORTED
}

// GetContextInfo_v1 is not served: ERROR_NOT_SUPPORTED.
func (e *EventSet) GetContextInfo_v1(uint32) (nvml.GetContextInfo_v1, nvml.Return) {
	return nvml.GetContextInfo_v1{}, nvml.ERROR_NOT_SUPPORTED
}

// GetGpuOperationalEventContextLegacyXid_v1 is not served:
// ERROR_NOT_SUPPORTED.
func (e *EventSet) GetGpuOperationalEventContextLegacyXid_v1(uint32) (uint32, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}

// RegisterGpuOperationalEvents_v1 is not served: ERROR_NOT_SUPPORTED.
func (e *EventSet) RegisterGpuOperationalEvents_v1(*nvml.GpuOperationalEventConfig_v1) nvml.Return {
	return nvml.ERROR_NOT_SUPPORTED
}

// InjectXid makes the driver raise Xid critical error xid on the whole GPU
// (GPU and compute instance IDs 0xFFFFFFFF in the event, as NVML reports an
// error it cannot attribute to a MIG device).
func (s *Server) InjectXid(gpu int, xid uint64) error {
	return s.InjectEvent(gpu, nvml.EventTypeXidCriticalError, xid, noInstance, noInstance)
}

// InjectMIGXid makes the driver raise Xid xid on the MIG device of compute
// instance ci in GPU instance gi, which must exist.
func (s *Server) InjectMIGXid(gpu int, gi, ci uint32, xid uint64) error {
	return s.InjectEvent(gpu, nvml.EventTypeXidCriticalError, xid, gi, ci)
}

// InjectEvent delivers an event of type eventType with the given data
// (the Xid, the recovery action, ...) to every set registered for that type
// on the GPU. The event's Device is the GPU's handle, as NVML reports it;
// gi and ci are 0xFFFFFFFF for an event on the whole GPU, else they must
// name a live compute instance.
func (s *Server) InjectEvent(gpu int, eventType, data uint64, gi, ci uint32) error {
	s.mu.Lock()
	d, err := s.gpu(gpu)
	if err == nil && (gi != noInstance || ci != noInstance) {
		if g := d.gis[gi]; g == nil || g.cis[ci] == nil {
			err = fmt.Errorf("nvmlmock: GPU %d has no compute instance %d/%d", gpu, gi, ci)
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	ev := nvml.EventData{Device: d, EventType: eventType, EventData: data, GpuInstanceId: gi, ComputeInstanceId: ci}
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	for _, set := range s.events.sets {
		if set.regs[d]&eventType == 0 {
			continue
		}
		set.queue = append(set.queue, ev)
		select {
		case set.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// EventSets returns how many event sets are created and not freed, so a
// test can show that a backend frees what it creates.
func (s *Server) EventSets() int {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	return len(s.events.sets)
}
