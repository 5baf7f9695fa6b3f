package nvmlmock

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/dynmig/dynmig/fakehal"
)

// noInstance is NVML's GPU/compute instance ID of a process outside MIG.
const noInstance = 0xFFFFFFFF

// procKind is which NVML process list shows a process.
type procKind uint8

const (
	kindCompute  procKind = iota // GetComputeRunningProcesses
	kindGraphics                 // GetGraphicsRunningProcesses
	kindMPS                      // GetMPSComputeRunningProcesses
)

type process struct {
	pid, gi, ci uint32
	kind        procKind
}

// Device is one strict GPU. Identity (UUID, PCI, architecture) comes from
// go-nvml's device; MIG calls are answered here.
type Device struct {
	*server.Device

	srv      *Server
	index    int
	name     string // the NVML name real drivers report
	totalMB  uint64
	slices   uint32
	engines  fakehal.Engines  // media engines of the whole GPU
	limited  bool             // whether GPU instances draw on engines
	profiles map[int]*profile // by GPU instance profile index

	migMode, pendingMode int
	gis                  map[uint32]*GpuInstance // live GPU instances by ID
	migSlots             []*ComputeInstance      // MIG device index -> CI, nil when free
	procs                []process
}

func newDevice(s *Server, index int, base *server.Device, spec modelSpec) *Device {
	d := &Device{
		Device:   base,
		srv:      s,
		index:    index,
		name:     spec.preset.Name,
		totalMB:  spec.preset.MemoryMB,
		slices:   spec.slices,
		engines:  spec.preset.Engines,
		limited:  spec.preset.ProfileEngines != nil,
		profiles: buildProfiles(spec),
		gis:      make(map[uint32]*GpuInstance),
		migSlots: make([]*ComputeInstance, spec.slices),
	}
	if !s.opts.MIGDisabled {
		d.migMode, d.pendingMode = nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE
	}
	return d
}

// profileByID finds a served profile by NVML profile Id (not index).
func (d *Device) profileByID(id uint32) *profile {
	for _, p := range d.profiles {
		if p.info.Id == id {
			return p
		}
	}
	return nil
}

// GetName returns the device name real drivers report ("NVIDIA H200", not
// go-nvml's "NVIDIA H200 141GB HBM3e").
func (d *Device) GetName() (string, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return "", nvml.ERROR_UNINITIALIZED
	}
	return d.name, nvml.SUCCESS
}

// GetUUID returns the GPU UUID.
func (d *Device) GetUUID() (string, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return "", nvml.ERROR_UNINITIALIZED
	}
	return d.UUID, nvml.SUCCESS
}

// GetMemoryInfo reports the model's total memory as NVML does.
func (d *Device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nvml.Memory{}, nvml.ERROR_UNINITIALIZED
	}
	total := d.totalMB << 20
	return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
}

// GetNumaNodeId answers as R550+ drivers do on a GPU whose memory is no
// NUMA node of its own (anything but Grace systems): NOT_SUPPORTED. It is
// not the GPU's CPU affinity, which [Server.Sysfs] gives. With the symbol
// in Options.MissingSymbols it panics, as a call through go-nvml into a
// library without it ends the process.
func (d *Device) GetNumaNodeId() (int, nvml.Return) {
	if d.srv.missing("nvmlDeviceGetNumaNodeId") {
		panic("nvmlmock: call into missing symbol nvmlDeviceGetNumaNodeId")
	}
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return 0, nvml.ERROR_UNINITIALIZED
	}
	return 0, nvml.ERROR_NOT_SUPPORTED
}

// busID is the GPU's PCI bus ID as NVML formats it, with an 8-digit domain.
func (d *Device) busID() string {
	return fmt.Sprintf("00000000:%02x:00.0", 0x07+0x10*d.index)
}

