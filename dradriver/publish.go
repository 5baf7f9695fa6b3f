package dradriver

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// Names the driver publishes under.
const (
	// DriverName is the DRA driver name: the ResourceSlices' spec.driver,
	// the qualifier of the device attributes, and the kubelet plugin's
	// registration name.
	DriverName = "mig.dynmig.io"
	// DeviceClassName is the DeviceClass deploy/dra defines for the
	// driver's devices.
	DeviceClassName = "mig.dynmig.io"
	// DeviceType is the "type" attribute of every published device.
	DeviceType = "mig"
)

// Counter names in each GPU's counter set.
const (
	// MultiprocessorsCounter holds the SM count of the largest profile
	// of the GPU's full table (what NVML reports, whatever the allowlist
	// publishes); a device consumes its profile's SMs.
	MultiprocessorsCounter = "multiprocessors"
	// OFACounter is the GPU's one optical-flow/JPEG set, which only
	// "+me", "+me.all" and whole-GPU instances take
	// ([placement.Engines]). It is published only on GPUs with such
	// profiles.
	OFACounter = "ofa"
	// DecodersCounter is the decoder budget of GPUs whose full table has
	// "+me.all" profiles ([placement.Grid.EngineBudget] of that table);
	// elsewhere decoders never run out before slots and are not published.
	DecodersCounter = "decoders"
)

// Device attribute and capacity names, qualified by [DriverName].
const (
	AttrType           = "type"           // string: [DeviceType]
	AttrProfile        = "profile"        // string: canonical profile name
	AttrGPUUUID        = "gpuUUID"        // string: the parent GPU's UUID
	AttrGPUIndex       = "gpuIndex"       // int: the parent GPU's NVML index
	AttrModel          = "model"          // string: the GPU's NVML name
	AttrPlacementStart = "placementStart" // int: first memory slot
	AttrPlacementSize  = "placementSize"  // int: memory slots covered
	AttrComputeSlices  = "computeSlices"  // int: G of "<G>g.<M>gb"
	CapMemory          = "memory"         // bytes of the profile's memory
	CapMultiprocessors = "multiprocessors"
)

// slotCounter names the counter of one memory slot.
func slotCounter(slot uint32) string { return "memory-slice-" + strconv.FormatUint(uint64(slot), 10) }

// counterSetName names a GPU's counter set by NVML index. Counter sets are
// only referenced within one publication, so renumbering is harmless.
func counterSetName(index int) string { return "gpu-" + strconv.Itoa(index) }

// ErrNotPublished: a device name decodes, but the node does not publish
// that partition (unknown GPU, a profile the allowlist does not allow, a
// placement the GPU's table does not list).
var ErrNotPublished = errors.New("dradriver: device not published on this node")

// NotPublishedError names a partition [ErrNotPublished] is about.
type NotPublishedError struct {
	Device string
	Reason string
}

func (e *NotPublishedError) Error() string {
	return "dradriver: device " + strconv.Quote(e.Device) + " is not published on this node: " + e.Reason
}

// Unwrap returns [ErrNotPublished].
func (e *NotPublishedError) Unwrap() error { return ErrNotPublished }

// RetainedTaintKey is the key of the NoSchedule device taint on a
// retained device ([PublishedDevice.Retained]): the allocator gives it to
// no new claim (where DRA device taints are enabled) while it still counts
// the slots it takes.
const RetainedTaintKey = DriverName + "/not-allowlisted"

// PublishedDevice is one device of a [Catalog].
type PublishedDevice struct {
	Name      string
	Partition Partition
	GPU       int // NVML index of the GPU
	// Retained is true for a device whose profile the allowlist does not
	// publish but that a claim is allocated or a checkpointed claim
	// holds: it stays published, tainted [RetainedTaintKey], so that the
	// allocator keeps counting its slots until it is released.
	Retained bool
}

// catalogGPU is one publishable GPU.
type catalogGPU struct {
	gpu  capability.GPU
	grid *placement.Grid // the published (allowlisted) table
	full *placement.Grid // the GPU's full table: counters, retained devices
}

