package fakehal

import (
	"context"
	"slices"
	"sync"

	"github.com/dynmig/dynmig/realize"
)

// Health operations, for the errors of [Node.InjectXid], [Node.InjectECC]
// and [Node.Recover].
const (
	OpInjectXid Op = "InjectXid"
	OpInjectECC Op = "InjectECC"
	OpRecover   Op = "Recover"
)

// healthHub fans the node's simulated driver events out to its open
// watches. It has its own lock so that a watch never holds n.mu.
type healthHub struct {
	mu      sync.Mutex
	watches []*healthWatch
}

// driverEvent is one raw event as the driver would deliver it, before a
// watch filters it: an Xid (0 for none), a double-bit ECC error or a
// recovery, on a whole GPU or on one MIG device.
type driverEvent struct {
	gpu     int
	gi, ci  uint32
	xid     uint64
	ecc     bool
	recover bool
}

// InjectXid makes the driver report Xid error xid on the GPU: on the MIG
// device with migUUID when it is not "" (the event then names that
// device's GPU and compute instance IDs, as NVML does for an error it can
// attribute), else on the whole GPU. Watches open at the time receive it;
// as NVML's do, they ignore the Xids their [realize.HealthChecks] do not
// count ([realize.ApplicationXids] by default). The hardware keeps
// working: instances can still be created and destroyed, as on a real GPU
// until the driver gives up on it. An unknown GPU or MIG device is
// ErrNotFound.
func (n *Node) InjectXid(gpu int, migUUID string, xid uint64) error {
	ev, err := n.driverEvent(OpInjectXid, gpu, migUUID)
	if err != nil {
		return err
	}
	ev.xid = xid
	n.health.publish(ev)
	return nil
}

// InjectECC makes the driver report an uncorrectable (double-bit) ECC
// error on the GPU, or on the MIG device with migUUID when it is not "".
// Correctable single-bit errors change nothing and have no injector.
func (n *Node) InjectECC(gpu int, migUUID string) error {
	ev, err := n.driverEvent(OpInjectECC, gpu, migUUID)
	if err != nil {
		return err
	}
	ev.ecc = true
	n.health.publish(ev)
	return nil
}

// Recover makes the driver report the GPU usable again (NVML's recovery
// action NONE): watches report it and every MIG device on it healthy.
func (n *Node) Recover(gpu int) error {
	ev, err := n.driverEvent(OpRecover, gpu, "")
	if err != nil {
		return err
	}
	ev.recover = true
	n.health.publish(ev)
	return nil
}

// driverEvent resolves the GPU and MIG device an injected event hits.
func (n *Node) driverEvent(op Op, gpu int, migUUID string) (driverEvent, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g, err := n.gpu(op, gpu)
	if err != nil {
		return driverEvent{}, err
	}
	ev := driverEvent{gpu: gpu, gi: realize.NoInstance, ci: realize.NoInstance}
	if migUUID == "" {
		return ev, nil
	}
	for _, gi := range g.gis {
		for _, ci := range gi.cis {
			if ci.uuid == migUUID {
				ev.gi, ev.ci = gi.id, ci.id
				return ev, nil
			}
		}
	}
	return driverEvent{}, hwErr(op, gpu, realize.ErrNotFound, ReturnNotFound)
}

func (h *healthHub) publish(ev driverEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watches {
		w.queue = append(w.queue, ev)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// WatchHealth opens a health watch over the node's GPUs that counts what
// checks count; see [realize.HealthWatcher]. Events injected before the
// call are not seen. The watch starts no goroutine. A done ctx is refused.
func (n *Node) WatchHealth(ctx context.Context, checks realize.HealthChecks) (realize.HealthWatch, error) {
	if err := ctx.Err(); err != nil {
		return nil, hwErr("WatchHealth", -1, nil, err)
	}
	w := &healthWatch{hub: &n.health, checks: checks, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	n.health.mu.Lock()
	n.health.watches = append(n.health.watches, w)
	n.health.mu.Unlock()
	return w, nil
}

// healthWatch is one open watch: a queue of raw driver events (guarded by
// the hub's lock) and the health it has reported so far.
type healthWatch struct {
	hub       *healthHub
	checks    realize.HealthChecks
	queue     []driverEvent
	wake      chan struct{} // signalled when queue grows
	closed    chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex // serialises Next: state is the reported health
	state realize.HealthState
}

// Next implements [realize.HealthWatch].
func (w *healthWatch) Next(ctx context.Context) (realize.HealthEvent, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for ev, ok := w.pop(); ok; ev, ok = w.pop() {
			if e, ok := transition(ev, w.checks); ok && (w.state.Apply(e) || e.Cause == realize.CauseRecovered) {
				return e, nil
			}
		}
		select {
		case <-ctx.Done():
			return realize.HealthEvent{}, ctx.Err()
		case <-w.closed:
			return realize.HealthEvent{}, realize.ErrWatchClosed
		case <-w.wake:
		}
	}
}

// pop takes the oldest queued event, unless the watch is closed.
func (w *healthWatch) pop() (driverEvent, bool) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	select {
	case <-w.closed:
		return driverEvent{}, false
	default:
	}
	if len(w.queue) == 0 {
		return driverEvent{}, false
	}
	ev := w.queue[0]
	w.queue = w.queue[1:]
	return ev, true
}

// transition is the health event a raw driver event asks for, if any:
// Xids the checks do not count ask for none.
func transition(ev driverEvent, checks realize.HealthChecks) (realize.HealthEvent, bool) {
	e := realize.HealthEvent{GPU: ev.gpu, GI: ev.gi, CI: ev.ci}
	switch {
	case ev.recover:
		e.Healthy, e.Cause = true, realize.CauseRecovered
	case ev.ecc:
		e.Cause = realize.CauseDoubleBitECC
	case !checks.CountsXid(ev.xid):
		return e, false
	default:
		e.Cause, e.Xid = realize.CauseXid, ev.xid
	}
	return e, true
}

// Close implements [realize.HealthWatch].
func (w *healthWatch) Close() error {
	w.closeOnce.Do(func() {
		close(w.closed)
		w.hub.mu.Lock()
		defer w.hub.mu.Unlock()
		w.hub.watches = slices.DeleteFunc(w.hub.watches, func(x *healthWatch) bool { return x == w })
		w.queue = nil
	})
	return nil
}
