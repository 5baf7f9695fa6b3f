package fakehal

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// Compile-time conformance.
var (
	_ realize.Realizer        = (*Node)(nil)
	_ realize.MIGModeSetter   = (*Node)(nil)
	_ realize.HealthWatcher   = (*Node)(nil)
	_ capability.HardwareView = (*Node)(nil)
)

// DefaultModel is the model of the single GPU a zero [Options] builds.
const DefaultModel = "NVIDIA A100-SXM4-40GB"

// Options configures a [Node]. The zero value builds one MIG-enabled
// A100-SXM4-40GB with seed 0.
type Options struct {
	// GPUs names the model of each GPU in NVML index order, by Model.Name
	// or one of its aliases (case-insensitive). Nil means one
	// [DefaultModel]; an empty non-nil slice builds a node without GPUs.
	// [Repeat] builds the usual "8 x model" node.
	GPUs []string
	// Models are custom models looked up, by Name and Aliases, before the
	// built-in ones, for tests that need an unusual profile table.
	Models []Model
	// Seed makes the GPU and MIG UUIDs: equal seeds, GPUs and call
	// sequences give equal UUIDs. Zero is a valid seed.
	Seed uint64
	// MIGDisabled starts every GPU with MIG mode disabled.
	MIGDisabled bool
	// ModeChangeNeedsReset makes every MIG mode change stay pending until
	// [Node.ResetGPU], as on GPUs that cannot switch without a reset.
	// Otherwise a change on a GPU without processes applies at once.
	ModeChangeNeedsReset bool
	// Driver is the driver generation whose profile tables the GPUs
	// report, for models whose tables differ between drivers (see
	// [Model.Older]). The zero value is [DriverCurrent].
	Driver Driver
}

// Repeat returns n copies of model, for [Options.GPUs].
func Repeat(n int, model string) []string {
	out := make([]string, max(n, 0))
	for i := range out {
		out[i] = model
	}
	return out
}

// Node is an in-memory node of MIG-capable GPUs: the hardware itself, not a
// client of it. Its state outlives any manager built over it, which is how
// tests model a device-plugin restart. It implements [realize.Realizer],
// [realize.MIGModeSetter] and [capability.HardwareView]. A Node is safe for
// concurrent use; see the package documentation for its rules.
type Node struct {
	seed       uint64
	needsReset bool
	mu         sync.Mutex
	gpus       []*gpuState
	procs      []*process // live processes, in start order
	nextPID    uint32
	calls      map[Op]int
	faults     []*Injected
	health     healthHub // open health watches (health.go)
}

type gpuState struct {
	info    capability.DeviceInfo
	model   Model
	width   uint32 // slot grid width
	compute uint32 // compute slices: the largest SliceCount of any profile
	gis     []*gpuInstance
	seq     uint64 // compute instances ever created: feeds MIG UUIDs
	// ghosts are destroyed GIs still listed (Fault.Linger).
	ghosts []ghost
}

// ghost is a destroyed GPU instance a stale listing still shows.
type ghost struct {
	inst     realize.Instance
	listings int // Instances calls left that list it
}

// listGhosts returns the lingering GIs for one listing and counts it.
func (g *gpuState) listGhosts() []realize.Instance {
	var out []realize.Instance
	for i := range g.ghosts {
		out = append(out, g.ghosts[i].inst)
		g.ghosts[i].listings--
	}
	g.ghosts = slices.DeleteFunc(g.ghosts, func(x ghost) bool { return x.listings <= 0 })
	return out
}

type gpuInstance struct {
	id      uint32
	profile capability.GIProfileInfo
	at      capability.Placement
	cis     []*computeInstance
}

type computeInstance struct {
	id      uint32
	profile capability.CIProfileIndex
	slices  uint32
	uuid    string
}

