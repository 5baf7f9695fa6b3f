// Package nvmlmock makes go-nvml's DGX mock servers (pkg/nvml/mock/dgxa100,
// dgxh100, dgxh200, dgxb200) strict enough to test an NVML MIG backend
// without a GPU, and adds two grids go-nvml's servers lack: the 4-slot A30
// (on go-nvml's A30 GPU config) and the 12-slot RTX PRO 6000 Blackwell
// Server Edition with its +gfx, -me and +me.all variants. It is a test
// helper: only tests and examples import it.
//
// go-nvml's servers are lax: overlapping or illegal placements succeed, a
// GPU instance with live compute instances can be destroyed, MIG device
// handle calls panic, every profile Id equals its index, and the H100,
// H200 and B200 tables have placements and sizes no driver reports, and
// its names ("NVIDIA H200 141GB HBM3e") and totals are not what drivers
// report. A [Server] keeps go-nvml's GPU identities (UUIDs, PCI data, copy
// engine counts, compute instance profiles) and replaces the MIG calls with
// ones that check what real NVML checks. Device names, total memory and
// every GPU instance profile (Id, memory, SMs, instance count, placements,
// media engines) come from the fakehal preset [Model.Preset] names, so the
// two fakes share one table; [Options.Driver] picks a driver generation as
// fakehal's does:
//
//   - profile Ids differ from indexes (1g is Id 19 at index 0, 7g Id 0 at
//     index 4), so a caller that confuses them fails;
//   - placements are half-open slot intervals [Start, Start+Size) on the
//     model's grid: on the 8-slot parts 3g has size 4, 7g size 8, 1g REV2
//     size 2;
//   - creating at a placement the profile does not list is
//     ERROR_INVALID_ARGUMENT; overlapping a live GPU instance, exceeding
//     the profile's instance count, the GPU's compute slices or its media
//     engines (an A30's one JPEG/OFA set, an RTX PRO 6000's four NVDEC and
//     NVENC that a +me.all instance takes) is ERROR_INSUFFICIENT_RESOURCES;
//     MIG off is ERROR_NOT_SUPPORTED;
//   - destroying a GPU instance with compute instances or processes, or a
//     compute instance with processes, is ERROR_IN_USE; destroyed handles
//     turn invalid;
//   - each compute instance gets a MIG device handle with a fresh, distinct
//     MIG UUID, reachable through GetMigDeviceHandleByIndex (sparse,
//     NOT_FOUND for free indexes, up to GetMaxMigDeviceCount);
//     ComputeInstanceInfo.Device is the parent GPU as nvml.h documents
//     (Options.CIInfoDevice hands out the MIG device instead);
//   - every call fails with ERROR_UNINITIALIZED until Init, and Init and
//     Shutdown are counted, so ownership bugs show.
//
// What real drivers do that a naive backend trips over is reproducible:
// Options.MissingSymbols imitates an older library (calling a missing
// entry point panics, as the process would die; LookupSymbol says it is
// missing); [OpGetMigDeviceHandleByIndex] and [OpMIGDeviceQuery] faults
// answer INVALID_ARGUMENT mid-scan, as for a handle another client
// destroyed; [Server.StartGraphicsProcess] and [Server.StartMPSProcess]
// run clients that NVML lists only in the graphics and MPS process lists;
// Options.ProfilesWhileDisabled answers profile queries with MIG off.
// [Server.Sysfs] gives the PCI NUMA nodes of a DGX.
//
// Options.Driver580 reproduces driver 580.159.04 as measured on an H200:
// its V3 profile answer with an empty name, GetGpuInstances answering with
// MIG off, and the index range it knows.
//
// V2 and V3 profile names are served through nvmlhal.ProfileInfoV2Device
// and nvmlhal.ProfileInfoV3Device, since go-nvml's versioned handler
// cannot be mocked. Processes are started and
// stopped with [Server.StartProcess], [Server.StartMIGProcess] and
// [Server.StopProcess]; [Server.FailNext] injects an NVML error into the
// next call of an operation. The zero [Options] give a MIG-enabled server.
//
// Health events are served strictly: [Server.EventSetCreate] makes event
// sets, Device.RegisterEvents refuses types outside the GPU's supported
// mask ([DefaultSupportedEvents], changed with [Server.SetSupportedEvents])
// with NOT_SUPPORTED, EventSet.Wait returns only registered types from
// registered GPUs (ERROR_TIMEOUT otherwise), and a freed set is
// INVALID_ARGUMENT. [Server.InjectXid], [Server.InjectMIGXid] and
// [Server.InjectEvent] raise events; [OpEventSetWait] and
// [OpRegisterEvents] faults fail them; [Server.EventSets] counts the sets
// not freed.
//
// A Server is safe for concurrent use: one mutex guards all its state.
// Values of go-nvml's mock that this package does not override (clocks,
// power, NVLink, ...) behave as go-nvml defines them.
package nvmlmock
