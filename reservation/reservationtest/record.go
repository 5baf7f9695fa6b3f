package reservationtest

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// Record is one pod's valid hami.io/vgpu-mig-allocations value: Allocations
// in array order, and the device requests (reservation.Pod.DeviceRequests,
// per container index) under which every entry is trusted: container c has
// exactly DeviceRequests[c] entries, device indexes 0..DeviceRequests[c]-1.
type Record struct {
	Allocations    []reservation.Allocation
	DeviceRequests []int
}

// Value returns the record as the deployed writer writes it ([WireEncode]).
func (r Record) Value() string { return WireEncode(r.Allocations) }

// String lists the device requests and one entry per line.
func (r Record) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device requests %v, %d entries", r.DeviceRequests, len(r.Allocations))
	for i, a := range r.Allocations {
		fmt.Fprintf(&b, "\n  [%d] %s", i, a)
	}
	return b.String()
}

// GoString is String, so that rapid's log of a drawn record is readable.
func (r Record) GoString() string { return r.String() }

// Clone returns a deep copy of r.
func (r Record) Clone() Record {
	return Record{Allocations: slices.Clone(r.Allocations), DeviceRequests: slices.Clone(r.DeviceRequests)}
}

// wireEntry is shaped like the deployed writer's struct: keys in wire
// order, migUUID omitted when empty, the instance IDs when absent.
type wireEntry struct {
	ContainerIndex    int           `json:"containerIndex"`
	DeviceIndex       int           `json:"deviceIndex"`
	GPUUUID           string        `json:"gpuUUID"`
	Profile           string        `json:"profile"`
	Placement         wirePlacement `json:"placement"`
	MIGUUID           string        `json:"migUUID,omitempty"`
	GPUInstanceID     *uint32       `json:"gpuInstanceID,omitempty"`
	ComputeInstanceID *uint32       `json:"computeInstanceID,omitempty"`
}

type wirePlacement struct {
	Start uint32 `json:"start"`
	Size  uint32 `json:"size"`
}

func optional(o reservation.OptionalID) *uint32 {
	if !o.Valid {
		return nil
	}
	id := o.ID
	return &id
}

// WireEncode is the reference writer of allocation values: Go's
// encoding/json (HTML-safe escaping included) over a struct shaped like
// the deployed one. nil and empty write "[]".
func WireEncode(allocs []reservation.Allocation) string {
	out := make([]wireEntry, len(allocs))
	for i, a := range allocs {
		out[i] = wireEntry{ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex, GPUUUID: a.GPUUUID,
			Profile: a.Profile, Placement: wirePlacement{Start: a.Placement.Start, Size: a.Placement.Size},
			MIGUUID: a.MIGUUID, GPUInstanceID: optional(a.GPUInstanceID), ComputeInstanceID: optional(a.ComputeInstanceID)}
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // unreachable: the struct has only strings and numbers
	}
	return string(b)
}

// profileNames are canonical names the generators use, variants included.
var profileNames = []string{"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me",
	"1g.12gb", "2g.24gb", "4g.48gb", "1g.24gb+me.all", "1g.12gb-me", "2g.24gb+gfx", "7g.141gb"}

// GPUUUIDGen draws a GPU UUID: usually "GPU-" and a lower-case 8-4-4-4-12
// hex UUID, now and then a short one or one with characters the writer
// must escape ("<", ">", "&", quotes, backslashes), all valid per reservation.Validate.
func GPUUUIDGen() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		switch rapid.IntRange(0, 7).Draw(t, "uuid kind") {
		case 0:
			return "GPU-" + rapid.SampledFrom([]string{"a", "0", "x<y>&z", "\"q\"", "\\", "a/b"}).Draw(t, "odd uuid")
		default:
			return "GPU-" + hexUUID(t, "gpu uuid")
		}
	})
}

func hexUUID(t *rapid.T, label string) string {
	h := rapid.Uint64().Draw(t, label)
	l := rapid.Uint64().Draw(t, label+" low")
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", h>>32, (h>>16)&0xffff, h&0xffff, l>>48, l&0xffffffffffff)
}