// CatalogOptions are [NewCatalogWith]'s inputs besides the GPUs. The zero
// value publishes nothing taken and sizes counters from the published
// tables.
type CatalogOptions struct {
	// Used are the slots taken, keyed by GPU UUID (see [NewCatalog]).
	Used map[string]placement.Occupancy
	// Full are the GPUs' full profile tables, as NVML reports them
	// without allowlist filtering ([capability.GPUFromDevice]), matched
	// by UUID. The counter sets are sized from them (the slots, the SMs
	// and the media engines of the whole GPU), so that narrowing the
	// allowlist never shrinks what fits. A GPU without one, or whose
	// full table lacks a published profile, is sized from its published
	// table, with a finding.
	Full []capability.GPU
	// Retain are allocated or checkpointed partitions. One whose profile
	// the published table lacks but the full table has is published as
	// retained ([PublishedDevice.Retained]).
	Retain []Partition
}

// Catalog is a node's publication: which partitions the driver publishes
// as DRA devices, in which order, and with which counters. It is
// immutable and safe for concurrent use.
//
// Every GPU with profiles becomes a counter set (one counter per memory
// slot, the largest profile's multiprocessors, and engine counters where
// variants need them); every (GPU, profile, published placement) becomes a
// device that consumes its slots, its profile's multiprocessors and its
// engines. An unhealthy GPU keeps its counter set but publishes no
// device, so the allocator places nothing new on it, while claims
// already on it still decode ([Catalog.Lookup]).
type Catalog struct {
	node     string
	gpus     []catalogGPU
	byUUID   map[string]int // GPU UUID -> position in gpus
	devices  []PublishedDevice
	findings []error
	pool     resourceslice.Pool
}

// NewCatalog builds the publication of node's GPUs (as [capability.Discover]
// returns them) while the slots in used are taken (keyed by GPU UUID; nil
// means nothing taken). The order of devices follows
// [placement.PublishOrder] on each GPU under its used slots: the structured
// allocator takes the first free device in slice order that a request's
// selector matches, so a request naming one profile gets the placement
// dynmig's default policy would choose. GPUs are merged per profile by
// (cost, GPU index, start).
//
// A GPU without profiles (MIG off, not allowlisted) is left out; so is one
// whose UUID or profile table cannot be published, with a finding
// ([Catalog.Findings]). NewCatalog fails only for an empty node name. It
// is [NewCatalogWith] with only Used set: counters are sized from the
// published tables.
func NewCatalog(node string, gpus []capability.GPU, used map[string]placement.Occupancy) (*Catalog, error) {
	return NewCatalogWith(node, gpus, CatalogOptions{Used: used})
}

// NewCatalogWith is [NewCatalog] with counters sized from the GPUs' full
// tables and retained devices published ([CatalogOptions]). Retained
// devices follow the others, each profile in its own slices.
func NewCatalogWith(node string, gpus []capability.GPU, opts CatalogOptions) (*Catalog, error) {
	if node == "" {
		return nil, fmt.Errorf("%w: empty node name", ErrConfig)
	}
	c := &Catalog{node: node, byUUID: map[string]int{}}
	for i := range gpus {
		g := gpus[i]
		if len(g.Profiles) == 0 {
			continue
		}
		var full *capability.GPU
		for j := range opts.Full {
			if opts.Full[j].UUID == g.UUID {
				full = &opts.Full[j]
			}
		}
		if err := c.addGPU(g, full); err != nil {
			c.findings = append(c.findings, err)
		}
	}
	c.order(opts.Used)
	c.retain(opts.Retain)
	c.pool = c.buildPool()
	return c, nil
}

func (c *Catalog) addGPU(g capability.GPU, full *capability.GPU) error {
	if !isUUIDName(g.UUID) {
		return fmt.Errorf("dradriver: GPU %d: UUID %q is not \"GPU-\" and a lower-case UUID, so it cannot name devices", g.Index, g.UUID)
	}
	if _, dup := c.byUUID[g.UUID]; dup {
		return fmt.Errorf("dradriver: GPU %d: UUID %s listed twice", g.Index, g.UUID)
	}
	grid, err := placement.NewGrid(&g)
	if err != nil {
		return fmt.Errorf("dradriver: GPU %d (%s): %w", g.Index, g.UUID, err)
	}
	fullGrid := grid
	if full != nil {
		fg, err := fullGridOf(g, full, grid)
		if err != nil {
			c.findings = append(c.findings, fmt.Errorf("dradriver: GPU %d (%s): counters sized from the published table: %w", g.Index, g.UUID, err))
		} else {
			fullGrid = fg
		}
	}
	if fullGrid.Width()+3 > resourceapi.ResourceSliceMaxCountersPerCounterSet {
		return fmt.Errorf("dradriver: GPU %d (%s): %d slots need more counters than a counter set holds", g.Index, g.UUID, fullGrid.Width())
	}
	c.byUUID[g.UUID] = len(c.gpus)
	c.gpus = append(c.gpus, catalogGPU{gpu: g, grid: grid, full: fullGrid})
	return nil
}