// New builds a node from opts. It fails with [ErrUnknownModel] for a model
// name it cannot resolve and [ErrInvalidModel] for an unusable custom model,
// naming the GPU index.
func New(opts Options) (*Node, error) {
	names := opts.GPUs
	if names == nil {
		names = []string{DefaultModel}
	}
	for i := range opts.Models {
		if err := validateModel(&opts.Models[i]); err != nil {
			return nil, fmt.Errorf("fakehal: Options.Models[%d] %q: %w", i, opts.Models[i].Name, err)
		}
	}
	n := &Node{seed: opts.Seed, needsReset: opts.ModeChangeNeedsReset, nextPID: 1000, calls: map[Op]int{}}
	mode := capability.MIGEnabled
	if opts.MIGDisabled {
		mode = capability.MIGDisabled
	}
	for i, name := range names {
		m, ok := lookup(opts.Models, name)
		if !ok {
			return nil, fmt.Errorf("fakehal: Options.GPUs[%d]: %w %q", i, ErrUnknownModel, name)
		}
		m = m.ForDriver(opts.Driver)
		g := &gpuState{
			info: capability.DeviceInfo{
				Index: i, UUID: "GPU-" + n.uuid("gpu", uint64(i)), Name: m.Name,
				MemoryMB: m.MemoryMB, MIGMode: mode, PendingMIGMode: mode,
			},
			model: m,
			width: m.Width(),
		}
		for _, p := range m.Profiles {
			g.compute = max(g.compute, p.SliceCount)
		}
		n.gpus = append(n.gpus, g)
	}
	return n, nil
}

// MustNew is [New] that panics on error, for tests and examples with
// constant options.
func MustNew(opts Options) *Node {
	n, err := New(opts)
	if err != nil {
		panic(err)
	}
	return n
}

func lookup(custom []Model, name string) (Model, bool) {
	for _, m := range custom {
		if m.matches(name) {
			return m.clone(), true
		}
	}
	return LookupModel(name)
}

// validateModel rejects custom tables no GPU could report.
func validateModel(m *Model) error {
	if len(m.Profiles) == 0 {
		return fmt.Errorf("%w: no profiles", ErrInvalidModel)
	}
	seen := map[capability.GIProfileIndex]bool{}
	for i, p := range m.Profiles {
		switch {
		case p.Index < 0 || p.Index >= capability.GIProfileCount:
			return fmt.Errorf("%w: Profiles[%d]: index %d out of range", ErrInvalidModel, i, p.Index)
		case seen[p.Index]:
			return fmt.Errorf("%w: Profiles[%d]: duplicate index %d", ErrInvalidModel, i, p.Index)
		case p.SliceCount == 0 || p.InstanceCount == 0 || len(p.Placements) == 0:
			return fmt.Errorf("%w: Profiles[%d]: zero slice count, instance count or placements", ErrInvalidModel, i)
		}
		seen[p.Index] = true
		for j, pl := range p.Placements {
			if !pl.Within(capability.MaxSlots) {
				return fmt.Errorf("%w: Profiles[%d].Placements[%d] %v outside a %d-slot grid", ErrInvalidModel, i, j, pl, capability.MaxSlots)
			}
		}
	}
	return nil
}

// uuid derives a deterministic RFC 4122 version-4-shaped UUID from the
// node's seed, a kind and numbers.
func (n *Node) uuid(kind string, parts ...uint64) string {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n.seed)
	h.Write(b[:])
	h.Write([]byte(kind))
	for _, p := range parts {
		binary.LittleEndian.PutUint64(b[:], p)
		h.Write(b[:])
	}
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	s := hex.EncodeToString(u[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// gpu returns GPU index i, or an error naming op. Callers hold n.mu.
func (n *Node) gpu(op Op, i int) (*gpuState, error) {
	if i < 0 || i >= len(n.gpus) {
		return nil, hwErr(op, i, realize.ErrNotFound, ReturnInvalidArgument)
	}
	return n.gpus[i], nil
}

// migEnabledGPU is gpu that also requires MIG mode on, as NVML's GPU
// instance calls do.
func (n *Node) migEnabledGPU(op Op, i int) (*gpuState, error) {
	g, err := n.gpu(op, i)
	if err != nil {
		return nil, err
	}
	if g.info.MIGMode != capability.MIGEnabled {
		return nil, hwErr(op, i, realize.ErrMIGDisabled, ReturnNotSupported)
	}
	return g, nil
}

// Devices lists the node's GPUs in index order.
func (n *Node) Devices(ctx context.Context) ([]capability.DeviceInfo, error) {
	if _, err := n.enter(ctx, OpDevices, -1); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]capability.DeviceInfo, len(n.gpus))
	for i, g := range n.gpus {
		out[i] = g.info
	}
	return out, nil
}

