package dra

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

const (
	// DriverName is the DRA driver the model publishes for, as the NVIDIA
	// DRA driver names itself.
	DriverName = "gpu.nvidia.com"
	// DeviceClassName is the class every claim requests.
	DeviceClassName = "mig.nvidia.com"
	// MultiprocessorsCounter is the compute counter of each GPU's set.
	MultiprocessorsCounter = "multiprocessors"
)

// ErrModel is wrapped by errors about GPUs that cannot be modelled.
var ErrModel = errors.New("dra: GPUs cannot be modelled")

// Device is one published partition: a profile at a placement on a GPU.
// Device is comparable.
type Device struct {
	ID        structured.DeviceID
	Name      string
	GPU       int // position in the GPUs given to NewModel
	Profile   string
	Placement capability.Placement
}

// String returns the device name.
func (d Device) String() string { return d.Name }

// Model is a node's GPUs published as one DRA resource pool (see the package
// documentation). It is immutable after [NewModel].
type Model struct {
	node    string
	gpus    []capability.GPU
	grids   []*placement.Grid
	slices  []*resourceapi.ResourceSlice
	class   *resourceapi.DeviceClass
	devices []Device
	objects []resourceapi.Device // the published form of devices[i]
	perGPU  []int                // devices per GPU
	byName  map[string]int       // device name -> index in devices
	byKey   map[deviceKey]int
}

type deviceKey struct {
	gpu       int
	profile   string
	placement capability.Placement
}

// NewModel publishes gpus as node's pool. It fails with an error wrapping
// [ErrModel] for an empty node name or a GPU whose slot grid needs more
// counters than a counter set holds, and with the [*placement.GridError] of
// a GPU that [placement.NewGrid] rejects.
func NewModel(node string, gpus []capability.GPU) (*Model, error) {
	if node == "" {
		return nil, fmt.Errorf("%w: empty node name", ErrModel)
	}
	m := &Model{node: node, byName: map[string]int{}, byKey: map[deviceKey]int{}}
	for i := range gpus {
		g, err := placement.NewGrid(&gpus[i])
		if err != nil {
			return nil, err
		}
		// memory-slice-* plus multiprocessors must fit one counter set.
		if int(g.Width())+1 > resourceapi.ResourceSliceMaxCountersPerCounterSet {
			return nil, fmt.Errorf("%w: GPU %d has %d slots, more than a counter set holds", ErrModel, i, g.Width())
		}
		m.grids = append(m.grids, g)
		m.gpus = append(m.gpus, gpus[i])
	}
	m.class = deviceClass()
	counterSlices := m.counterSlices()
	deviceSlices := m.deviceSlices()
	total := int64(len(counterSlices) + len(deviceSlices))
	for _, s := range append(counterSlices, deviceSlices...) {
		s.Spec.Pool.ResourceSliceCount = total
		m.slices = append(m.slices, s)
	}
	return m, nil
}

// Node returns the node name, also the pool name.
func (m *Model) Node() string { return m.node }

// Grids returns the GPUs compiled for dynmig's placement, in order. The
// caller must not modify the slice.
func (m *Model) Grids() []*placement.Grid { return m.grids }

// Slices returns the published ResourceSlices: counter slices first, then
// device slices. The caller must not modify them.
func (m *Model) Slices() []*resourceapi.ResourceSlice { return m.slices }

// DeviceClass returns the class claims request.
func (m *Model) DeviceClass() *resourceapi.DeviceClass { return m.class }

// Devices returns every published device in slice order. The caller must not
// modify the slice.
func (m *Model) Devices() []Device { return m.devices }

// Lookup returns the device published for profile at pl on the GPU at
// position gpu.
func (m *Model) Lookup(gpu int, profile string, pl capability.Placement) (Device, bool) {
	i, ok := m.byKey[deviceKey{gpu, profile, pl}]
	if !ok {
		return Device{}, false
	}
	return m.devices[i], true
}

// DeviceNamed returns the device with the given name.
func (m *Model) DeviceNamed(name string) (Device, bool) {
	i, ok := m.byName[name]
	if !ok {
		return Device{}, false
	}
	return m.devices[i], true
}

func counterSetName(gpu int) string { return "gpu-" + strconv.Itoa(gpu) + "-counter-set" }

func slotCounter(slot uint32) string { return "memory-slice-" + strconv.FormatUint(uint64(slot), 10) }