// RecordGen draws a valid [Record] of at most maxEntries entries (0 means
// 6) over 1..3 GPUs: 1..3 containers requesting 0..3 devices each, entries
// in shuffled array order, placements of sizes 1..8 that do not overlap on
// their GPU within the 64-slot wire limit, and each entry realized or not
// (unique MIG UUIDs, GPU instance IDs unique per GPU, IDs including 0 and
// 4294967295).
func RecordGen(maxEntries int) *rapid.Generator[Record] {
	if maxEntries <= 0 {
		maxEntries = 6
	}
	return rapid.Custom(func(t *rapid.T) Record {
		gpus := rapid.SliceOfNDistinct(GPUUUIDGen(), 1, 3, rapid.ID).Draw(t, "GPUs")
		return drawRecord(t, gpus, maxEntries, math.MaxUint32)
	})
}

// RecordGenOn is [RecordGen] over the given GPU UUIDs, with MIG UUIDs from
// a pool of a few per entry position, so that records drawn for different
// pods of one node claim the same GPUs, overlapping placements, the same
// MIG UUIDs and the same GPU instance IDs now and then: what a test of
// conflict detection between pods needs. Each record is valid on its own.
func RecordGenOn(gpus []string, maxEntries int) *rapid.Generator[Record] {
	if maxEntries <= 0 {
		maxEntries = 6
	}
	gpus = slices.Clone(gpus)
	return rapid.Custom(func(t *rapid.T) Record { return drawRecord(t, gpus, maxEntries, 3) })
}

// drawRecord draws a record over gpus; MIG UUIDs vary in up to migSpread+1
// values per entry position.
func drawRecord(t *rapid.T, gpus []string, maxEntries int, migSpread uint32) Record {
	var r Record
	taken := map[string]uint64{}
	gis := map[string]map[uint32]bool{}
	total := 0
	for c := range rapid.IntRange(1, 3).Draw(t, "containers") {
		n := rapid.IntRange(0, min(3, maxEntries-total)).Draw(t, "devices")
		r.DeviceRequests = append(r.DeviceRequests, n)
		for d := range n {
			gpu := rapid.SampledFrom(gpus).Draw(t, "gpu")
			pl, ok := freePlacement(t, taken[gpu])
			if !ok {
				r.DeviceRequests[c] = d
				break
			}
			total++
			taken[gpu] |= pl.Mask()
			a := reservation.Allocation{ContainerIndex: c, DeviceIndex: d, GPUUUID: gpu,
				Profile: rapid.SampledFrom(profileNames).Draw(t, "profile"), Placement: pl}
			if rapid.Bool().Draw(t, "realized") {
				a = a.WithRuntime(runtimeFor(t, len(r.Allocations), gis, gpu, migSpread))
			}
			r.Allocations = append(r.Allocations, a)
		}
	}
	if len(r.Allocations) > 1 {
		order := rapid.Permutation(indexes(len(r.Allocations))).Draw(t, "array order")
		shuffled := make([]reservation.Allocation, len(order))
		for i, k := range order {
			shuffled[i] = r.Allocations[k]
		}
		r.Allocations = shuffled
	}
	return r
}

// freePlacement draws a placement of size 1..8 that does not overlap used,
// starting at the drawn start or the first free one after it.
func freePlacement(t *rapid.T, used uint64) (capability.Placement, bool) {
	size := uint32(rapid.SampledFrom([]int{1, 2, 3, 4, 8}).Draw(t, "size"))
	first := uint32(rapid.IntRange(0, 15).Draw(t, "start"))
	for s := first; s+size <= capability.MaxSlots; s++ {
		p := capability.Placement{Start: s, Size: size}
		if p.Mask()&used == 0 {
			return p, true
		}
	}
	return capability.Placement{}, false
}

var ids = []uint32{0, 1, 2, 3, 7, 13, math.MaxUint32}

// runtimeFor draws a runtime identity: a MIG UUID made unique by the entry
// number, a GPU instance ID not yet used on gpu, any compute instance ID.
func runtimeFor(t *rapid.T, k int, gis map[string]map[uint32]bool, gpu string, migSpread uint32) reservation.RuntimeIdentity {
	if gis[gpu] == nil {
		gis[gpu] = map[uint32]bool{}
	}
	gi := rapid.SampledFrom(ids).Draw(t, "gpu instance id")
	for gis[gpu][gi] {
		gi++
	}
	gis[gpu][gi] = true
	h := rapid.Uint32Range(0, migSpread).Draw(t, "mig uuid")
	return reservation.RuntimeIdentity{
		MIGUUID:           fmt.Sprintf("MIG-%08x-%04x-4000-8000-%012x", h, k, k),
		GPUInstanceID:     gi,
		ComputeInstanceID: rapid.SampledFrom(ids).Draw(t, "compute instance id"),
	}
}
