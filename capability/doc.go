// Package capability is the MIG capability model shared by the scheduler
// and the device plugin: profiles and their placements, the cluster policy
// saying which profiles each GPU model may publish, discovery of what a node's
// GPUs actually support, and the node registration wire format
// (hami.io/node-nvidia-register) that carries it.
//
// # Model
//
// NVML is the source of truth for hardware capability. A [GPU] has a grid of
// memory slots and a set of GPU instance profiles ([Profile]); each profile
// lists every legal [Placement] on that grid, occupied or not. Names such as
// "2g.10gb" or "1g.5gb+me" ([ProfileName]) are policy labels: the memory,
// compute share and placements behind a name are node-local facts that
// drift between boards and drivers, so nothing keys on a memory value or a
// name computed from one. Profiles are identified to NVML by their
// [GIProfileIndex], never by the opaque profile ID.
//
// The policy is an [Allowlist] (the scheduler device config's
// nvidia.migProfileAllowlist, read by [ParseDeviceConfig], built in as
// [DefaultAllowlist]). Its entries apply to GPUs whose NVML name contains
// one of their model strings, the first matching entry winning, as in the
// deployed HAMi scheduler. [Discover] combines a [HardwareView] with the
// policy: a GPU publishes exactly the allowlisted profiles NVML resolves, and
// everything left out is reported in a [DiscoveryReport], never dropped
// silently. An allowlisted name the driver spells differently (the HAMi
// chart's 7g.79gb for A100 80GB's 7g.80gb) resolves to the driver's profile
// when it denotes the same one ([ResolveProfileName]), with a finding.
//
// Capacity comes from the hardware, not from the policy: a GPU's [Limits]
// (slot grid width, compute slices, media-engine rules) are read from its
// full profile table by discovery, or from its model family
// ([GPU.HardwareLimits]) when it was decoded from a registration, which
// carries only the allowlisted profiles. Narrowing the allowlist never
// lowers how many instances of the remaining profiles fit. v2.9 configs (nvidia.knownMigGeometries) are refused by
// [ParseDeviceConfig] and converted explicitly by [ParseLegacyGeometries] and
// [ConvertLegacy].
//
// The device plugin publishes GPUs as [NodeDevice] values
// ([NewMIGNodeDevice], [EncodeNodeRegistration]); the scheduler reads them
// back device by device ([ReadNodeRegistration], [NodeRegistration.GPUs]), so
// that a malformed entry takes out that GPU only. The codec matches the
// deployed format byte for byte: keys in wire order, zero values left out
// (an unhealthy GPU has no "health" key, [GPU.Unhealthy]), compact JSON.
//
// # Units
//
// Memory is MiB as NVML reports it (Profile.MemoryMB, GPU.MemoryMB,
// NodeDevice.Devmem). Placements are in memory slots, not compute slices:
// an A100 3g profile has placement size 4 and 7g size 8, and the grid is 4
// slots on A30, 8 on A100/H100/H200/B200, 12 on RTX PRO 6000; [GPU.Width]
// derives it from the placements, never assume 8. Compute share (Profile.Core,
// NodeDevice.Devcore) is a percentage: core = ceil(profileSMs*100/maxSMs)
// where maxSMs is the largest multiprocessor count among all the GPU's GPU
// instance profiles ([Core]).
//
// # Intervals
//
// A placement occupies the half-open slot interval [start, start+size):
// [2,4) and [4,6) touch but do not overlap. Size 0 is never valid on the
// wire. [Placement.Mask] gives the interval as a bitmask for grids of up to
// [MaxSlots] slots.
//
// # Zero values
//
// The zero [Placement] is the empty interval at slot 0 and is not valid. The
// zero [ProfileName] and [Profile] are invalid. The zero [GPU] has no
// profiles. A nil [Allowlist] allows nothing. The zero [DeviceConfig] has no
// allowlist; the zero [DiscoveryReport] has no findings; the zero
// [NodeDevice] is invalid. [MIGMode]'s zero value is [MIGUnknown] and
// [Format]'s is [FormatYAML].
//
// # Errors
//
// Malformed input gets a typed error naming where it is: [*ConfigError]
// (path such as "nvidia.migProfileAllowlist[2].profiles[1]", entry index and
// field; matches [ErrConfig], and [ErrLegacyConfig] for an unconverted v2.9
// config), [*RegistrationError] (device position and field; matches
// [ErrRegistration]), [*ProfileNameError] ([ErrProfileName]). When an input
// has several problems they are joined with errors.Join. NVML profile
// information that cannot describe a usable profile is a [*ProfileInfoError]
// ([ErrProfileInfo]); [Discover] reports it as a finding. Hardware view
// failures in [Discover] are [*HardwareError] values carrying the GPU index.
// No decoder panics on any input; decoders are fuzz tested.
//
// # Concurrency
//
// Everything here is a value or a pure function: functions keep no state
// and start no goroutines. Values may be read concurrently; a caller that
// mutates one (for example appends to GPU.Profiles) must not share it
// meanwhile. [Discover] calls the [HardwareView] sequentially from the
// calling goroutine and only reads from it; it honours ctx between GPUs.
//
// # Dependencies
//
// The package uses the standard library plus sigs.k8s.io/yaml (the
// Kubernetes convention for YAML configs), which [ParseDeviceConfig],
// [ParseLegacyGeometries] and [EncodeDeviceConfig] use to read and write
// YAML. It builds with CGO_ENABLED=0.
package capability