// GetPciInfo reports the GPU's PCI bus ID (go-nvml's mock leaves it
// empty).
func (d *Device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nvml.PciInfo{}, nvml.ERROR_UNINITIALIZED
	}
	info := nvml.PciInfo{Domain: 0, Bus: uint32(0x07 + 0x10*d.index), PciDeviceId: d.Config.PciDeviceId}
	for i, c := range []byte(d.busID()) {
		info.BusId[i] = int8(c)
	}
	return info, nvml.SUCCESS
}

// IsMigDeviceHandle is false for a physical GPU.
func (d *Device) IsMigDeviceHandle() (bool, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return false, nvml.ERROR_UNINITIALIZED
	}
	return false, nvml.SUCCESS
}

// GetMigMode returns the current and pending MIG mode.
func (d *Device) GetMigMode() (int, int, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return 0, 0, nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := d.srv.fault(OpGetMigMode); ok {
		return 0, 0, ret
	}
	return d.migMode, d.pendingMode, nvml.SUCCESS
}

// SetMigMode requests a MIG mode. Disabling with GPU instances alive is
// IN_USE. With processes running, or with Options.ResetRequired, the change
// stays pending and the activation status says why (IN_USE or
// RESET_REQUIRED); otherwise it applies at once.
func (d *Device) SetMigMode(mode int) (nvml.Return, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nvml.ERROR_UNINITIALIZED, nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := d.srv.fault(OpSetMigMode); ok {
		return ret, ret
	}
	if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
		return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
	}
	if mode == nvml.DEVICE_MIG_DISABLE && len(d.gis) > 0 {
		return nvml.ERROR_IN_USE, nvml.ERROR_IN_USE
	}
	d.pendingMode = mode
	switch {
	case len(d.procs) > 0:
		return nvml.ERROR_IN_USE, nvml.SUCCESS
	case d.srv.opts.ResetRequired:
		return nvml.ERROR_RESET_REQUIRED, nvml.SUCCESS
	}
	d.setMode(mode)
	return nvml.SUCCESS, nvml.SUCCESS
}

// setMode applies a mode; turning MIG off drops every instance.
func (d *Device) setMode(mode int) {
	d.migMode, d.pendingMode = mode, mode
	if mode != nvml.DEVICE_MIG_ENABLE {
		for id, g := range d.gis {
			g.drop()
			delete(d.gis, id)
		}
	}
}

// migOn reports whether MIG mode is enabled; d.srv.mu must be held.
func (d *Device) migOn() bool { return d.migMode == nvml.DEVICE_MIG_ENABLE }

// GetGpuInstanceProfileInfo returns the profile at index: INVALID_ARGUMENT
// outside NVML's index range, NOT_SUPPORTED for an index the GPU lacks or
// when MIG mode is off.
func (d *Device) GetGpuInstanceProfileInfo(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	in, ret := d.profileQueryV1(index)
	d.srv.spend(ret, false)
	return in, ret
}

func (d *Device) profileQueryV1(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_UNINITIALIZED
	}
	p, ret := d.profileAt(index)
	if ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, ret
	}
	return p.info, nvml.SUCCESS
}

func (d *Device) profileAt(index int) (*profile, nvml.Return) {
	if index < 0 || index >= nvml.GPU_INSTANCE_PROFILE_COUNT || (d.srv.opts.Driver580 && index >= driver580Indexes) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p := d.profiles[index]
	if p == nil || (!d.migOn() && !d.srv.opts.ProfilesWhileDisabled && !d.srv.opts.Driver580) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return p, nvml.SUCCESS
}

// driver580Indexes is the number of GPU instance profile indexes driver
// 580.159.04 knows: it answers INVALID_ARGUMENT from index 17 (3_SLICE_GFX).
const driver580Indexes = 17

