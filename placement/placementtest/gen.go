package placementtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// Instance is one MIG instance already placed on a GPU: a profile of the
// GPU and one of that profile's published placements. It is comparable.
type Instance struct {
	Profile   string
	Placement capability.Placement
}

// String returns "profile [start,end)".
func (in Instance) String() string { return in.Profile + " " + in.Placement.String() }

// GoString is String, so that rapid's log of drawn values stays short.
func (in Instance) GoString() string { return in.String() }

// Node is a node as an allocator sees it: its GPUs, in position order, and
// per GPU the instances already placed on it. Held has one list per GPU
// (a missing list is an empty GPU). The zero value is a node without GPUs.
type Node struct {
	GPUs []capability.GPU
	Held [][]Instance
}

// HeldOn returns the instances held on GPU position i.
func (n *Node) HeldOn(i int) []Instance {
	if i < len(n.Held) {
		return n.Held[i]
	}
	return nil
}

// Used returns GPU position i's taken slots.
func (n *Node) Used(i int) placement.Occupancy {
	var o placement.Occupancy
	for _, in := range n.HeldOn(i) {
		o = o.Take(in.Placement)
	}
	return o
}

// States compiles the node for [placement.Selector.Select]: one
// [placement.GPUState] per GPU with its grid and taken slots.
func (n *Node) States() ([]placement.GPUState, error) {
	out := make([]placement.GPUState, len(n.GPUs))
	for i := range n.GPUs {
		g, err := placement.NewGrid(&n.GPUs[i])
		if err != nil {
			return nil, err
		}
		out[i] = placement.GPUState{Grid: g, Used: n.Used(i), Engines: n.engines(i, g)}
	}
	return out, nil
}

// engines adds up the media engines of GPU position i's instances.
func (n *Node) engines(i int, g *placement.Grid) placement.Engines {
	var e placement.Engines
	if g == nil {
		return e
	}
	for _, in := range n.HeldOn(i) {
		e = e.Add(g.EnginesOf(in.Profile))
	}
	return e
}

// Clone returns a deep copy of n, so that a check can tell whether an
// allocator changed its input.
func (n Node) Clone() Node {
	c := Node{GPUs: make([]capability.GPU, len(n.GPUs))}
	for i, g := range n.GPUs {
		c.GPUs[i] = cloneGPU(g)
	}
	if n.Held != nil {
		c.Held = make([][]Instance, len(n.Held))
		for i, h := range n.Held {
			c.Held[i] = slices.Clone(h)
		}
	}
	return c
}

func cloneGPU(g capability.GPU) capability.GPU {
	g.Profiles = slices.Clone(g.Profiles)
	for i := range g.Profiles {
		g.Profiles[i].Placements = slices.Clone(g.Profiles[i].Placements)
	}
	return g
}