// GIProfiles lists the GPU instance profiles the GPU supports with their
// possible placements, in the model's table order. A GPU whose MIG mode is
// not enabled lists none (and no error), as nvmlhal reports it on drivers
// whose profile queries answer NOT_SUPPORTED there (the strictest case;
// newer drivers answer them with MIG off too), so a caller must not rely
// on a table it could not get from every driver.
func (n *Node) GIProfiles(ctx context.Context, gpu int) ([]capability.GIProfileInfo, error) {
	if _, err := n.enter(ctx, OpGIProfiles, gpu); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	g, err := n.gpu(OpGIProfiles, gpu)
	if err != nil || g.info.MIGMode != capability.MIGEnabled {
		return nil, err
	}
	return g.model.clone().Profiles, nil
}

// Instances lists the GPU's live GPU instances, GIs without compute
// instances included, ordered by placement start. MIG disabled is
// ErrMIGDisabled, as NVML's GetGpuInstances answers NOT_SUPPORTED. A
// Fault with Linger on OpDestroyGI adds destroyed GPU instances to the
// listing for a few calls.
func (n *Node) Instances(ctx context.Context, gpu int) ([]realize.Instance, error) {
	eff, err := n.enter(ctx, OpInstances, gpu)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	g, err := n.migEnabledGPU(OpInstances, gpu)
	var out []realize.Instance
	if err == nil {
		out = append(g.instances(), g.listGhosts()...)
		slices.SortStableFunc(out, func(a, b realize.Instance) int { return cmp.Compare(a.Placement.Start, b.Placement.Start) })
	}
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if eff.crash {
		return nil, hwErr(OpInstances, gpu, nil, ErrCrashed)
	}
	return out, nil
}

func (g *gpuState) instances() []realize.Instance {
	out := make([]realize.Instance, 0, len(g.gis))
	for _, gi := range g.gis {
		out = append(out, gi.instance(g.info.Index))
	}
	return out
}

func (gi *gpuInstance) instance(gpu int) realize.Instance {
	inst := realize.Instance{GPU: gpu, Profile: gi.profile.Index, Placement: gi.at, GIID: gi.id}
	for _, ci := range gi.cis {
		inst.ComputeInstances = append(inst.ComputeInstances, ci.public())
	}
	return inst
}

func (ci *computeInstance) public() realize.ComputeInstance {
	return realize.ComputeInstance{ID: ci.id, Profile: ci.profile, SliceCount: ci.slices, MIGUUID: ci.uuid}
}

// CreateInstance creates a GPU instance of profile at exactly at, then one
// compute instance spanning it. The checks run in NVML's order: unknown
// GPU (ErrNotFound), unsupported profile (ErrNotSupported), MIG disabled
// (ErrMIGDisabled), unpublished placement (ErrInvalidPlacement), then
// overlap, the profile's instance count or the compute-slice budget
// (ErrOccupied). If the compute instance cannot be created the GPU instance
// is destroyed again; if that destroy fails too both errors are joined and
// the GPU instance stays, as it would on hardware.
//
// Faults: OpCreateGI applies before the GPU instance is created, OpCreateCI
// before the compute instance, OpDestroyGI to the rollback destroy.
func (n *Node) CreateInstance(ctx context.Context, gpu int, profile capability.GIProfileIndex, at capability.Placement) (realize.Instance, error) {
	eff, err := n.enter(ctx, OpCreateGI, gpu)
	if err != nil {
		return realize.Instance{}, err
	}
	n.mu.Lock()
	gi, err := n.createGI(OpCreateGI, gpu, profile, at)
	n.mu.Unlock()
	if err != nil {
		return realize.Instance{}, err
	}
	if eff.crash {
		return realize.Instance{}, hwErr(OpCreateGI, gpu, nil, ErrCrashed)
	}
	inst, ciCrash, err := n.createFullCI(ctx, gpu, gi)
	if err != nil {
		// Roll back even when ctx is done: the caller must not be left
		// with a GI it never learnt about.
		if derr := n.DestroyGPUInstance(context.WithoutCancel(ctx), gpu, gi); derr != nil {
			return realize.Instance{}, errors.Join(err, derr)
		}
		return realize.Instance{}, err
	}
	if ciCrash {
		return realize.Instance{}, hwErr(OpCreateCI, gpu, nil, ErrCrashed)
	}
	return inst, nil
}

