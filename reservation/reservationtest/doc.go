// Package reservationtest checks codecs of the two dynamic-MIG wire
// formats with property-based tests, in the style of testing/fstest and
// pgregory.net/rapid: the pod annotation hami.io/vgpu-mig-allocations and
// the node annotation hami.io/node-nvidia-register.
//
// # Model
//
// A [Record] is one pod's valid allocation value: entries whose
// (containerIndex, deviceIndex) pairs are unique, whose placements do not
// overlap on a GPU, each with a complete runtime identity or none (IDs
// include 0 and the unsigned 32-bit maximum), and the device requests
// (reservation.Pod.DeviceRequests) under which every entry is trusted.
// [RecordGen] draws them, with GPU UUIDs that need JSON escaping now and
// then. [WireEncode] is the reference writer: encoding/json over a struct
// shaped like the deployed one, which is what "byte compatible" means here.
//
// A [Mutant] is a valid value turned invalid in one way, with the sentinel
// a strict reader must return: malformed JSON and types
// (reservation.ErrMalformed and its kind), forged, overlapping, duplicate
// or partial entries (reservation.ErrInvalid and its problem) and entries
// the pod never requested (reservation.ErrNotRequested). [MutantGen] draws
// them from a record.
//
// A [Codec] is a strict reader and a writer. [CheckRecord] and
// [CheckMutant] hold one to the contract: the writer produces the
// reference bytes, the reader reads them back to the same entries, and
// every mutant is refused with its sentinel. [Property] and [Check] run
// them under rapid; [Strict] is this module's codec.
//
// The node registration has the same pieces: [RegistrationGen] draws valid
// device lists (built-in GPU models, MIG and non-MIG devices, healthy and
// unhealthy, index and NUMA 0 among others), [WireEncodeRegistration] is
// the reference writer (every key omitempty, as deployed),
// [RegistrationMutantGen] breaks one device, and [RegistrationCodec],
// [CheckRegistration] and [CheckRegistrationMutant] check a codec.
//
// # Units and intervals
//
// Placements are in memory slots, not compute slices, and occupy the
// half-open interval [start, start+size): [0,2) and [2,4) do not overlap.
// Memory is MiB.
//
// # Readable counterexamples
//
// [Record.String] prints one entry per line, [Mutant.String] the mutation,
// the expected sentinel and the value, so a shrunk failure shows the bytes
// that broke the codec.
//
// # Concurrency
//
// Everything here is a pure function of its arguments; nothing starts a
// goroutine. The codec's functions are called from the calling goroutine.
package reservationtest