// GetGpuInstanceProfileInfoV2 answers the versioned query with a V2
// struct, with the canonical Name ("MIG 1g.5gb"), as every driver with the
// versioned query does. With Options.NoV3 it is ERROR_FUNCTION_NOT_FOUND,
// as on a driver without the symbol. With Options.Driver580 the Version
// comes back 0, as that driver writes it.
func (d *Device) GetGpuInstanceProfileInfoV2(index int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return) {
	in, ret := d.profileQueryV2(index)
	d.srv.spend(ret, false)
	return in, ret
}

func (d *Device) profileQueryV2(index int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nvml.GpuInstanceProfileInfo_v2{}, nvml.ERROR_UNINITIALIZED
	}
	if d.srv.opts.NoV3 || d.srv.missing("nvmlDeviceGetGpuInstanceProfileInfoV") {
		return nvml.GpuInstanceProfileInfo_v2{}, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	p, ret := d.profileAt(index)
	if ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo_v2{}, ret
	}
	in := p.info
	v2 := nvml.GpuInstanceProfileInfo_v2{
		Version: nvml.STRUCT_VERSION(nvml.GpuInstanceProfileInfo_v2{}, 2), Id: in.Id, IsP2pSupported: in.IsP2pSupported,
		SliceCount: in.SliceCount, InstanceCount: in.InstanceCount, MultiprocessorCount: in.MultiprocessorCount,
		CopyEngineCount: in.CopyEngineCount, DecoderCount: in.DecoderCount, EncoderCount: in.EncoderCount,
		JpegCount: in.JpegCount, OfaCount: in.OfaCount, MemorySizeMB: in.MemorySizeMB, Name: v3Name(p.spec.Name),
	}
	if d.srv.opts.Driver580 {
		v2.Version = 0
	}
	return v2, nvml.SUCCESS
}

// GetGpuInstanceProfileInfoV3 answers the versioned query with a V3
// struct, including the canonical Name ("MIG 1g.5gb"). With Options.NoV3
// it is ERROR_FUNCTION_NOT_FOUND, as on a driver without the symbol.
func (d *Device) GetGpuInstanceProfileInfoV3(index int) (nvml.GpuInstanceProfileInfo_v3, nvml.Return) {
	in, ret := d.profileQueryV3(index)
	d.srv.spend(ret, false)
	return in, ret
}

func (d *Device) profileQueryV3(index int) (nvml.GpuInstanceProfileInfo_v3, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nvml.GpuInstanceProfileInfo_v3{}, nvml.ERROR_UNINITIALIZED
	}
	if d.srv.opts.NoV3 || d.srv.missing("nvmlDeviceGetGpuInstanceProfileInfoV") {
		return nvml.GpuInstanceProfileInfo_v3{}, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	p, ret := d.profileAt(index)
	if ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo_v3{}, ret
	}
	in := p.info
	v3 := nvml.GpuInstanceProfileInfo_v3{
		Version: 3, Id: in.Id, SliceCount: in.SliceCount, InstanceCount: in.InstanceCount,
		MultiprocessorCount: in.MultiprocessorCount, CopyEngineCount: in.CopyEngineCount,
		DecoderCount: in.DecoderCount, EncoderCount: in.EncoderCount, JpegCount: in.JpegCount,
		OfaCount: in.OfaCount, MemorySizeMB: in.MemorySizeMB, Name: v3Name(p.spec.Name),
	}
	if in.IsP2pSupported != 0 {
		v3.Capabilities |= nvml.GPU_INSTANCE_PROFILE_CAPS_P2P
	}
	if strings.HasSuffix(p.spec.Name, "+gfx") {
		v3.Capabilities |= nvml.GPU_INSTANCE_PROFILE_CAPS_GFX
	}
	if d.srv.opts.Driver580 {
		// The driver's V3 bug: the name formatted from V2's offsets
		// (sliceCount at byte 12, V3's instanceCount; memorySizeMB at byte
		// 48, still 0) and written at V2's name offset, byte 56.
		v3.Version = 0
		v3.Name = [96]int8{}
		for i, c := range []byte(fmt.Sprintf("MIG %dg.%dgb", in.InstanceCount, 0)) {
			v3.Name[8+i] = int8(c)
		}
	}
	return v3, nvml.SUCCESS
}