// fullGridOf compiles the full table of g, which must hold each of g's
// published profiles, identically.
func fullGridOf(g capability.GPU, full *capability.GPU, grid *placement.Grid) (*placement.Grid, error) {
	f := *full
	f.UUID, f.Index, f.Name = g.UUID, g.Index, g.Name
	var profiles []capability.Profile
	for _, p := range f.Profiles {
		if len(p.Placements) > 0 && !slices.ContainsFunc(profiles, func(q capability.Profile) bool { return q.Name == p.Name }) {
			profiles = append(profiles, p)
		}
	}
	f.Profiles = profiles
	fg, err := placement.NewGrid(&f)
	if err != nil {
		return nil, err
	}
	for _, p := range grid.Profiles() {
		q := fg.Profile(p.Name)
		if q == nil || q.Multiprocessors != p.Multiprocessors || q.MemoryMB != p.MemoryMB || !slices.Equal(q.Placements, p.Placements) {
			return nil, fmt.Errorf("the full table does not hold the published profile %s", p.Name)
		}
	}
	if fg.Width() < grid.Width() {
		return nil, fmt.Errorf("the full table has %d slots, fewer than the published %d", fg.Width(), grid.Width())
	}
	return fg, nil
}

// retain appends the retained devices of parts to c.devices.
func (c *Catalog) retain(parts []Partition) {
	var list []PublishedDevice
	for _, p := range parts {
		i, ok := c.byUUID[p.GPUUUID]
		if !ok {
			continue
		}
		g := c.gpus[i]
		if g.grid.Legal(p.Profile, p.Placement) || !g.full.Legal(p.Profile, p.Placement) {
			continue
		}
		name, err := p.DeviceName()
		if err != nil || slices.ContainsFunc(list, func(d PublishedDevice) bool { return d.Name == name }) {
			continue
		}
		list = append(list, PublishedDevice{Name: name, Partition: p, GPU: g.gpu.Index, Retained: true})
	}
	slices.SortFunc(list, func(a, b PublishedDevice) int {
		return cmp.Or(cmp.Compare(a.Partition.Profile, b.Partition.Profile), cmp.Compare(a.GPU, b.GPU),
			cmp.Compare(a.Partition.Placement.Start, b.Partition.Placement.Start))
	})
	c.devices = append(c.devices, list...)
}

func isUUIDName(s string) bool {
	u, ok := cutGPUPrefix(s)
	return ok && isUUID(u)
}

func cutGPUPrefix(s string) (string, bool) {
	if len(s) < len(gpuPrefix) || s[:len(gpuPrefix)] != gpuPrefix {
		return "", false
	}
	return s[len(gpuPrefix):], true
}

// ordered is a device with its sort keys.
type ordered struct {
	dev         PublishedDevice
	profileRank int
	cost        int64
}

// order fills c.devices in publication order.
func (c *Catalog) order(used map[string]placement.Occupancy) {
	var all []capability.Profile
	for _, g := range c.gpus {
		for _, p := range g.grid.Profiles() {
			if !slices.ContainsFunc(all, func(q capability.Profile) bool { return q.Name == p.Name }) {
				all = append(all, p)
			}
		}
	}
	capability.SortProfiles(all)
	rank := make(map[string]int, len(all))
	for i, p := range all {
		rank[p.Name] = i
	}
	var list []ordered
	for _, g := range c.gpus {
		if g.gpu.Unhealthy {
			continue
		}
		for _, pp := range publishOrder(&g.gpu, g.grid, used[g.gpu.UUID]) {
			part := Partition{GPUUUID: g.gpu.UUID, Profile: pp.Profile, Placement: pp.Placement}
			name, err := part.DeviceName()
			if err != nil {
				c.findings = append(c.findings, fmt.Errorf("dradriver: GPU %d: %w", g.gpu.Index, err))
				continue
			}
			list = append(list, ordered{
				dev:         PublishedDevice{Name: name, Partition: part, GPU: g.gpu.Index},
				profileRank: rank[pp.Profile],
				cost:        pp.Cost,
			})
		}
	}
	slices.SortStableFunc(list, func(a, b ordered) int {
		return cmp.Or(
			cmp.Compare(a.profileRank, b.profileRank),
			cmp.Compare(a.cost, b.cost),
			cmp.Compare(a.dev.GPU, b.dev.GPU),
			cmp.Compare(a.dev.Partition.Placement.Start, b.dev.Partition.Placement.Start),
			cmp.Compare(a.dev.Partition.Placement.Size, b.dev.Partition.Placement.Size),
		)
	})
	c.devices = make([]PublishedDevice, len(list))
	for i := range list {
		c.devices[i] = list[i].dev
	}
}