// createFullCI is the compute-instance half of CreateInstance.
func (n *Node) createFullCI(ctx context.Context, gpu int, giID uint32) (realize.Instance, bool, error) {
	eff, err := n.enter(ctx, OpCreateCI, gpu)
	if err != nil {
		return realize.Instance{}, false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	g, gi, err := n.findGI(OpCreateCI, gpu, giID)
	if err != nil {
		return realize.Instance{}, false, err
	}
	if _, err := n.createCI(OpCreateCI, g, gi, gi.profile.SliceCount); err != nil {
		return realize.Instance{}, false, err
	}
	return gi.instance(gpu), eff.crash, nil
}

// createGI validates and creates a GPU instance. Callers hold n.mu.
func (n *Node) createGI(op Op, gpu int, profile capability.GIProfileIndex, at capability.Placement) (uint32, error) {
	g, err := n.gpu(op, gpu)
	if err != nil {
		return 0, err
	}
	info, ok := g.profile(profile)
	if !ok {
		return 0, hwErr(op, gpu, realize.ErrNotSupported, ReturnNotSupported)
	}
	if g.info.MIGMode != capability.MIGEnabled {
		return 0, hwErr(op, gpu, realize.ErrMIGDisabled, ReturnNotSupported)
	}
	if !slices.Contains(info.Placements, at) {
		return 0, hwErr(op, gpu, realize.ErrInvalidPlacement, ReturnInvalidArgument)
	}
	var sameProfile, usedSlices uint32
	for _, other := range g.gis {
		if other.at.Overlaps(at) {
			return 0, hwErr(op, gpu, realize.ErrOccupied, ReturnInsufficientResources)
		}
		if other.profile.Index == profile {
			sameProfile++
		}
		usedSlices += other.profile.SliceCount
	}
	if sameProfile >= info.InstanceCount || usedSlices+info.SliceCount > g.compute {
		return 0, hwErr(op, gpu, realize.ErrOccupied, ReturnInsufficientResources)
	}
	if !g.enginesFree(profile) {
		// The driver gives the same code for taken media engines as for an
		// occupied range.
		return 0, hwErr(op, gpu, realize.ErrOccupied, ReturnInsufficientResources)
	}
	gi := &gpuInstance{id: g.giID(at), profile: info, at: at}
	g.gis = append(g.gis, gi)
	slices.SortFunc(g.gis, func(a, b *gpuInstance) int { return cmp.Compare(a.at.Start, b.at.Start) })
	return gi.id, nil
}

func (g *gpuState) profile(idx capability.GIProfileIndex) (capability.GIProfileInfo, bool) {
	for _, p := range g.model.Profiles {
		if p.Index == idx {
			p.Placements = slices.Clone(p.Placements)
			return p, true
		}
	}
	return capability.GIProfileInfo{}, false
}

// enginesFree reports whether the media engines a new GPU instance of
// profile would take are still free. Callers hold n.mu.
func (g *gpuState) enginesFree(profile capability.GIProfileIndex) bool {
	if g.model.ProfileEngines == nil {
		return true
	}
	use := g.model.EnginesOf(profile)
	for _, gi := range g.gis {
		use = use.Add(g.model.EnginesOf(gi.profile.Index))
	}
	return use.Within(g.model.Engines)
}

// giID assigns a GPU instance ID as the driver does: the node of the binary
// tree over the slot grid that the placement covers. On the 8-slot parts
// the driver numbers the upper half first within each level (A100: 7g 0,
// 3g/4g [4,8) 1 and [0,4) 2, 2g [4,6) 3 .. [2,4) 6, 1g [4,5) 7 .. [3,4)
// 14); other grids are numbered in slot order, which is not confirmed. A
// placement that is not a tree node, or whose node is taken, gets the
// lowest free ID.
func (g *gpuState) giID(at capability.Placement) uint32 {
	if id, ok := treeNode(g.width, at); ok && !g.giIDUsed(id) {
		return id
	}
	var id uint32
	for g.giIDUsed(id) {
		id++
	}
	return id
}

func treeNode(width uint32, at capability.Placement) (uint32, bool) {
	for level := uint32(0); level < 6 && width%(1<<level) == 0; level++ {
		size := width >> level
		if size == at.Size && at.Start%size == 0 {
			pos := at.Start / size
			if width == 8 && level > 0 {
				pos ^= 1 << (level - 1) // upper half first, as the driver does
			}
			return (1 << level) - 1 + pos, true
		}
	}
	return 0, false
}

func (g *gpuState) giIDUsed(id uint32) bool {
	return slices.ContainsFunc(g.gis, func(gi *gpuInstance) bool { return gi.id == id })
}

// createCI adds a compute instance of slices compute slices to gi, with
// the lowest free CI ID. Callers hold n.mu.
func (n *Node) createCI(op Op, g *gpuState, gi *gpuInstance, slices uint32) (*computeInstance, error) {
	prof, ok := capability.FullCIProfileIndex(slices)
	if !ok || slices > gi.profile.SliceCount {
		return nil, hwErr(op, g.info.Index, realize.ErrNotSupported, ReturnNotSupported)
	}
	var used uint32
	for _, ci := range gi.cis {
		used += ci.slices
	}
	if used+slices > gi.profile.SliceCount {
		return nil, hwErr(op, g.info.Index, realize.ErrOccupied, ReturnInsufficientResources)
	}
	var id uint32
	for gi.ciIDUsed(id) {
		id++
	}
	g.seq++
	ci := &computeInstance{
		id: id, profile: prof, slices: slices,
		uuid: "MIG-" + n.uuid("mig", uint64(g.info.Index), g.seq),
	}
	gi.cis = append(gi.cis, ci)
	sortCIs(gi.cis)
	return ci, nil
}

func sortCIs(cis []*computeInstance) {
	slices.SortFunc(cis, func(a, b *computeInstance) int { return cmp.Compare(a.id, b.id) })
}

func (gi *gpuInstance) ciIDUsed(id uint32) bool {
	return slices.ContainsFunc(gi.cis, func(ci *computeInstance) bool { return ci.id == id })
}

// findGI resolves a live GPU instance. Callers hold n.mu.
func (n *Node) findGI(op Op, gpu int, giID uint32) (*gpuState, *gpuInstance, error) {
	g, err := n.migEnabledGPU(op, gpu)
	if err != nil {
		return nil, nil, err
	}
	for _, gi := range g.gis {
		if gi.id == giID {
			return g, gi, nil
		}
	}
	return nil, nil, hwErr(op, gpu, realize.ErrNotFound, ReturnNotFound)
}

// DestroyComputeInstance destroys compute instance ci of GPU instance gi.
// Processes on it are ErrInUse; a missing GPU, GI or CI is ErrNotFound.
func (n *Node) DestroyComputeInstance(ctx context.Context, gpu int, gi, ci uint32) error {
	eff, err := n.enter(ctx, OpDestroyCI, gpu)
	if err != nil {
		return err
	}
	n.mu.Lock()
	err = n.destroyCI(OpDestroyCI, gpu, gi, ci)
	n.mu.Unlock()
	if err == nil && eff.crash {
		return hwErr(OpDestroyCI, gpu, nil, ErrCrashed)
	}
	return err
}

func (n *Node) destroyCI(op Op, gpu int, giID, ciID uint32) error {
	_, gi, err := n.findGI(op, gpu, giID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(gi.cis, func(c *computeInstance) bool { return c.id == ciID })
	if i < 0 {
		return hwErr(op, gpu, realize.ErrNotFound, ReturnNotFound)
	}
	if n.processesOn(gpu, gi.cis[i].uuid) > 0 {
		return hwErr(op, gpu, realize.ErrInUse, ReturnInUse)
	}
	gi.cis = slices.Delete(gi.cis, i, i+1)
	return nil
}

// DestroyGPUInstance destroys GPU instance gi. Live compute instances or
// processes are ErrInUse; a missing GPU or GI is ErrNotFound.
func (n *Node) DestroyGPUInstance(ctx context.Context, gpu int, gi uint32) error {
	eff, err := n.enter(ctx, OpDestroyGI, gpu)
	if err != nil {
		return err
	}
	n.mu.Lock()
	gone, err := n.destroyGI(OpDestroyGI, gpu, gi)
	if err == nil && eff.linger > 0 {
		n.gpus[gpu].ghosts = append(n.gpus[gpu].ghosts, ghost{inst: gone, listings: eff.linger})
	}
	n.mu.Unlock()
	if err == nil && eff.crash {
		return hwErr(OpDestroyGI, gpu, nil, ErrCrashed)
	}
	return err
}

// destroyGI destroys a GPU instance without compute instances and returns
// what it was. Callers hold n.mu.
func (n *Node) destroyGI(op Op, gpu int, giID uint32) (realize.Instance, error) {
	g, gi, err := n.findGI(op, gpu, giID)
	if err != nil {
		return realize.Instance{}, err
	}
	if len(gi.cis) > 0 {
		return realize.Instance{}, hwErr(op, gpu, realize.ErrInUse, ReturnInUse)
	}
	g.gis = slices.DeleteFunc(g.gis, func(x *gpuInstance) bool { return x == gi })
	return gi.instance(gpu), nil
}
