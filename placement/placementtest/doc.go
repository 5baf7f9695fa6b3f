// Package placementtest checks MIG allocators against the placement rules
// with property-based tests, in the style of testing/fstest and
// pgregory.net/rapid: a scheduler author adapts an allocator to
// [Allocator] and calls [Check] from a test, and the suite draws nodes and
// pods, asks the allocator, and compares every answer with an exhaustive
// reference [Oracle].
//
// # Model
//
// A [Node] is a list of GPU capabilities ([capability.GPU]) and, per GPU,
// the instances already placed on it ([Instance]: a profile name and one
// of its published placements). Generators build every piece:
//
//   - [GPU], [TableGPU] and [GridGPU] draw capability tables: the real
//     models' tables given as input ([Options.Tables]; fakehal.Tables has
//     every built-in model at each driver generation), with all
//     its profiles or only the plain ones, and arbitrary legal grids of 4,
//     8 and 12 slots (aligned placements, profiles sharing a size, variants,
//     now and then a profile without placements or an unhealthy GPU);
//   - [Occupied] and [NodeGen] draw reachable occupancies: instances added
//     one by one at free published placements, never raw bitmasks;
//   - [RequestGen] draws pods for a node: several containers and devices,
//     MiB, percent and whole-GPU demands, exact profiles, preferences and
//     UUID and type constraints, each valid per [placement.Request.Validate];
//   - [CaseGen] draws a node and a pod together.
//
// Media engines are a per-GPU budget independent of slots (on an A30 one
// +me instance excludes the other; on an RTX PRO 6000 a +me.all instance
// excludes every engine-bearing one). The registration carries no engine
// counts, so [Occupied] and the oracle take each profile's engines from the
// placement package's documented rules ([placement.Grid.EnginesOf]) and
// only add them up.
//
// [Oracle] decides by exhaustive search whether a pod fits and, when it does
// not, why: [placement.ErrExcluded], [placement.ErrNoProfile],
// [placement.ErrCapacity] or [placement.ErrFragmented], by the rules the
// placement package documents. [CheckCase] holds one allocator answer to the
// properties listed there; [Property] and [Check] run it under rapid.
// [Selector] and [Ledger] adapt this module's own allocators.
//
// # Units and intervals
//
// Memory is MiB as NVML reports it. Placements are in memory slots of the
// GPU's grid, not compute slices, and occupy the half-open interval
// [start, start+size): [0,2) and [2,4) do not overlap.
//
// # Readable counterexamples
//
// Every generated value prints in a few lines: [Node.String] lists each
// GPU with its profiles and held instances, [FormatRequest] a pod's demand,
// and [Case.String] both, so a shrunk failure says exactly which node and
// pod broke which property.
//
// # Concurrency
//
// Generators and checks keep no state between calls and start no
// goroutines; they call the allocator from the calling goroutine only. The
// zero [Options] uses the defaults.
package placementtest