// String lists every GPU on its own lines: position, UUID, name, width,
// health, profiles with memory and placements, and the held instances.
func (n Node) String() string {
	var b strings.Builder
	for i := range n.GPUs {
		g := &n.GPUs[i]
		fmt.Fprintf(&b, "GPU %d %s %q %d MiB, %d slots", i, g.UUID, g.Name, g.MemoryMB, g.Width())
		if g.Unhealthy {
			b.WriteString(", unhealthy")
		}
		b.WriteString("\n  profiles:")
		for _, p := range g.Profiles {
			fmt.Fprintf(&b, " %s=%dMiB%v", p.Name, p.MemoryMB, placementsString(p.Placements))
		}
		b.WriteString("\n  held: ")
		held := n.HeldOn(i)
		if len(held) == 0 {
			b.WriteString("none")
		}
		for j, in := range held {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(in.String())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// GoString is String, so that rapid's log of drawn values is readable.
func (n Node) GoString() string { return n.String() }

func placementsString(ps []capability.Placement) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return "{" + strings.Join(parts, "") + "}"
}

// FormatRequest describes a pod's demand on one line, for example
// "c0: 2 x 10000MiB; c1: 1 x 3g.20gb; pref [1g]; use-type [A100]".
func FormatRequest(r *placement.Request) string {
	var parts []string
	for i, c := range r.Containers {
		what := c.Memory.String()
		if c.Profile != "" {
			what = c.Profile
		}
		parts = append(parts, fmt.Sprintf("c%d: %d x %s", i, c.Devices, what))
	}
	for _, l := range []struct {
		name string
		v    []string
	}{{"pref", r.Preference}, {"use-uuid", r.UseUUIDs}, {"nouse-uuid", r.NoUseUUIDs}, {"use-type", r.UseTypes}, {"nouse-type", r.NoUseTypes}} {
		if len(l.v) > 0 {
			parts = append(parts, fmt.Sprintf("%s %v", l.name, l.v))
		}
	}
	if len(parts) == 0 {
		return "no devices"
	}
	return strings.Join(parts, "; ")
}

func cloneRequest(r placement.Request) placement.Request {
	r.Containers = slices.Clone(r.Containers)
	r.Preference = slices.Clone(r.Preference)
	r.UseUUIDs = slices.Clone(r.UseUUIDs)
	r.NoUseUUIDs = slices.Clone(r.NoUseUUIDs)
	r.UseTypes = slices.Clone(r.UseTypes)
	r.NoUseTypes = slices.Clone(r.NoUseTypes)
	return r
}

func equalRequest(a, b *placement.Request) bool {
	return slices.Equal(a.Containers, b.Containers) && slices.Equal(a.Preference, b.Preference) &&
		slices.Equal(a.UseUUIDs, b.UseUUIDs) && slices.Equal(a.NoUseUUIDs, b.NoUseUUIDs) &&
		slices.Equal(a.UseTypes, b.UseTypes) && slices.Equal(a.NoUseTypes, b.NoUseTypes)
}

func equalNode(a, b *Node) bool {
	if len(a.GPUs) != len(b.GPUs) || len(a.Held) != len(b.Held) {
		return false
	}
	for i := range a.GPUs {
		x, y := &a.GPUs[i], &b.GPUs[i]
		if x.UUID != y.UUID || x.Index != y.Index || x.Name != y.Name || x.MemoryMB != y.MemoryMB ||
			x.NUMA != y.NUMA || x.MIGMode != y.MIGMode || x.Unhealthy != y.Unhealthy || len(x.Profiles) != len(y.Profiles) {
			return false
		}
		for j := range x.Profiles {
			p, q := &x.Profiles[j], &y.Profiles[j]
			if !slices.Equal(p.Placements, q.Placements) {
				return false
			}
			pp, qq := *p, *q
			pp.Placements, qq.Placements = nil, nil
			if !equalProfileFields(pp, qq) {
				return false
			}
		}
	}
	for i := range a.Held {
		if !slices.Equal(a.Held[i], b.Held[i]) {
			return false
		}
	}
	return true
}

func equalProfileFields(p, q capability.Profile) bool {
	return p.Name == q.Name && p.MemoryMB == q.MemoryMB && p.Core == q.Core && p.SliceCount == q.SliceCount &&
		p.GIProfileIndex == q.GIProfileIndex && p.GIProfileID == q.GIProfileID && p.CIProfileIndex == q.CIProfileIndex &&
		p.Variant == q.Variant && p.MaxInstances == q.MaxInstances && p.Multiprocessors == q.Multiprocessors
}

// UUIDOf is the GPU UUID the generators give the GPU at position i:
// "GPU-<i>", short so that counterexamples stay readable.
func UUIDOf(i int) string { return "GPU-" + strconv.Itoa(i) }

// TableGPU draws the capability of a GPU of one of the real models' tables
// at position index (NVML index index, UUID [UUIDOf]), with every profile
// the table has or only the plain ones (capability.VariantNone), as a
// realistic allowlist publishes them. tables must not be empty; fakehal's
// Tables gives every built-in model at every driver generation.
func TableGPU(index int, tables []capability.ModelTable) *rapid.Generator[capability.GPU] {
	return rapid.Custom(func(t *rapid.T) capability.GPU { return drawTable(t, index, tables) })
}

func drawTable(t *rapid.T, index int, tables []capability.ModelTable) capability.GPU {
	m := tables[rapid.IntRange(0, len(tables)-1).Draw(t, "model")]
	g, _ := capability.GPUFromDevice(capability.DeviceInfo{Index: index, UUID: UUIDOf(index), Name: m.Name,
		MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}, m.Profiles)
	if !rapid.Bool().Draw(t, "variants") {
		g.Profiles = slices.DeleteFunc(g.Profiles, func(p capability.Profile) bool { return p.Variant != capability.VariantNone })
	}
	return g
}

// GridWidths are the slot grid widths of the MIG-capable GPUs known today,
// the widths [GridGPU] draws from when given 0.
var GridWidths = []uint32{4, 8, 12}

// GridGPU draws an arbitrary legal profile table on a grid of width slots
// (one of [GridWidths] when width is 0) at position index: profiles of
// sizes 1, 2, 4 (and 3 or 6 on 12 slots) and the whole grid, each at a
// non-empty subset of its aligned starts; two profiles may share a size
// (A100's 3g and 4g both take 4 slots); a size-1 profile may have a +me
// variant; memory grows with size. Now and then a profile has no
// placement (it never fits) and the GPU is unhealthy (placement must not
// choose it). Names are canonical and unique; the GPU compiles with
// [placement.NewGrid].
func GridGPU(index int, width uint32) *rapid.Generator[capability.GPU] {
	return rapid.Custom(func(t *rapid.T) capability.GPU { return drawGrid(t, index, width) })
}

func drawGrid(t *rapid.T, index int, width uint32) capability.GPU {
	w := width
	if w == 0 {
		w = rapid.SampledFrom(GridWidths).Draw(t, "width")
	}
	perSlot := uint64(rapid.IntRange(1, 24).Draw(t, "GiB per slot")) * 1024
	sizes := []uint32{1, 2}
	switch {
	case w == 12:
		sizes = append(sizes, 3, 4, 6)
	case w >= 4:
		sizes = append(sizes, 4)
	}
	sizes = append(sizes, w)
	sizes = slices.Compact(sizes)
	g := capability.GPU{Index: index, UUID: UUIDOf(index), Name: fmt.Sprintf("Grid%d-%dGB", w, perSlot*uint64(w)/1024),
		MemoryMB: perSlot * uint64(w), MIGMode: capability.MIGEnabled}
	names := map[string]bool{}
	for _, size := range sizes {
		if size != w && !rapid.Bool().Draw(t, fmt.Sprintf("size %d", size)) {
			continue
		}
		for k := range rapid.IntRange(1, 2).Draw(t, "profiles of the size") {
			p, ok := gridProfile(t, size, w, perSlot, k, names)
			if !ok {
				continue
			}
			g.Profiles = append(g.Profiles, p)
			if size == 1 && rapid.IntRange(0, 3).Draw(t, "+me variant") == 0 {
				v := p
				v.Name += capability.VariantME.Suffix()
				v.Variant = capability.VariantME
				v.Placements = slices.Clone(p.Placements[:1+rapid.IntRange(0, len(p.Placements)-1).Draw(t, "+me placements")])
				if !names[v.Name] {
					names[v.Name] = true
					g.Profiles = append(g.Profiles, v)
				}
			}
		}
	}
	if len(g.Profiles) > 1 && rapid.IntRange(0, 9).Draw(t, "profile without placements") == 0 {
		// Never the whole-grid profile: it defines the width.
		i := rapid.IntRange(0, len(g.Profiles)-1).Draw(t, "placementless profile")
		if g.Profiles[i].Placements[0].Size != w {
			g.Profiles[i].Placements = nil
		}
	}
	g.Unhealthy = rapid.IntRange(0, 9).Draw(t, "unhealthy") == 0
	capability.SortProfiles(g.Profiles)
	return g
}

// gridProfile builds the k-th profile of a size: compute slices grow with
// the size and the memory is the size's share less a little (the full
// profile holds slightly less than the board).
func gridProfile(t *rapid.T, size, width uint32, perSlot uint64, k int, names map[string]bool) (capability.Profile, bool) {
	compute := min(max(size*7/width, 1)+uint32(k), 8)
	if size == width {
		compute = min(7+uint32(k), 8)
	}
	mem := perSlot*uint64(size) - uint64(rapid.IntRange(0, 3).Draw(t, "memory shortfall"))*128
	name := capability.ProfileName{Compute: compute, MemoryGB: uint32(max(1, (mem+512)/1024))}.String()
	if names[name] {
		return capability.Profile{}, false
	}
	names[name] = true
	var starts []capability.Placement
	for s := uint32(0); s+size <= width; s += size {
		starts = append(starts, capability.Placement{Start: s, Size: size})
	}
	var pls []capability.Placement
	for i, p := range starts {
		if i == 0 || rapid.IntRange(0, 4).Draw(t, "drop placement") != 0 {
			pls = append(pls, p)
		}
	}
	ci, _ := capability.FullCIProfileIndex(compute)
	return capability.Profile{Name: name, MemoryMB: mem, Core: min(compute*100/7, 100), SliceCount: compute,
		Placements: pls, CIProfileIndex: ci, MaxInstances: uint32(len(pls))}, true
}

// GPU draws either a real model's table ([TableGPU]) or an arbitrary
// legal grid ([GridGPU]) at position index; with no tables, always a grid.
func GPU(index int, tables []capability.ModelTable) *rapid.Generator[capability.GPU] {
	return rapid.Custom(func(t *rapid.T) capability.GPU { return drawGPU(t, index, tables) })
}

func drawGPU(t *rapid.T, index int, tables []capability.ModelTable) capability.GPU {
	if len(tables) > 0 && rapid.Bool().Draw(t, "real model") {
		return drawTable(t, index, tables)
	}
	return drawGrid(t, index, 0)
}

// Occupied draws the instances held on g, reachable by construction: up to
// maxInstances times a profile and one of its published placements are
// drawn and kept when the placement is free and the GPU's media engines
// allow the instance (see [placement.Engines]).
func Occupied(g capability.GPU, maxInstances int) *rapid.Generator[[]Instance] {
	return rapid.Custom(func(t *rapid.T) []Instance { return drawOccupied(t, g, maxInstances) })
}

func drawOccupied(t *rapid.T, g capability.GPU, maxInstances int) []Instance {
	grid, _ := placement.NewGrid(&g)
	var held []Instance
	var used placement.Occupancy
	var eng placement.Engines
	var placeable []int
	for i, p := range g.Profiles {
		if len(p.Placements) > 0 {
			placeable = append(placeable, i)
		}
	}
	if len(placeable) == 0 {
		return nil
	}
	for range rapid.IntRange(0, maxInstances).Draw(t, "instances") {
		p := &g.Profiles[rapid.SampledFrom(placeable).Draw(t, "held profile")]
		pl := p.Placements[rapid.IntRange(0, len(p.Placements)-1).Draw(t, "held placement")]
		if used.Fits(pl) && (grid == nil || grid.EnginesFit(eng, p.Name)) {
			used = used.Take(pl)
			if grid != nil {
				eng = eng.Add(grid.EnginesOf(p.Name))
			}
			held = append(held, Instance{Profile: p.Name, Placement: pl})
		}
	}
	return held
}

// NodeGen draws a node of 1..maxGPUs GPUs (0 means 3), each from [GPU]
// over tables, with
// a reachable occupancy of a few instances per GPU ([Occupied]). When
// sameModel is drawn true every GPU copies the first one's table, as on
// most real nodes.
func NodeGen(maxGPUs int, tables []capability.ModelTable) *rapid.Generator[Node] {
	if maxGPUs <= 0 {
		maxGPUs = 3
	}
	return rapid.Custom(func(t *rapid.T) Node { return drawNode(t, maxGPUs, tables) })
}

func drawNode(t *rapid.T, maxGPUs int, tables []capability.ModelTable) Node {
	n := rapid.IntRange(1, maxGPUs).Draw(t, "GPUs")
	var node Node
	same := rapid.Bool().Draw(t, "same model")
	for i := range n {
		var g capability.GPU
		if same && i > 0 {
			g = cloneGPU(node.GPUs[0])
			g.Index, g.UUID = i, UUIDOf(i)
			g.Unhealthy = rapid.IntRange(0, 9).Draw(t, "unhealthy") == 0
		} else {
			g = drawGPU(t, i, tables)
		}
		node.GPUs = append(node.GPUs, g)
		node.Held = append(node.Held, drawOccupied(t, g, 4))
	}
	return node
}

// RequestGen draws a valid pod for node: 1..3 containers of 0..3 devices
// each, at most maxDevices devices in all (0 means 4), each container with
// a MiB demand (often exactly a profile's memory, the boundary that
// matters), a percentage, a whole GPU or an exact profile name (now and
// then one the node lacks), and sometimes a profile preference and UUID
// and type constraints naming the node's GPUs (or none of them).
func RequestGen(node Node, maxDevices int) *rapid.Generator[placement.Request] {
	if maxDevices <= 0 {
		maxDevices = 4
	}
	return rapid.Custom(func(t *rapid.T) placement.Request { return drawRequest(t, node, maxDevices) })
}

func drawRequest(t *rapid.T, node Node, maxDevices int) placement.Request {
	var r placement.Request
	total := 0
	for range rapid.IntRange(1, 3).Draw(t, "containers") {
		c := placement.ContainerRequest{Devices: rapid.IntRange(0, min(3, maxDevices-total)).Draw(t, "devices")}
		total += c.Devices
		switch rapid.IntRange(0, 4).Draw(t, "demand") {
		case 0:
			if p := anyProfile(t, node); p != nil && rapid.Bool().Draw(t, "exact memory") {
				c.Memory = placement.MiB(p.MemoryMB + uint64(rapid.IntRange(0, 1).Draw(t, "plus one")))
			} else {
				c.Memory = placement.MiB(rapid.Uint64Range(1, 200_000).Draw(t, "MiB"))
			}
		case 1:
			c.Memory = placement.Percent(uint32(rapid.IntRange(1, 100).Draw(t, "percent")))
		case 2:
			c.Memory = placement.Memory{}
		case 3:
			if p := anyProfile(t, node); p != nil {
				c.Profile = p.Name
			} else {
				c.Profile = "9g.999gb"
			}
		case 4:
			c.Memory = placement.MiB(uint64(rapid.IntRange(1, 40).Draw(t, "GiB")) * 1024)
		}
		r.Containers = append(r.Containers, c)
	}
	if rapid.IntRange(0, 3).Draw(t, "preference") == 0 {
		r.Preference = rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"1g", "2g", "3g", "4g", "7g", "1g.10gb", "2g.20gb"}), 1, 2, rapid.ID).Draw(t, "prefs")
	}
	uuids := make([]string, 0, len(node.GPUs)+1)
	types := []string{"A100", "H100", "a30", "RTX", "Grid8", "Grid12", "80GB", "B300"}
	for _, g := range node.GPUs {
		uuids = append(uuids, g.UUID)
		types = append(types, g.Name)
	}
	uuids = append(uuids, "GPU-elsewhere")
	constraint := func(label string, from []string) []string {
		if rapid.IntRange(0, 5).Draw(t, label) != 0 {
			return nil
		}
		return rapid.SliceOfNDistinct(rapid.SampledFrom(from), 1, 2, rapid.ID).Draw(t, label+" values")
	}
	r.UseUUIDs = constraint("use-uuid", uuids)
	r.NoUseUUIDs = constraint("nouse-uuid", uuids)
	r.UseTypes = constraint("use-type", types)
	r.NoUseTypes = constraint("nouse-type", types)
	return r
}

func anyProfile(t *rapid.T, node Node) *capability.Profile {
	var ps []*capability.Profile
	for i := range node.GPUs {
		for j := range node.GPUs[i].Profiles {
			ps = append(ps, &node.GPUs[i].Profiles[j])
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return ps[rapid.IntRange(0, len(ps)-1).Draw(t, "profile")]
}

// Case is one input of the property suite: a node and a pod to place on
// it.
type Case struct {
	Node    Node
	Request placement.Request
}

// String shows the node and the pod in a few lines.
func (c Case) String() string {
	return "pod: " + FormatRequest(&c.Request) + "\n" + c.Node.String()
}

// GoString is String, so that rapid's log of a drawn case is readable.
func (c Case) GoString() string { return c.String() }

// CaseGen draws a [Case]: a node from [NodeGen] with opts.MaxGPUs GPUs and a
// pod from [RequestGen] with at most opts.MaxDevices devices.
func CaseGen(opts Options) *rapid.Generator[Case] {
	opts = opts.withDefaults()
	return rapid.Custom(func(t *rapid.T) Case {
		n := drawNode(t, opts.MaxGPUs, opts.Tables)
		return Case{Node: n, Request: drawRequest(t, n, opts.MaxDevices)}
	})
}