// GetGpuInstancePossiblePlacements lists every legal placement of the
// profile whose Id is info.Id, occupied or not, in any MIG mode.
func (d *Device) GetGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	out, ret := d.possiblePlacements(info)
	d.srv.spend(ret, true)
	return out, ret
}

func (d *Device) possiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p := d.profileByID(info.Id)
	if p == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	out := make([]nvml.GpuInstancePlacement, len(p.placements))
	copy(out, p.placements)
	return out, nvml.SUCCESS
}

// CreateGpuInstance without a placement is refused (NOT_SUPPORTED) by the
// strict mock: the result depends on creation order, and callers must
// create with the exact placement the scheduler chose.
func (d *Device) CreateGpuInstance(*nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
	return nil, nvml.ERROR_NOT_SUPPORTED
}

// CreateGpuInstanceWithPlacement creates a GPU instance as NVML does:
// NOT_SUPPORTED with MIG off; INVALID_ARGUMENT for an unknown profile Id or
// a placement the profile does not list; INSUFFICIENT_RESOURCES when the
// range overlaps a live GPU instance, the profile's instance count is used
// up, the GPU has too few compute slices left, or the media engines the
// profile takes (its DecoderCount, EncoderCount, JpegCount, OfaCount) are
// taken by other GPU instances.
func (d *Device) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := d.srv.fault(OpCreateGpuInstance); ok {
		return nil, ret
	}
	if !d.migOn() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if info == nil || placement == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p := d.profileByID(info.Id)
	if p == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	legal := false
	for _, pl := range p.placements {
		legal = legal || pl == *placement
	}
	if !legal {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var used, same uint32
	engines := p.engines
	for _, g := range d.gis {
		if overlaps(g.placement, *placement) {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		used += g.prof.info.SliceCount
		engines = engines.Add(g.prof.engines)
		if g.prof == p {
			same++
		}
	}
	if same >= p.info.InstanceCount || used+p.info.SliceCount > d.slices {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	if d.limited && !engines.Within(d.engines) {
		// Taken media engines get the code of an occupied range.
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	id := uint32(0)
	for d.gis[id] != nil {
		id++
	}
	g := &GpuInstance{dev: d, id: id, prof: p, placement: *placement, cis: make(map[uint32]*ComputeInstance)}
	d.gis[id] = g
	return g, nvml.SUCCESS
}

func overlaps(a, b nvml.GpuInstancePlacement) bool {
	return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size
}

// GetGpuInstances lists the live GPU instances of the profile whose Id is
// info.Id; NOT_SUPPORTED with MIG off (Options.Driver580: SUCCESS with
// none, as that driver answers).
func (d *Device) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if !d.migOn() && !d.srv.opts.Driver580 {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if info == nil || d.profileByID(info.Id) == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var out []nvml.GpuInstance
	for _, id := range slices.Sorted(maps.Keys(d.gis)) {
		if g := d.gis[id]; g.prof.info.Id == info.Id {
			out = append(out, g)
		}
	}
	return out, nvml.SUCCESS
}

// GetGpuInstanceById returns a live GPU instance; NOT_FOUND when none has
// the ID.
func (d *Device) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if !d.migOn() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if id < 0 {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	g := d.gis[uint32(id)]
	if g == nil {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return g, nvml.SUCCESS
}

// GetMaxMigDeviceCount is the most MIG devices the GPU can have (one per
// compute slice); 0 with MIG off.
func (d *Device) GetMaxMigDeviceCount() (int, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return 0, nvml.ERROR_UNINITIALIZED
	}
	if !d.migOn() {
		return 0, nvml.SUCCESS
	}
	return len(d.migSlots), nvml.SUCCESS
}

// GetMigDeviceHandleByIndex returns the MIG device at index; indexes are
// sparse (NOT_FOUND for a free one) and INVALID_ARGUMENT past the maximum.
func (d *Device) GetMigDeviceHandleByIndex(index int) (nvml.Device, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := d.srv.fault(OpGetMigDeviceHandleByIndex); ok {
		return nil, ret
	}
	if !d.migOn() || index < 0 || index >= len(d.migSlots) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	ci := d.migSlots[index]
	if ci == nil {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return ci.mig, nvml.SUCCESS
}

// GetComputeRunningProcesses lists every compute process on the GPU, with
// GPU and compute instance IDs for those inside MIG devices. Graphics and
// MPS clients are not listed, as in NVML.
func (d *Device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.running(kindCompute)
}

// GetGraphicsRunningProcesses lists the graphics processes on the GPU.
func (d *Device) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.running(kindGraphics)
}

// GetMPSComputeRunningProcesses lists the MPS clients on the GPU.
func (d *Device) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.running(kindMPS)
}

func (d *Device) running(kind procKind) ([]nvml.ProcessInfo, nvml.Return) {
	defer d.srv.mu.Unlock()
	if !d.srv.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := d.srv.fault(OpGetComputeRunningProcs); ok && kind == kindCompute {
		return nil, ret
	}
	return processInfos(d.procs, func(p process) bool { return p.kind == kind }), nvml.SUCCESS
}

func processInfos(procs []process, keep func(process) bool) []nvml.ProcessInfo {
	var out []nvml.ProcessInfo
	for _, p := range procs {
		if keep(p) {
			out = append(out, nvml.ProcessInfo{Pid: p.pid, UsedGpuMemory: 1 << 30, GpuInstanceId: p.gi, ComputeInstanceId: p.ci})
		}
	}
	return out
}

// GpuInstance is a strict GPU instance. Its handle turns invalid
// (INVALID_ARGUMENT) once destroyed.
type GpuInstance struct {
	mock.GpuInstance

	dev       *Device
	id        uint32
	prof      *profile
	placement nvml.GpuInstancePlacement
	cis       map[uint32]*ComputeInstance
	gone      bool
}

// drop invalidates the GI and its CIs (MIG turned off); mu must be held.
func (g *GpuInstance) drop() {
	for _, c := range g.cis {
		c.release()
	}
	g.gone = true
}

// GetInfo returns the GI's parent device, ID, profile Id and placement.
func (g *GpuInstance) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) {
	s := g.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nvml.GpuInstanceInfo{}, nvml.ERROR_UNINITIALIZED
	}
	if g.gone {
		return nvml.GpuInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.GpuInstanceInfo{Device: g.dev, Id: g.id, ProfileId: g.prof.info.Id, Placement: g.placement}, nvml.SUCCESS
}

// GetComputeInstanceProfileInfo returns a CI profile of this GI's profile:
// INVALID_ARGUMENT outside the index range, NOT_SUPPORTED for a profile or
// engine profile the GI does not offer.
func (g *GpuInstance) GetComputeInstanceProfileInfo(profile, engProfile int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	s := g.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_UNINITIALIZED
	}
	if g.gone || profile < 0 || profile >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	ci, ok := g.prof.ci[profile]
	if !ok || engProfile != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return ci, nvml.SUCCESS
}

