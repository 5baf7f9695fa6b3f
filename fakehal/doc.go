// Package fakehal is faithful in-memory MIG hardware for tests and demos:
// a [Node] of GPUs that implements [realize.Realizer],
// [realize.MIGModeSetter] and [capability.HardwareView], at least as strict
// as real NVML, with simulated processes and deterministic fault injection.
//
// # Model
//
// A Node is the hardware, not a client of it: its GPU and compute
// instances outlive any manager built over it, which is how tests model a
// device-plugin restart (build a new manager over the same Node). GPUs are
// built from [Model] profile tables ([Models], [LookupModel]) that follow
// ../shared/data/mig-hardware-facts.md and the MIG User Guide (R580): A30
// (4-slot grid), A100, A800, H100 (SXM5, PCIe with its 114 SMs, NVL), H800,
// H20, GH200, H200, B200, GB200 (8 slots, 7 compute slices) and RTX PRO 6000
// Blackwell in its Server, Workstation and Max-Q Workstation editions (12
// slots), each under the name its driver reports. Tables not confirmed on
// hardware have Confirmed false and a Note saying what is estimated (the
// H20's SM counts, for one). Where driver generations report different
// tables (B200's 1g memory, GB200's early profile names), [Model.Older]
// carries them and [Options.Driver] picks one, the current drivers' by
// default. GPUs are addressed by NVML index, profiles by NVML GPU instance
// profile index ([capability.GIProfileIndex]); profile IDs are reported but
// never used as keys.
//
// Units: placements are memory slots, not compute slices. A placement
// occupies the half-open interval [Start, Start+Size): [0,4) and [4,8) do
// not overlap. Memory is MiB as NVML reports it.
//
// # Strictness
//
// CreateInstance accepts only a placement the profile publishes
// (ErrInvalidPlacement otherwise, NVML ERROR_INVALID_ARGUMENT) on a free
// range (ErrOccupied, ERROR_INSUFFICIENT_RESOURCES), within the profile's
// instance count (one 1g.5gb+me on an A100), the GPU's compute-slice
// budget and its media engines (ErrOccupied with INSUFFICIENT_RESOURCES,
// the code the driver gives for exhausted resources). Media engines
// ([Engines]: NVDEC, NVENC, JPEG, OFA) are a per-GPU budget independent of
// slots, from the guide's per-profile engine columns: on an A30 only one
// GPU instance holds the JPEG/OFA engines, so 1g.6gb+me and 2g.12gb+me
// exclude each other; on an RTX PRO 6000 a +me.all instance takes all four
// NVDEC/NVENC and excludes every other instance but -me ones. An
// unsupported profile index is ErrNotSupported, MIG disabled
// ErrMIGDisabled; with MIG disabled Instances is ErrMIGDisabled too and
// GIProfiles lists nothing, as drivers that answer profile queries only
// in MIG mode do (the strictest case). Destroying a GPU instance with compute
// instances, or a compute instance with processes, is ErrInUse; unknown
// GPUs, GPU instances and compute instances are ErrNotFound. Every error is
// a [*realize.HardwareError] whose Kind is the realize sentinel and whose
// Cause is a [Return] carrying the NVML code. [Node.Check] verifies the
// invariants these rules keep.
//
// IDs are assigned as a driver would, which is realism, not contract: a
// GPU instance gets the ID of the node of the binary tree over the slot
// grid that its placement covers, the upper half first on 8-slot grids as
// the A100 driver numbers them (7g 0; 3g/4g [4,8) 1, [0,4) 2; 2g and
// 1g.10gb 3..6 from slot 4; 1g [4,5) 7 .. [3,4) 14), compute instances the
// lowest free ID from 0 within their GPU instance. GPU UUIDs
// ("GPU-<uuid>") derive from [Options.Seed] and the index; MIG UUIDs ("MIG-<uuid>") from the seed, the GPU and how many
// compute instances the GPU has created, so they are stable while the
// instance lives, differ when it is recreated, and repeat exactly for the
// same per-GPU call sequence.
//
// MIG mode is per GPU, enabled unless [Options.MIGDisabled]. A mode change
// on a GPU that runs processes (or on any GPU with
// [Options.ModeChangeNeedsReset]) stays pending and returns
// ErrResetRequired; [Node.ResetGPU] applies it and, like a real reset,
// clears every instance.
//
// # Processes
//
// [Node.StartProcess] simulates a compute process on a MIG device or on
// the whole GPU; [Node.StopProcess] ends it. [Node.Processes] reports them.
//
// # Fault injection
//
// [Node.Inject] adds a [Fault] for one [Op]: fail the Nth matching call
// with an error, delay calls, or let the hardware act and then fail the call
// with [ErrCrashed] (a caller that died mid-operation; [Node.CrashAfterGI]
// leaves a GPU instance without a compute instance), or keep listing a
// destroyed GPU instance for a while (Fault.Linger, the stale listings some
// H100 drivers show). Faults count matching
// calls from their injection, so they are deterministic; [Injected] reports
// how often one fired and [Node.Calls] counts calls per operation. Latency
// sleeps on the real clock without holding the node's lock and ends early
// when ctx is done, so calls on different GPUs overlap as they would on
// hardware.
//
// Setup helpers ([Node.AddInstance], [Node.AddGPUInstance],
// [Node.AddComputeInstance], [Node.ForceMIGMode]) build states such as
// leaks or instances made by someone else; they obey the hardware rules but
// take no faults and count no calls. [Node.Snapshot] lists every instance
// on the node.
//
// # Health
//
// A Node is also a [realize.HealthWatcher]. [Node.InjectXid] makes the
// driver report an Xid on a GPU or, given a MIG UUID, on that MIG device
// (the event names its GPU and compute instance IDs, as NVML does),
// [Node.InjectECC] an uncorrectable ECC error, and [Node.Recover] the GPU
// usable again. Open watches ([Node.WatchHealth]) receive each event and,
// as nvmlhal's do, ignore the Xids their [realize.HealthChecks] do not
// count ([realize.ApplicationXids] by default) and report transitions
// only. Faults change health, not the hardware's rules: instances can
// still be created on a failed GPU, so tests show that it is the device
// plugin that refuses to.
//
// # Concurrency
//
// A Node is safe for concurrent use. Each call holds one node-wide mutex
// only while it reads or changes state, never while sleeping, so injected
// latency on one call does not delay others. CreateInstance is two steps
// (GPU instance, then compute instance), as in NVML: other calls may run
// between them. No method starts a goroutine; a health watch waits in its
// caller's Next.
//
// The zero Node is not usable; build one with [New] or [MustNew]. The zero
// [Options] builds one MIG-enabled A100-SXM4-40GB.
package fakehal
