// Package nvmlhal is the real MIG hardware backend: [Backend] implements
// [realize.Realizer], [realize.MIGModeSetter] and [capability.HardwareView]
// over NVIDIA's NVML through github.com/NVIDIA/go-nvml. It is the only
// package of the module that imports go-nvml, and it needs cgo (gcc) to
// build; libnvidia-ml.so.1 is loaded only when [Backend.Init] runs, so
// programs and tests build and start on machines without a GPU.
//
// # Model
//
// GPUs are addressed by NVML device index. GPU instance profiles are keyed
// by their NVML profile index (nvml.GPU_INSTANCE_PROFILE_*, the
// [capability.GIProfileIndex] constants), which is stable across GPU
// families; the profile Id NVML returns for an index differs between
// families (1g is Id 19 on A100, 14 on A30) and is treated as opaque: it
// is only ever passed back to NVML. Profiles are discovered by walking
// every index and skipping those NVML reports as not supported, so
// variants such as 1g.5gb+me, 1g.10gb (the REV2 index on A100-40GB),
// +gfx, -me and +me.all are distinct profiles and are created exactly.
// Canonical names come from the driver's versioned (V3, else V2) profile info
// when it has one; otherwise [capability.GIProfileInfo].Name is empty and
// [capability.DeriveProfileName] names the profile by NVIDIA's rule.
//
// A placement is a half-open interval of memory slots
// [Start, Start+Size) on the GPU's grid (8 slots on A100/H100/H200/B200,
// 4 on A30, 12 on RTX PRO 6000). Its Size can exceed the profile's compute
// slice count (3g occupies 4 slots, 7g 8). An instance is created at
// exactly the requested placement (CreateGpuInstanceWithPlacement) and its
// single compute instance spans the whole GPU instance with shared
// engines; the MIG device UUID is found through the MIG device handles.
// Instances are listed by walking the GPU instance profiles, so a GPU
// instance left without a compute instance is still found. Scans of the
// MIG device handles skip indexes and handles without a device (NOT_FOUND
// and INVALID_ARGUMENT, which NVML returns for an empty index and for a
// handle another client just destroyed), so a scan racing another
// client's destroy neither fails nor makes a successful create roll back.
//
// Profiles and possible placements are read whatever the MIG mode, so
// drivers that answer those queries with MIG off publish the table before
// MIG is enabled. A GPU's NUMA node is its PCI device's numa_node in sysfs
// (Options.Sysfs), as NVIDIA's device plugin reads it; NVML's
// GetNumaNodeId (R550 and later) says whether the GPU's memory is a NUMA
// node of its own, not which CPUs are near it, and is not called.
// Processes counts compute, graphics and MPS client processes: NVML's
// compute list omits the other two, so a +gfx instance running a
// renderer would otherwise look idle.
//
// # Errors
//
// Every failure of an NVML call is a [*realize.HardwareError] whose Op
// names the call, whose Kind is the realize sentinel for the code
// (INSUFFICIENT_RESOURCES: realize.ErrOccupied; INVALID_ARGUMENT on
// create: realize.ErrInvalidPlacement; IN_USE: realize.ErrInUse;
// NOT_FOUND: realize.ErrNotFound; NOT_SUPPORTED: realize.ErrMIGDisabled
// when MIG mode is off, else realize.ErrNotSupported; RESET_REQUIRED:
// realize.ErrResetRequired) and whose Cause is a [*ReturnError] carrying
// the raw nvml.Return. Branch with errors.Is on the sentinels; recover the
// code with errors.As. Where one code has several causes the
// ReturnError's Meaning says all it can mean ([Meaning]): on create,
// INSUFFICIENT_RESOURCES (realize.ErrOccupied) is an overlap or an
// exhausted instance count, compute slices or media engines; IN_USE may
// be another NVML client (DCGM, an exporter) holding the GPU rather than
// instances or processes. Requests refused before NVML is asked (a placement
// the GPU does not publish, a profile index outside NVML's range, a
// negative GPU index) carry an [*ArgumentError] as Cause instead.
//
// # Supported drivers and GPUs
//
// MIG-capable GPUs (A30, A100, A800, H100, H800, H20, H200, B200, GB200,
// RTX PRO 6000 Blackwell in all editions) on Linux, with a driver whose
// NVML has CreateGpuInstanceWithPlacement and the placement queries (R470
// and later). Drivers with the versioned profile query
// (nvmlDeviceGetGpuInstanceProfileInfoV) report the canonical profile
// names: the V2 struct is asked first, V3 only when V2 gives none, and an
// answer names a profile only when it agrees with the V1 answer (driver
// 580.159.04 answers V3 with SUCCESS and an empty name). Otherwise the
// names are derived. Each GPU's profile table is read once per GPU UUID
// and driver version and then served from memory. go-nvml links
// lazily, so a call through a symbol the library lacks ends the process:
// the backend calls no entry point newer than R470 without looking it up
// first (the versioned profile query), and not at all where it has a
// portable alternative (NUMA from sysfs). Calls that create or destroy
// instances or change MIG mode need the privileges NVML demands (root or
// CAP_SYS_ADMIN). The unit tests run against the strict mocks of package
// nvmlmock (A100, H100, H200, B200, A30 and RTX PRO 6000 tables from the
// facts file); only the hardware tests behind the nvml_hardware build tag
// check a real driver, and none has run in this project's CI; the
// read-only self-check (package selfcheck) ran on an H200 with driver
// 580.159.04, whose answers nvmlmock's Driver580 mode reproduces.
//
// # Init and Shutdown ownership
//
// [New] never touches NVML. Whoever calls [Backend.Init] owns one NVML
// initialisation and must call [Backend.Shutdown] once for it. NVML counts
// initialisations, so a program that has already initialised the library
// it passes in Options.NVML can skip Init and Shutdown entirely: Shutdown
// only balances the backend's own Init calls and otherwise returns
// [ErrNotInitialized] without touching the library.
//
// NVML must be initialised before any other call. A backend over the
// system library it made itself (Options.NVML nil) refuses calls before
// Init with ERROR_UNINITIALIZED; with an injected library that promise is
// the caller's: go-nvml resolves NVML's symbols only at Init, and a call
// before it ends the process. Shutdown waits for the backend's calls in
// flight and holds new ones off while it runs, so none runs on a library
// being shut down. go-nvml keeps the library loaded when nvmlInit fails
// and cannot unload it then; a backend that made its library uses a fresh
// one for the next Init rather than stacking references on that one.
//
// # Health
//
// A Backend is a [realize.HealthWatcher]. [Backend.WatchHealthWith] makes
// one NVML event set and registers each GPU for the critical Xid, single-
// and double-bit ECC, GPU-unavailable and recovery-action events it
// supports, as NVIDIA's device plugin does (k8s-device-plugin,
// internal/rm/health.go). Xids that an application causes
// ([realize.ApplicationXids]: 13, 31, 43, 45, 68, 109, the device plugin's
// list, meanings in https://docs.nvidia.com/deploy/xid-errors/) are
// ignored, and so are Xids [HealthOptions.Checks] disable (unless they
// enable them), corrected single-bit ECC errors too. An event NVML attributes to a MIG device (GPU and compute instance
// IDs other than 0xFFFFFFFF) marks that device only; anything else marks
// the whole GPU. A recovery-action event whose action is NONE (the driver
// says the GPU needs nothing more) makes the GPU and its MIG devices
// healthy again; any other action (reset, reboot, drain) keeps it
// unhealthy. [HealthWatch.Next] waits in NVML for at most
// [HealthOptions.Poll] at a time and starts no goroutine.
//
// # Concurrency
//
// A Backend is safe for concurrent use. Calls that create, destroy or list
// instances or processes on a GPU, or enable its MIG mode, hold that GPU's
// lock for the duration of the NVML calls, so a listing never sees half an
// instance created by this backend nor a MIG device handle it destroyed;
// the lock wait honours ctx. Calls on different GPUs proceed in
// parallel. NVML calls themselves cannot be interrupted: ctx is checked
// before each step, never in the middle of one. No goroutine outlives a
// call. Another NVML client (nvidia-smi, MIG Manager, DCGM) mutating the
// same GPU is outside this contract; the realize Manager must own the
// GPU's MIG state.
package nvmlhal

import (
	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// Referenced by the package doc.
var (
	_ capability.HardwareView = (*Backend)(nil)
	_ realize.Realizer        = (*Backend)(nil)
)