func (g *GpuInstance) ciProfileByID(id uint32) (nvml.ComputeInstanceProfileInfo, bool) {
	for _, ci := range g.prof.ci {
		if ci.Id == id {
			return ci, true
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, false
}

// CreateComputeInstance creates a CI of the profile whose Id is info.Id:
// INVALID_ARGUMENT for a profile the GI does not offer,
// INSUFFICIENT_RESOURCES when the GI's compute slices or the profile's
// instance count are used up. The CI gets a MIG device with a fresh UUID.
func (g *GpuInstance) CreateComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	s := g.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := s.fault(OpCreateComputeInstance); ok {
		return nil, ret
	}
	if g.gone || info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	prof, ok := g.ciProfileByID(info.Id)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var used, same uint32
	for _, c := range g.cis {
		used += c.prof.SliceCount
		if c.prof.Id == prof.Id {
			same++
		}
	}
	if used+prof.SliceCount > g.prof.info.SliceCount || same >= prof.InstanceCount {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	slot := -1
	for i, c := range g.dev.migSlots {
		if c == nil {
			slot = i
			break
		}
	}
	if slot < 0 {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	id := uint32(0)
	for g.cis[id] != nil {
		id++
	}
	c := &ComputeInstance{gi: g, id: id, prof: prof, slot: slot}
	c.mig = &MIGDevice{ci: c, uuid: s.newMIGUUID(g.dev.index, g.id, id)}
	g.cis[id] = c
	g.dev.migSlots[slot] = c
	return c, nvml.SUCCESS
}

// GetComputeInstances lists the GI's CIs of the profile whose Id is info.Id.
func (g *GpuInstance) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	s := g.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if g.gone || info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var out []nvml.ComputeInstance
	for _, id := range slices.Sorted(maps.Keys(g.cis)) {
		if c := g.cis[id]; c.prof.Id == info.Id {
			out = append(out, c)
		}
	}
	return out, nvml.SUCCESS
}

// GetComputeInstanceById returns a live CI; NOT_FOUND when none has the ID.
func (g *GpuInstance) GetComputeInstanceById(id int) (nvml.ComputeInstance, nvml.Return) {
	s := g.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if g.gone || id < 0 {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	c := g.cis[uint32(id)]
	if c == nil {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return c, nvml.SUCCESS
}

// Destroy destroys the GI: IN_USE while it has compute instances or
// processes, INVALID_ARGUMENT for a handle already destroyed.
func (g *GpuInstance) Destroy() nvml.Return {
	s := g.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := s.fault(OpDestroyGpuInstance); ok {
		return ret
	}
	if g.gone {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if len(g.cis) > 0 {
		return nvml.ERROR_IN_USE
	}
	for _, p := range g.dev.procs {
		if p.gi == g.id {
			return nvml.ERROR_IN_USE
		}
	}
	g.gone = true
	delete(g.dev.gis, g.id)
	return nvml.SUCCESS
}

// ComputeInstance is a strict compute instance with its MIG device.
type ComputeInstance struct {
	mock.ComputeInstance

	gi   *GpuInstance
	id   uint32
	prof nvml.ComputeInstanceProfileInfo
	slot int
	mig  *MIGDevice
	gone bool
}

// release frees the CI's MIG device slot; mu must be held.
func (c *ComputeInstance) release() {
	c.gone = true
	if c.gi.dev.migSlots[c.slot] == c {
		c.gi.dev.migSlots[c.slot] = nil
	}
}

// GetInfo returns the CI's info. Device is the parent GPU, as nvml.h
// documents, or the MIG device with Options.CIInfoDevice.
func (c *ComputeInstance) GetInfo() (nvml.ComputeInstanceInfo, nvml.Return) {
	s := c.gi.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nvml.ComputeInstanceInfo{}, nvml.ERROR_UNINITIALIZED
	}
	if c.gone {
		return nvml.ComputeInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	var dev nvml.Device = c.gi.dev
	if s.opts.CIInfoDevice {
		dev = c.mig
	}
	return nvml.ComputeInstanceInfo{
		Device: dev, GpuInstance: c.gi, Id: c.id, ProfileId: c.prof.Id,
		Placement: nvml.ComputeInstancePlacement{Start: 0, Size: c.prof.SliceCount},
	}, nvml.SUCCESS
}

// Destroy destroys the CI: IN_USE while processes run on it,
// INVALID_ARGUMENT for a handle already destroyed.
func (c *ComputeInstance) Destroy() nvml.Return {
	s := c.gi.dev.srv
	defer s.mu.Unlock()
	if !s.lock() {
		return nvml.ERROR_UNINITIALIZED
	}
	if ret, ok := s.fault(OpDestroyComputeInstance); ok {
		return ret
	}
	if c.gone {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for _, p := range c.gi.dev.procs {
		if p.gi == c.gi.id && p.ci == c.id {
			return nvml.ERROR_IN_USE
		}
	}
	c.release()
	delete(c.gi.cis, c.id)
	return nvml.SUCCESS
}

// MIGDevice is the MIG device handle of one compute instance. It turns
// invalid (INVALID_ARGUMENT) once the compute instance is gone.
type MIGDevice struct {
	mock.Device

	ci   *ComputeInstance
	uuid string
}

func (m *MIGDevice) enter() (nvml.Return, func()) {
	s := m.ci.gi.dev.srv
	if !s.lock() {
		return nvml.ERROR_UNINITIALIZED, s.mu.Unlock
	}
	if m.ci.gone {
		return nvml.ERROR_INVALID_ARGUMENT, s.mu.Unlock
	}
	if ret, ok := s.fault(OpMIGDeviceQuery); ok {
		return ret, s.mu.Unlock
	}
	return nvml.SUCCESS, s.mu.Unlock
}

// GetUUID returns the MIG device UUID ("MIG-...").
func (m *MIGDevice) GetUUID() (string, nvml.Return) {
	ret, unlock := m.enter()
	defer unlock()
	if ret != nvml.SUCCESS {
		return "", ret
	}
	return m.uuid, nvml.SUCCESS
}

// IsMigDeviceHandle is true.
func (m *MIGDevice) IsMigDeviceHandle() (bool, nvml.Return) {
	ret, unlock := m.enter()
	defer unlock()
	return ret == nvml.SUCCESS, ret
}

// GetGpuInstanceId returns the ID of the MIG device's GPU instance.
func (m *MIGDevice) GetGpuInstanceId() (int, nvml.Return) {
	ret, unlock := m.enter()
	defer unlock()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return int(m.ci.gi.id), nvml.SUCCESS
}

// GetComputeInstanceId returns the ID of the MIG device's compute instance.
func (m *MIGDevice) GetComputeInstanceId() (int, nvml.Return) {
	ret, unlock := m.enter()
	defer unlock()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return int(m.ci.id), nvml.SUCCESS
}

// GetDeviceHandleFromMigDeviceHandle returns the parent GPU.
func (m *MIGDevice) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	ret, unlock := m.enter()
	defer unlock()
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return m.ci.gi.dev, nvml.SUCCESS
}

// GetName returns "<GPU name> MIG <profile>", as drivers do.
func (m *MIGDevice) GetName() (string, nvml.Return) {
	ret, unlock := m.enter()
	defer unlock()
	if ret != nvml.SUCCESS {
		return "", ret
	}
	d := m.ci.gi.dev
	return d.name + " MIG " + m.ci.gi.prof.spec.Name, nvml.SUCCESS
}

// GetComputeRunningProcesses lists the compute processes in this MIG
// device.
func (m *MIGDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.running(kindCompute)
}

// GetGraphicsRunningProcesses lists the graphics processes in this MIG
// device.
func (m *MIGDevice) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.running(kindGraphics)
}

// GetMPSComputeRunningProcesses lists the MPS clients in this MIG device.
func (m *MIGDevice) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.running(kindMPS)
}

func (m *MIGDevice) running(kind procKind) ([]nvml.ProcessInfo, nvml.Return) {
	ret, unlock := m.enter()
	defer unlock()
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if ret, ok := m.ci.gi.dev.srv.fault(OpGetComputeRunningProcs); ok && kind == kindCompute {
		return nil, ret
	}
	gi, ci := m.ci.gi.id, m.ci.id
	return processInfos(m.ci.gi.dev.procs, func(p process) bool { return p.kind == kind && p.gi == gi && p.ci == ci }), nvml.SUCCESS
}