// publishOrder is [placement.PublishOrder], or (profile, start) order with
// cost 0 when the grid's table is one PublishOrder rejects (NewGrid
// accepted it, so that does not happen).
func publishOrder(g *capability.GPU, grid *placement.Grid, used placement.Occupancy) []placement.PublishedPlacement {
	if pps, err := placement.PublishOrder(g, used); err == nil {
		return pps
	}
	var out []placement.PublishedPlacement
	for _, p := range grid.Profiles() {
		for _, pl := range p.Placements {
			out = append(out, placement.PublishedPlacement{Profile: p.Name, Placement: pl})
		}
	}
	return out
}

// Node returns the node name, which is also the pool name.
func (c *Catalog) Node() string { return c.node }

// Devices returns the published devices in publication order. The caller
// must not modify the slice.
func (c *Catalog) Devices() []PublishedDevice { return c.devices }

// Findings returns what NewCatalog left out and why.
func (c *Catalog) Findings() []error { return c.findings }

// GPU returns the catalog's GPU with the given UUID.
func (c *Catalog) GPU(uuid string) (capability.GPU, bool) {
	i, ok := c.byUUID[uuid]
	if !ok {
		return capability.GPU{}, false
	}
	return c.gpus[i].gpu, true
}

// Lookup decodes a device name of this driver and checks that the node
// publishes it: the GPU is one of the catalog's (healthy or not), and the
// profile and placement are in its table. A malformed name is a
// [*DeviceNameError]; a well-formed one the node does not publish is a
// [*NotPublishedError]. The partition is returned whenever the name
// decodes.
func (c *Catalog) Lookup(name string) (Partition, capability.GPU, error) {
	p, err := ParseDeviceName(name)
	if err != nil {
		return Partition{}, capability.GPU{}, err
	}
	i, ok := c.byUUID[p.GPUUUID]
	if !ok {
		return p, capability.GPU{}, &NotPublishedError{Device: name, Reason: "unknown GPU"}
	}
	g := c.gpus[i]
	if !g.grid.Legal(p.Profile, p.Placement) {
		reason := "profile or placement not in the GPU's published table"
		if c.isRetained(name) {
			reason = "profile no longer allowlisted: published, retained, only while allocated or prepared"
		}
		return p, g.gpu, &NotPublishedError{Device: name, Reason: reason}
	}
	return p, g.gpu, nil
}

func (c *Catalog) isRetained(name string) bool {
	return slices.ContainsFunc(c.devices, func(d PublishedDevice) bool { return d.Retained && d.Name == name })
}

// Resources returns the publication for the kubelet plugin's
// PublishResources: one pool named after the node, with counter slices
// first, then one device slice per profile (split only past
// [resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures] devices), in
// publication order. A request's selector names one profile, and the
// order of devices holds within a slice whatever order kube-scheduler
// lists the pool's slices in, so every GPU's devices of a profile share a
// slice. The caller may modify the result.
func (c *Catalog) Resources() resourceslice.DriverResources {
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{c.node: *c.pool.DeepCopy()}}
}

// ResourceSlices returns the ResourceSlice objects the publication
// becomes, named so that their lexical order is their publication order,
// as the kubelet plugin's slice controller names them. Tests hand them to
// the structured allocator.
func (c *Catalog) ResourceSlices() []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(c.pool.Slices))
	node := c.node
	for i, s := range c.pool.Slices {
		out[i] = &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%04x-%s-%s", i, DriverName, c.node)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         DriverName,
				Pool:           resourceapi.ResourcePool{Name: c.node, Generation: 1, ResourceSliceCount: int64(len(c.pool.Slices))},
				NodeName:       &node,
				Devices:        slices.Clone(s.Devices),
				SharedCounters: slices.Clone(s.SharedCounters),
			},
		}
	}
	return out
}