// deviceName turns a profile name into a DNS label part: "1g.5gb+me" is
// "1g-5gb-me".
func deviceName(gpu int, profile string, start uint32) string {
	var b strings.Builder
	b.WriteString("gpu-")
	b.WriteString(strconv.Itoa(gpu))
	b.WriteByte('-')
	for _, r := range strings.ToLower(profile) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	b.WriteByte('-')
	b.WriteString(strconv.FormatUint(uint64(start), 10))
	return b.String()
}

func (m *Model) newSlice(kind string, n int) *resourceapi.ResourceSlice {
	node := m.node
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: m.node + "-" + DriverName + "-" + kind + "-" + strconv.Itoa(n)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   DriverName,
			Pool:     resourceapi.ResourcePool{Name: m.node, Generation: 1},
			NodeName: &node,
		},
	}
}

// counterSlices publishes one counter set per GPU, at most
// ResourceSliceMaxCounterSets per slice.
func (m *Model) counterSlices() []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for i, g := range m.grids {
		if i%resourceapi.ResourceSliceMaxCounterSets == 0 {
			out = append(out, m.newSlice("counters", len(out)))
		}
		cs := resourceapi.CounterSet{Name: counterSetName(i), Counters: map[string]resourceapi.Counter{}}
		for s := range g.Width() {
			cs.Counters[slotCounter(s)] = resourceapi.Counter{Value: resource.MustParse("1")}
		}
		if sms := maxSMs(g); sms > 0 {
			cs.Counters[MultiprocessorsCounter] = resourceapi.Counter{Value: *resource.NewQuantity(int64(sms), resource.DecimalSI)}
		}
		s := out[len(out)-1]
		s.Spec.SharedCounters = append(s.Spec.SharedCounters, cs)
	}
	return out
}

// maxSMs is the largest profile's SM count: every set of non-overlapping
// published placements fits it (the full-GPU profile uses them all).
func maxSMs(g *placement.Grid) uint32 {
	var n uint32
	for _, p := range g.Profiles() {
		n = max(n, p.Multiprocessors)
	}
	return n
}

// deviceSlices publishes one device per (GPU, profile, placement) in that
// order, at most ResourceSliceMaxDevicesWithAdvancedFeatures per slice.
func (m *Model) deviceSlices() []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	m.perGPU = make([]int, len(m.grids))
	for i, g := range m.grids {
		for _, p := range g.Profiles() { // CompareProfiles order
			for _, pl := range p.Placements { // by start
				if len(out) == 0 || len(out[len(out)-1].Spec.Devices) == resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
					out = append(out, m.newSlice("devices", len(out)))
				}
				s := out[len(out)-1]
				name := deviceName(i, p.Name, pl.Start)
				s.Spec.Devices = append(s.Spec.Devices, m.device(i, &p, pl, name))
				m.objects = append(m.objects, s.Spec.Devices[len(s.Spec.Devices)-1])
				d := Device{ID: structured.MakeDeviceID(DriverName, m.node, name), Name: name, GPU: i, Profile: p.Name, Placement: pl}
				m.byName[name] = len(m.devices)
				m.byKey[deviceKey{i, p.Name, pl}] = len(m.devices)
				m.devices = append(m.devices, d)
				m.perGPU[i]++
			}
		}
	}
	return out
}

func attrString(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &s}
}

func attrInt(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }

func (m *Model) device(gpu int, p *capability.Profile, pl capability.Placement, name string) resourceapi.Device {
	counters := map[string]resourceapi.Counter{}
	for s := pl.Start; s < pl.End(); s++ {
		counters[slotCounter(s)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	if p.Multiprocessors > 0 {
		counters[MultiprocessorsCounter] = resourceapi.Counter{Value: *resource.NewQuantity(int64(p.Multiprocessors), resource.DecimalSI)}
	}
	return resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":           attrString("mig"),
			"profile":        attrString(p.Name),
			"index":          attrInt(int64(m.gpus[gpu].Index)),
			"uuid":           attrString(m.gpus[gpu].UUID),
			"placementStart": attrInt(int64(pl.Start)),
			"placementSize":  attrInt(int64(pl.Size)),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory":          {Value: *resource.NewQuantity(int64(p.MemoryMB)<<20, resource.BinarySI)},
			"multiprocessors": {Value: *resource.NewQuantity(int64(p.Multiprocessors), resource.DecimalSI)},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(gpu), Counters: counters}},
	}
}

func deviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClassName},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: `device.driver == "` + DriverName + `" && device.attributes["` + DriverName + `"].type == "mig"`,
			}}},
		},
	}
}
