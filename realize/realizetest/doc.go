// Package realizetest is a conformance suite for [realize.Realizer]
// backends, in the style of testing/fstest: a backend's own tests call
// [TestRealizer] (or [Run], which reports failures as an error) with a
// factory that returns a fresh backend, and the suite checks that the
// backend behaves as the manager expects real NVML hardware to behave.
//
// # What the suite needs
//
// Every check gets a fresh [Backend] from the factory and works on one GPU:
// the first GPU that [realize.Realizer.Devices] reports with MIG enabled
// and on which Instances lists nothing and Processes reports nothing. A
// backend without such a GPU fails every check. The checks only use the
// GPU's own profile table (GIProfiles), so they run on any grid: 4-slot
// A30, 8-slot A100/Hopper/Blackwell, 12-slot RTX PRO 6000. Each check
// destroys what it created before returning, so the suite can run, with
// care, on real idle hardware.
//
// Optional capabilities widen coverage; a check whose need is unmet is
// skipped (reported with [ErrSkipped]):
//   - [Backend.StartProcess] lets the suite run a process on a MIG device
//     (process reporting, ErrInUse on destroy).
//   - A GPU listed with MIG disabled enables the MIG-disabled check.
//   - A GPU whose profiles contend for media engines (A30's two +me
//     profiles, RTX PRO 6000's +me.all) enables the media-engine check,
//     whose clashing pairs come from package placement's rules so that a
//     conforming backend refuses exactly what the scheduler never reserves.
//
// The checks and what each needs are listed by [Checks]; see the Doc field
// of each.
//
// # Property-based checks
//
// Beside the fixed checks, [MachineProperty] (and [TestStateMachine]) is a
// pgregory.net/rapid state machine over the same GPU: random sequences of
// creates at published and unpublished placements, destroys of live and
// unknown IDs, and processes, each answer predicted by [Model], a
// reference model of the NVML rules, and the listings compared with the
// model after every step.
//
// [Safety] models the realization manager's safety invariants (nothing
// handed to two owners, no forged claim granted, nothing in use
// destroyed) for embedders to assert on their own device-plugin loop:
// record grants, releases and hardware observations, and it reports every
// broken invariant as an error matching [ErrUnsafe].
//
// # Units and rules
//
// Placements are half-open slot intervals [Start, Start+Size) on the GPU's
// grid; [0,2) and [2,4) do not overlap. Errors are matched with errors.Is
// against the realize sentinels and must be [*realize.HardwareError]
// values with that sentinel as Kind; the suite never inspects error
// strings.
//
// # Concurrency
//
// Checks run one after another; the concurrency check calls the backend
// from several goroutines and waits for all of them before returning. No
// goroutine outlives a call.
package realizetest