func (c *Catalog) buildPool() resourceslice.Pool {
	var pool resourceslice.Pool
	for i, g := range c.gpus {
		if i%resourceapi.ResourceSliceMaxCounterSets == 0 {
			pool.Slices = append(pool.Slices, resourceslice.Slice{})
		}
		s := &pool.Slices[len(pool.Slices)-1]
		s.SharedCounters = append(s.SharedCounters, counterSet(g))
	}
	var cur *resourceslice.Slice
	profile := ""
	for _, d := range c.devices {
		key := d.Partition.Profile
		if d.Retained {
			key = "retained " + key
		}
		if cur == nil || len(cur.Devices) == resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures || key != profile {
			profile = key
			pool.Slices = append(pool.Slices, resourceslice.Slice{})
			cur = &pool.Slices[len(pool.Slices)-1]
		}
		g := c.gpus[c.byUUID[d.Partition.GPUUUID]]
		cur.Devices = append(cur.Devices, device(g, d))
	}
	return pool
}

func one() resourceapi.Counter { return resourceapi.Counter{Value: resource.MustParse("1")} }

func count(n int64) resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(n, resource.DecimalSI)}
}

// engineCounters reports which engine counters the GPU's set needs: those
// its full table's profiles take.
func engineCounters(g catalogGPU) (ofa, decoders bool) {
	decoders = g.full.EngineBudget().Decoders > 0
	for _, p := range g.full.Profiles() {
		if g.full.EnginesOf(p.Name).OFA > 0 && p.Placements != nil && !isWhole(g.full, p) {
			ofa = true
		}
	}
	return ofa, decoders
}

// isWhole reports whether every placement of p covers the whole grid: its
// slots already exclude everything else, so it needs no engine counter.
func isWhole(grid *placement.Grid, p capability.Profile) bool {
	for _, pl := range p.Placements {
		if pl.Size < grid.Width() {
			return false
		}
	}
	return true
}

// counterSet is the GPU's counter set, sized from its full table: one
// counter per slot, the largest profile's SMs (the whole GPU's), and the
// whole GPU's media engines where profiles need them.
func counterSet(g catalogGPU) resourceapi.CounterSet {
	cs := resourceapi.CounterSet{Name: counterSetName(g.gpu.Index), Counters: map[string]resourceapi.Counter{}}
	for s := range g.full.Width() {
		cs.Counters[slotCounter(s)] = one()
	}
	var sms uint32
	for _, p := range g.full.Profiles() {
		sms = max(sms, p.Multiprocessors)
	}
	if sms > 0 {
		cs.Counters[MultiprocessorsCounter] = count(int64(sms))
	}
	ofa, dec := engineCounters(g)
	budget := g.full.EngineBudget()
	if ofa {
		cs.Counters[OFACounter] = count(int64(budget.OFA))
	}
	if dec {
		cs.Counters[DecodersCounter] = count(int64(budget.Decoders))
	}
	return cs
}

func attrString(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &s}
}

func attrInt(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }

func device(g catalogGPU, d PublishedDevice) resourceapi.Device {
	p := g.full.Profile(d.Partition.Profile)
	pl := d.Partition.Placement
	counters := map[string]resourceapi.Counter{}
	for s := pl.Start; s < pl.End(); s++ {
		counters[slotCounter(s)] = one()
	}
	if p.Multiprocessors > 0 {
		counters[MultiprocessorsCounter] = count(int64(p.Multiprocessors))
	}
	ofa, dec := engineCounters(g)
	eng := g.full.EnginesOf(p.Name)
	if ofa && eng.OFA > 0 {
		counters[OFACounter] = count(int64(eng.OFA))
	}
	if dec && eng.Decoders > 0 {
		counters[DecodersCounter] = count(int64(eng.Decoders))
	}
	var compute int64
	if pn, err := capability.ParseProfileName(p.Name); err == nil {
		compute = int64(pn.Compute)
	}
	out := resourceapi.Device{
		Name: d.Name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:           attrString(DeviceType),
			AttrProfile:        attrString(p.Name),
			AttrGPUUUID:        attrString(g.gpu.UUID),
			AttrGPUIndex:       attrInt(int64(g.gpu.Index)),
			AttrModel:          attrString(g.gpu.Name),
			AttrPlacementStart: attrInt(int64(pl.Start)),
			AttrPlacementSize:  attrInt(int64(pl.Size)),
			AttrComputeSlices:  attrInt(compute),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory:          {Value: *resource.NewQuantity(int64(p.MemoryMB)<<20, resource.BinarySI)},
			CapMultiprocessors: {Value: *resource.NewQuantity(int64(p.Multiprocessors), resource.DecimalSI)},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(g.gpu.Index), Counters: counters}},
	}
	if d.Retained {
		out.Taints = []resourceapi.DeviceTaint{{Key: RetainedTaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return out
}
