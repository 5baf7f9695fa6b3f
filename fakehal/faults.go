package fakehal

import (
	"context"
	"slices"
	"time"
)

// Op names a hardware operation of a [Node], for fault injection, call
// counters and the Op field of the errors it returns. The values follow
// NVML's vocabulary.
type Op string

// Operations that count calls and take faults.
const (
	OpDevices    Op = "Devices"                // Devices (node-wide: GPU -1)
	OpGIProfiles Op = "GIProfiles"             // GIProfiles
	OpInstances  Op = "GetGpuInstances"        // Instances
	OpCreateGI   Op = "CreateGpuInstance"      // first half of CreateInstance
	OpCreateCI   Op = "CreateComputeInstance"  // second half of CreateInstance
	OpDestroyCI  Op = "DestroyComputeInstance" // DestroyComputeInstance
	OpDestroyGI  Op = "DestroyGpuInstance"     // DestroyGPUInstance, and CreateInstance's rollback
	OpProcesses  Op = "GetComputeRunningProcesses"
	OpSetMIGMode Op = "SetMigMode" // EnableMIG, DisableMIG
)

// Test-helper operations: they appear in errors but neither count calls nor
// take faults.
const (
	OpStartProcess Op = "StartProcess"
	OpStopProcess  Op = "StopProcess"
	OpResetGPU     Op = "ResetGPU"
	OpSetup        Op = "Setup" // AddGPUInstance, AddComputeInstance, AddInstance
)

// String returns the operation's name.
func (o Op) String() string { return string(o) }

// Fault describes a deterministic failure or delay of an operation. A fault
// matches calls of Op on one of GPUs; it fires on the Nth matching call
// counted from [Node.Inject] (1-based), or on every matching call when Nth
// is 0. A firing fault first sleeps Latency, then returns Err without
// performing the call; with Err nil and Crash set the call is performed
// and then returns an error wrapping [ErrCrashed], as if the caller died
// right after the hardware acted (Crash on OpCreateGI leaves a GPU instance
// without a compute instance and skips the rollback).
//
// A Fault with only Op set fires on every call of Op and changes nothing;
// set Latency, Err or Crash to give it an effect.
type Fault struct {
	Op Op
	// GPUs limits the fault to these GPU indexes; nil matches every GPU and
	// node-wide calls.
	GPUs []int
	// Nth is the matching call, counted from injection, on which the fault
	// fires; 0 means every matching call.
	Nth int
	// Latency delays the call before it touches the hardware, without
	// holding the node's lock, so calls on other GPUs (and on the same GPU)
	// proceed meanwhile. The sleep uses the real clock (time.NewTimer) and
	// ends early with the context's error when ctx is done.
	Latency time.Duration
	// Err is returned instead of performing the call. A *realize.HardwareError
	// is returned as is; a realize sentinel (realize.ErrOccupied...) is
	// wrapped in one with its NVML code as Cause; a [Return] with the
	// sentinel it stands for as Kind; any other error as Cause with no Kind.
	Err error
	// Crash performs the call, then fails it with [ErrCrashed].
	Crash bool
	// Linger applies to OpDestroyGI, as the stale listings some drivers
	// show (H100): the destroy succeeds and frees the range, but Instances
	// keeps listing the destroyed GPU instance, without compute instances,
	// for the next Linger calls on that GPU. Destroying it again is
	// ErrNotFound; Snapshot and Check see only the real hardware.
	Linger int
}

// Injected is a fault added to a node. Its methods are safe for concurrent
// use.
type Injected struct {
	node    *Node
	fault   Fault
	matched int // matching calls since injection
	fired   int
}

// Fired reports how many calls the fault has fired on.
func (f *Injected) Fired() int {
	f.node.mu.Lock()
	defer f.node.mu.Unlock()
	return f.fired
}

// Matched reports how many calls matched the fault, fired or not, between
// injection and removal (a fault with Nth set removes itself once fired).
func (f *Injected) Matched() int {
	f.node.mu.Lock()
	defer f.node.mu.Unlock()
	return f.matched
}

// Remove stops the fault from firing again. It is idempotent.
func (f *Injected) Remove() {
	f.node.mu.Lock()
	defer f.node.mu.Unlock()
	f.node.faults = slices.DeleteFunc(f.node.faults, func(x *Injected) bool { return x == f })
}

// Inject adds a fault. Faults are checked in injection order; every one
// that fires adds its latency, and the first firing Err (or Crash) decides
// the outcome.
func (n *Node) Inject(f Fault) *Injected {
	f.GPUs = slices.Clone(f.GPUs)
	in := &Injected{node: n, fault: f}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = append(n.faults, in)
	return in
}

// FailNth makes the nth call of op from now fail with err, on any GPU.
func (n *Node) FailNth(op Op, nth int, err error) *Injected {
	return n.Inject(Fault{Op: op, Nth: max(nth, 1), Err: err})
}

// AddLatency delays every call of op by d, on any GPU.
func (n *Node) AddLatency(op Op, d time.Duration) *Injected {
	return n.Inject(Fault{Op: op, Latency: d})
}

// CrashAfterGI makes the nth CreateInstance from now create its GPU
// instance and then fail with [ErrCrashed], leaving the GI without a
// compute instance, as when a device plugin dies between the two NVML
// calls.
func (n *Node) CrashAfterGI(nth int) *Injected {
	return n.Inject(Fault{Op: OpCreateGI, Nth: max(nth, 1), Crash: true})
}

// ClearFaults removes every fault.
func (n *Node) ClearFaults() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = nil
}

// Calls reports how many calls of op the node has received, including
// failed ones, but not calls whose ctx was already done. Each
// CreateInstance counts one OpCreateGI call, and one OpCreateCI call once
// its GPU instance exists.
func (n *Node) Calls(op Op) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[op]
}

// enter counts a call of op on gpu, applies the faults that fire on it and
// checks ctx. It reports whether the call must crash after acting.
func (n *Node) enter(ctx context.Context, op Op, gpu int) (eff effect, err error) {
	if err := ctx.Err(); err != nil {
		return effect{}, hwErr(op, gpu, nil, err)
	}
	var latency time.Duration
	var injected error
	n.mu.Lock()
	n.calls[op]++
	for _, f := range slices.Clone(n.faults) {
		if f.fault.Op != op || (f.fault.GPUs != nil && !slices.Contains(f.fault.GPUs, gpu)) {
			continue
		}
		f.matched++
		if f.fault.Nth != 0 && f.matched != f.fault.Nth {
			continue
		}
		f.fired++
		if f.fault.Nth != 0 { // one-shot: done
			n.faults = slices.DeleteFunc(n.faults, func(x *Injected) bool { return x == f })
		}
		latency += f.fault.Latency
		eff.linger = max(eff.linger, f.fault.Linger)
		if injected == nil && !eff.crash {
			switch {
			case f.fault.Err != nil:
				injected = injectedErr(op, gpu, f.fault.Err)
			case f.fault.Crash:
				eff.crash = true
			}
		}
	}
	n.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return effect{}, hwErr(op, gpu, nil, ctx.Err())
		case <-t.C:
		}
	}
	if injected != nil {
		return effect{}, injected
	}
	return eff, nil
}

// effect is what the faults that fired on a call ask of it once it has
// acted.
type effect struct {
	crash  bool // fail with ErrCrashed
	linger int  // OpDestroyGI: keep listing the destroyed GI this many times
}
