package nvmlhal

import (
	"context"
	"io/fs"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
)

// ProfileInfoV2Device and [ProfileInfoV3Device] are implemented by
// nvml.Device values that answer NVML's versioned GPU instance profile
// query (nvmlDeviceGetGpuInstanceProfileInfoV with a V2 or V3 struct)
// without cgo. go-nvml's GetGpuInstanceProfileInfoV returns a handler bound
// to an unexported library handle, so a test double cannot serve it; the
// strict mocks in package nvmlmock implement these interfaces instead.
// Devices of the real library need not: the backend calls the versioned
// query on them directly.
type ProfileInfoV2Device interface {
	GetGpuInstanceProfileInfoV2(profile int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return)
}

// ProfileInfoV3Device: see [ProfileInfoV2Device].
type ProfileInfoV3Device interface {
	GetGpuInstanceProfileInfoV3(profile int) (nvml.GpuInstanceProfileInfo_v3, nvml.Return)
}

// nvmlPkgPath identifies device handles of go-nvml's cgo library.
var nvmlPkgPath = reflect.TypeFor[nvml.Return]().PkgPath()

// isLibraryDevice reports whether dev is a handle of the real library
// (go-nvml's unexported nvmlDevice), the only kind on which the V3 handler
// may be called: on any other value it would call into an unloaded symbol.
func isLibraryDevice(dev nvml.Device) bool {
	t := reflect.TypeOf(dev)
	return t != nil && t.PkgPath() == nvmlPkgPath && t.Name() == "nvmlDevice"
}

