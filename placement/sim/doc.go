// Package sim replays MIG request traces against placement policies and
// reports, per policy side by side, how many requests were accepted, how
// many were rejected for capacity (not enough free slots), for fragmentation
// (free slots but no legal placement) or for lack of a large enough profile,
// and the mean slot utilisation.
//
// # Units
//
// Trace times are in any unit (only differences matter; utilisation is
// weighted by them). Memory is in MiB. Placements, as everywhere in package
// placement, are half-open slot intervals [start, start+size) on each GPU's
// published grid, and the simulated GPUs start empty.
//
// # Trace format
//
// A trace is JSON lines, one event per line, in non-decreasing time:
//
//	{"t":0.5,"op":"arrive","id":"r1","profile":"3g.20gb"}
//	{"t":0.7,"op":"arrive","id":"r2","memoryMB":9000,"devices":2}
//	{"t":1.0,"op":"arrive","id":"r3","percent":50}
//	{"t":2.5,"op":"depart","id":"r1"}
//
// Fields: "t" time (any unit, >= 0); "op" "arrive" or "depart"; "id" names
// the request (unique among live requests). An arrival carries at most one
// demand: "profile" (exact profile name), "memoryMB" (MiB per device; the
// smallest covering profile is chosen) or "percent" (of the GPU's memory);
// with none it asks for a whole GPU. "devices" (default 1) asks for several
// devices placed all or nothing. A departure carries only t, op and id and
// releases what its arrival got (nothing if it was rejected). Blank lines
// and lines starting with '#' are ignored. [ReadTrace] and [WriteTrace]
// read and write it.
//
// # Generators
//
// [Generate] draws Poisson arrivals with exponential lifetimes from a
// weighted profile [Mix] ([UniformMix], [SkewedMix]) at a chosen offered
// load; [HeavyChurn] gives the options of the quality traces. Equal options
// and seeds give equal traces.
//
// # Replaying other allocators
//
// [Run] replays a trace through a placement.Selector. [Replay] drives any
// other allocator that implements [Placer] through the same loop, so its
// counts and utilisation line up with Run's; [ContainerOf] turns an
// arrival into the container demand Run places.
//
// # Results
//
// go run ./cmd/migctl simulate --model A100-SXM4-40GB --gpus 8 --synthetic 1 --profiles plain
// (heavy churn: skewed mix, 4000 arrivals, offered load 1.3, mean life 20;
// H100 gives the same table, its placement grid being the same):
//
//	    policy  arrivals  accepted  rej capacity  rej fragmentation  mean slot util
//	 first-fit      4000      3179           660                161           78.3%
//	     v2.10      4000      3175           649                176           78.0%
//	frag-aware      4000      3211           700                 89           80.0%
//
// go run ./cmd/migctl simulate --model A30 --gpus 8 --synthetic 1 --profiles plain (RTX
// PRO 6000 gives the same table: its 12-slot grid is the A30's 4-slot
// buddy grid scaled by three):
//
//	    policy  arrivals  accepted  rej capacity  rej fragmentation  mean slot util
//	 first-fit      4000      3157           787                 56           82.7%
//	     v2.10      4000      3155           769                 76           82.7%
//	frag-aware      4000      3138           836                 26           83.0%
//
// go run ./cmd/migctl simulate --model A100-SXM4-40GB --gpus 8 --synthetic 1 (the
// default allowlist's profiles 1g.5gb 2g.10gb 3g.20gb 7g.40gb):
//
//	    policy  arrivals  accepted  rej capacity  rej fragmentation  mean slot util
//	 first-fit      4000      3106           736                158           73.7%
//	     v2.10      4000      3101           731                168           74.1%
//	frag-aware      4000      3084           877                 39           74.8%
//
// Over the 20 quality traces per case (uniform and skewed, seeds 1..10,
// TestQualityHeavyChurn) the default policy has, summed, 0.47 (A100, H100),
// 0.41 (A30, RTX PRO 6000) and 0.35 (A100 with the allowlist's profiles)
// of first fit's fragmentation rejections, and accepts more requests than
// first fit and v2.10 on every plain A100 and H100 trace. The issue's
// per-trace target is not met: the default accepts fewer than the better
// baseline on 12 of 20 A30 traces (at worst 1.8% fewer) and 7 of 20
// allowlist A100 traces (at worst 1.4%), nearly all with the skewed mix,
// and has more than half of first fit's fragmentation rejections on 9 of
// 20 A100 traces and 4 of 20 A30 traces (on one A30 trace more than first
// fit: 18 against 13).
//
// No policy tried meets the per-trace target on any of these grids. On the
// A30 traces, every priority order of the placement situations (a 1g fills
// the free slot of a split pair or splits a free pair, a 2g takes a free
// pair, each ranked by the state of the GPU's other pair; ties to the
// lowest GPU or the fullest: 432 policies) fails the count on at least 8
// traces, on at least 10 among those that halve the summed fragmentation
// rejections; the few that halve them on every trace fail the count on 13.
// Every lexicographic order of up to three of stranding increase, capacity
// loss, capacity loss weighted by the trace's profile mix, free slots left
// on the GPU (best fit), free placements blocked and start (149 policies)
// fails the count on at least 10 A30 traces and at least 5 allowlist A100
// traces, and none halves fragmentation on every plain A100 trace (at best
// on all but 6); only the default's order, and orders that choose as it
// does there, have no count failure on the plain A100.
//
// The count part conflicts with less fragmentation on these overloaded
// traces: every large request accepted holds slots that several small ones
// would have used, so turning large requests away, which is what
// fragmentation does, raises the count.
// TestQualityCountRewardsRejectingLarge shows it: with no placement rules
// at all (nothing can fragment), the A30 traces accept fewer requests than
// first fit on the real grid on all 20 traces when the GPUs are one slot
// pool, and on 11 of 20 when each request must fit one GPU.
//
// # Concurrency
//
// Functions are safe for concurrent use on distinct arguments; nothing is
// shared between calls, and no goroutine is started. Only [Replay] takes a
// context, because the allocator it drives may block: it hands its ctx to
// every [Placer] Arrive call and stops once ctx is done. The rest is pure
// computation.
package sim