// Devices lists the node's GPUs in NVML index order.
func (b *Backend) Devices(ctx context.Context) ([]capability.DeviceInfo, error) {
	leave, err := b.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	if err := b.ready("DeviceGetCount", -1); err != nil {
		return nil, err
	}
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, hwError("DeviceGetCount", -1, nil, ret)
	}
	out := make([]capability.DeviceInfo, 0, n)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info, err := b.deviceInfo(i)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func (b *Backend) deviceInfo(i int) (capability.DeviceInfo, error) {
	dev, err := b.device("DeviceGetHandleByIndex", i)
	if err != nil {
		return capability.DeviceInfo{}, err
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return capability.DeviceInfo{}, hwError("GetUUID", i, dev, ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return capability.DeviceInfo{}, hwError("GetName", i, dev, ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return capability.DeviceInfo{}, hwError("GetMemoryInfo", i, dev, ret)
	}
	cur, pend, err := migModes("GetMigMode", i, dev)
	if err != nil {
		return capability.DeviceInfo{}, err
	}
	return capability.DeviceInfo{
		Index:          i,
		UUID:           uuid,
		Name:           name,
		MemoryMB:       mem.Total / (1 << 20),
		NUMA:           b.numaNode(i, dev),
		MIGMode:        cur,
		PendingMIGMode: pend,
	}, nil
}

// GIProfiles lists the GPU instance profiles the GPU supports, in profile
// index order, with their possible placements. Profiles are found by
// walking every index NVML defines and skipping those it reports as not
// supported; Index is the key and ID is NVML's opaque profile Id. Name is
// the driver's name from the versioned query (V2 first, see
// [Backend.nameQuery]) without its "MIG " prefix, or "" when the driver
// gives none that agrees with the V1 answer (then
// [capability.DeriveProfileName] names it).
//
// The table is read from NVML once per GPU UUID and driver version and
// kept for the backend's life ([Backend.Inspect] and [Backend.Instances]
// read it too): it cannot change while a driver is loaded.
//
// The queries are made whatever the MIG mode: drivers that answer profile
// and placement queries with MIG off (the non-versioned profile query;
// placements "regardless of whether MIG is enabled", nvml.h) list the
// table, so it can be checked before MIG is turned on; drivers that
// answer NOT_SUPPORTED there list nothing, and no error. [Backend.Devices]
// reports the mode.
func (b *Backend) GIProfiles(ctx context.Context, index int) ([]capability.GIProfileInfo, error) {
	leave, err := b.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	dev, err := b.device("GIProfiles", index)
	if err != nil {
		return nil, err
	}
	var out []capability.GIProfileInfo
	err = b.walkProfiles(index, dev, func(gi capability.GIProfileInfo, _ nvml.GpuInstanceProfileInfo) error {
		out = append(out, gi)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// tableKey identifies a profile table that cannot change: the GPU's UUID
// and the loaded driver's version.
type tableKey struct{ uuid, driver string }

// tableEntry is one GPU instance profile of a table: what discovery
// reports and NVML's raw V1 info. unplaced marks a profile whose placements
// the driver refused: discovery leaves it out, instance listing still asks
// for its instances.
type tableEntry struct {
	gi       capability.GIProfileInfo
	raw      nvml.GpuInstanceProfileInfo
	unplaced bool
}

// walkProfiles calls each for every GPU instance profile the GPU supports,
// in index order, with its possible placements and NVML's raw info. It
// reads the table through the cache of [Backend.profileTable]; each gets
// its own copy of the placements.
func (b *Backend) walkProfiles(index int, dev nvml.Device, each func(capability.GIProfileInfo, nvml.GpuInstanceProfileInfo) error) error {
	table, err := b.profileTable(index, dev)
	if err != nil {
		return err
	}
	for _, e := range table {
		if e.unplaced {
			continue // a driver that answers placements only in MIG mode
		}
		gi := e.gi
		gi.Placements = slices.Clone(gi.Placements)
		if err := each(gi, e.raw); err != nil {
			return err
		}
	}
	return nil
}

// profileTable returns the GPU's profile table, read from NVML once per
// GPU UUID and driver version: the table cannot change while a driver is
// loaded, and reading it costs about 14 ms per GPU on an H200 with driver
// 580 (0.5 ms per profile query, 0.2 ms per placement query). Only a
// complete table is kept: one read while the driver refused placement
// queries (MIG off on some drivers) or that listed nothing is read again
// next time. When the UUID or the driver version cannot be read, nothing
// is cached. The result is shared: callers must not modify it.
func (b *Backend) profileTable(index int, dev nvml.Device) ([]tableEntry, error) {
	key, keyed := b.tableKey(dev)
	if keyed {
		b.tablesMu.Lock()
		t, ok := b.tables[key]
		b.tablesMu.Unlock()
		if ok {
			return t, nil
		}
	}
	t, complete, err := b.readProfiles(index, dev)
	if err != nil {
		return nil, err
	}
	if keyed && complete && len(t) > 0 {
		b.tablesMu.Lock()
		if b.tables == nil {
			b.tables = make(map[tableKey][]tableEntry)
		}
		b.tables[key] = t
		b.tablesMu.Unlock()
	}
	return t, nil
}

// tableKey returns the cache key of dev's table, and false when the GPU's
// UUID or the driver version cannot be read.
func (b *Backend) tableKey(dev nvml.Device) (tableKey, bool) {
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS || uuid == "" {
		return tableKey{}, false
	}
	driver, ret := b.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS || driver == "" {
		return tableKey{}, false
	}
	return tableKey{uuid: uuid, driver: driver}, true
}

// readProfiles reads the GPU's profile table from NVML: every profile
// index, its possible placements and its name. complete is false when the
// driver refused a profile's placements (that entry is unplaced).
func (b *Backend) readProfiles(index int, dev nvml.Device) (table []tableEntry, complete bool, err error) {
	names := b.nameQuery(dev)
	complete = true
	for p := range capability.GIProfileCount {
		info, ok, err := profileInfo(index, dev, p)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			continue
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		unplaced := ret == nvml.ERROR_NOT_SUPPORTED
		if unplaced {
			complete = false
		} else if ret != nvml.SUCCESS {
			return nil, false, hwError("GetGpuInstancePossiblePlacements", index, dev, ret)
		}
		gi := capability.GIProfileInfo{
			Index:               p,
			ID:                  info.Id,
			Name:                names(p, &info),
			SliceCount:          info.SliceCount,
			InstanceCount:       info.InstanceCount,
			MultiprocessorCount: info.MultiprocessorCount,
			MemoryMB:            info.MemorySizeMB,
			Placements:          make([]capability.Placement, len(placements)),
		}
		for i, pl := range placements {
			gi.Placements[i] = capability.Placement{Start: pl.Start, Size: pl.Size}
		}
		table = append(table, tableEntry{gi: gi, raw: info, unplaced: unplaced})
	}
	return table, complete, nil
}

// profileInfo reads the V1 profile info of index p; ok is false when the GPU
// does not support the index (NOT_SUPPORTED, or INVALID_ARGUMENT from a
// driver that predates the index).
func profileInfo(gpu int, dev nvml.Device, p capability.GIProfileIndex) (nvml.GpuInstanceProfileInfo, bool, error) {
	info, ret := dev.GetGpuInstanceProfileInfo(int(p))
	switch ret {
	case nvml.SUCCESS:
		return info, true, nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
		return info, false, nil
	}
	return info, false, hwError("GetGpuInstanceProfileInfo", gpu, dev, ret)
}

// versioned is one answer of the versioned profile query: the fields a
// name is checked against, and the name.
type versioned struct {
	id, slices uint32
	memoryMB   uint64
	name       [96]int8
}

// nameQuery returns a function that yields the driver's canonical profile
// name for an index, given the index's V1 info, or "" when the driver
// gives none that can be trusted (then [capability.DeriveProfileName]
// names the profile).
//
// The V2 struct is asked first, V3 only when V2 gives no trusted name. An
// answer is trusted only when it agrees with V1 (same Id, slice count and
// memory) and its name parses with V1's slice count: driver 580.159.04
// answers V3 with SUCCESS, the numbers right and the name written at V2's
// offset, so a SUCCESS does not prove the struct was filled for its
// version, and a zeroed struct must not name anything. The Version word is
// never read back (drivers write 0 there).
func (b *Backend) nameQuery(dev nvml.Device) func(capability.GIProfileIndex, *nvml.GpuInstanceProfileInfo) string {
	var v2, v3 func(int) (versioned, bool)
	if d, ok := dev.(ProfileInfoV2Device); ok {
		v2 = func(p int) (versioned, bool) {
			in, ret := d.GetGpuInstanceProfileInfoV2(p)
			return versioned{in.Id, in.SliceCount, in.MemorySizeMB, in.Name}, ret == nvml.SUCCESS
		}
	}
	if d, ok := dev.(ProfileInfoV3Device); ok {
		v3 = func(p int) (versioned, bool) {
			in, ret := d.GetGpuInstanceProfileInfoV3(p)
			return versioned{in.Id, in.SliceCount, in.MemorySizeMB, in.Name}, ret == nvml.SUCCESS
		}
	}
	if v2 == nil && v3 == nil && b.hasVersionedQuery(dev) {
		// One symbol serves both versions; each call fills a fresh struct.
		v2 = func(p int) (versioned, bool) {
			in, ret := dev.GetGpuInstanceProfileInfoV(p).V2()
			return versioned{in.Id, in.SliceCount, in.MemorySizeMB, in.Name}, ret == nvml.SUCCESS
		}
		v3 = func(p int) (versioned, bool) {
			in, ret := dev.GetGpuInstanceProfileInfoV(p).V3()
			return versioned{in.Id, in.SliceCount, in.MemorySizeMB, in.Name}, ret == nvml.SUCCESS
		}
	}
	return func(p capability.GIProfileIndex, v1 *nvml.GpuInstanceProfileInfo) string {
		for _, q := range []func(int) (versioned, bool){v2, v3} {
			if q == nil {
				continue
			}
			if ans, ok := q(int(p)); ok {
				if name, ok := trustedName(v1, ans); ok {
					return name
				}
			}
		}
		return ""
	}
}

// hasVersionedQuery reports whether the versioned profile query may be
// called on dev: only on a handle of the real library that has the
// symbol. Calling it on a library that lacks it would jump to an
// unresolved symbol (go-nvml links lazily), so it is looked up first.
func (b *Backend) hasVersionedQuery(dev nvml.Device) bool {
	ext := b.lib.Extensions()
	return isLibraryDevice(dev) && ext != nil && ext.LookupSymbol("nvmlDeviceGetGpuInstanceProfileInfoV") == nil
}

// trustedName returns the name of a versioned answer that agrees with the
// V1 info, and false for one that does not (see [Backend.nameQuery]).
func trustedName(v1 *nvml.GpuInstanceProfileInfo, ans versioned) (string, bool) {
	if ans.id != v1.Id || ans.slices != v1.SliceCount || ans.memoryMB != v1.MemorySizeMB {
		return "", false
	}
	name := profileName(ans.name)
	n, err := capability.ParseProfileName(name)
	if err != nil || n.Compute != v1.SliceCount {
		return "", false
	}
	return name, true
}

// numaNode is the NUMA node of the GPU's PCI device, read from sysfs as
// NVIDIA's device plugin reads it, or 0 when unknown. NVML's
// GetNumaNodeId is not used: it exists only from R550 (go-nvml links
// lazily, so calling it on an older library ends the process), and it
// answers whether the GPU's memory is a NUMA node of its own (Grace
// systems), not which CPUs are near the GPU.
func (b *Backend) numaNode(gpu int, dev nvml.Device) int {
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		b.log.Debug("nvmlhal: no PCI info, NUMA node unknown", "gpu", gpu, "ret", returnName(ret))
		return 0
	}
	id := sysfsBusID(pci.BusId)
	if id == "" {
		return 0
	}
	data, err := fs.ReadFile(b.sysfs, "bus/pci/devices/"+id+"/numa_node")
	if err != nil {
		b.log.Debug("nvmlhal: NUMA node unknown", "gpu", gpu, "err", err)
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 0 {
		return 0 // -1: the platform has no NUMA affinity for the device
	}
	return n
}

// sysfsBusID turns NVML's bus ID ("00000000:3B:00.0", an 8-digit domain)
// into the sysfs device name ("0000:3b:00.0"), or "" when it is not one.
func sysfsBusID(raw [32]int8) string {
	b := make([]byte, 0, len(raw))
	for _, c := range raw {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	id := strings.ToLower(string(b))
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	if len(id) != 12 || id[4] != ':' || id[7] != ':' || id[10] != '.' || strings.ContainsAny(id, "/") {
		return ""
	}
	return id
}

// profileName decodes NVML's NUL-terminated name and drops "MIG " and the
// white space around the name.
func profileName(raw [96]int8) string {
	b := make([]byte, 0, len(raw))
	for _, c := range raw {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "MIG "))
}
