package nvmlmock

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing/fstest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/dynmig/dynmig/fakehal"
)

// Compile-time checks: the strict types are NVML values.
var (
	_ nvml.Interface       = (*Server)(nil)
	_ nvml.Device          = (*Device)(nil)
	_ nvml.Device          = (*MIGDevice)(nil)
	_ nvml.GpuInstance     = (*GpuInstance)(nil)
	_ nvml.ComputeInstance = (*ComputeInstance)(nil)
)

// Options configures a [Server]. The zero value is a MIG-enabled server
// whose driver reports V3 profile names.
type Options struct {
	// MIGDisabled starts every GPU with MIG mode off.
	MIGDisabled bool
	// NoV3 imitates a driver without the V3 profile query: profile names
	// are not reported and must be derived.
	NoV3 bool
	// CIInfoDevice makes ComputeInstanceInfo.Device the MIG device handle.
	// By default it is the parent GPU, as nvml.h documents it, so a backend
	// must find the MIG device by scanning the MIG handles.
	CIInfoDevice bool
	// ResetRequired makes SetMigMode leave every change pending, as on
	// hosts where NVML cannot reset the GPU (activation RESET_REQUIRED).
	ResetRequired bool
	// Driver picks the driver generation whose tables the GPUs report,
	// as fakehal.Options.Driver does; the zero value is the current one.
	Driver fakehal.Driver
	// MissingSymbols imitates an older libnvidia-ml without these entry
	// points (e.g. "nvmlDeviceGetNumaNodeId", which R550 added):
	// Extensions().LookupSymbol fails for them, and calling one panics,
	// as go-nvml's lazily linked call into a missing symbol ends the
	// process. "nvmlDeviceGetGpuInstanceProfileInfoV" makes the V3 query
	// ERROR_FUNCTION_NOT_FOUND instead, as NoV3 does.
	MissingSymbols []string
	// ProfilesWhileDisabled imitates drivers that answer the profile and
	// possible-placement queries with MIG mode off; by default they
	// answer NOT_SUPPORTED there.
	ProfilesWhileDisabled bool
	// Driver580 reproduces what driver 580.159.04 (NVML 13.580.159.04)
	// answered on an H200 SXM (mig-hardware-facts, measured 2026-12-04):
	//
	//   - the versioned profile query with a V3 struct returns SUCCESS with
	//     the numeric fields right but an empty Name: the driver formats
	//     the name as if the struct were V2 ("MIG <instanceCount>g.0gb",
	//     from V3's instanceCount and the zero at V2's memory offset) and
	//     writes it at V2's name offset, which is V3's Name[8:];
	//   - the V2 struct gets the right name; both come back with Version 0;
	//   - the profile and possible-placement queries answer with MIG mode
	//     off (as ProfilesWhileDisabled), and GetGpuInstances answers
	//     SUCCESS with no instances there, not NOT_SUPPORTED;
	//   - profile indexes the GPU lacks answer NOT_SUPPORTED below 17 and
	//     INVALID_ARGUMENT from 17 (3_SLICE_GFX), which the driver
	//     predates;
	//   - the driver version is 580.159.04.
	Driver580 bool
	// Latency makes the profile and placement queries take as long as on
	// real hardware, for benchmarks; the zero value adds none.
	Latency Latency
}

// Latency is how long the mock's profile queries take. Driver 580.159.04
// on an H200 took about 0.5 ms per supported profile index (V1 or
// versioned query), 0.17 ms per unsupported one and 0.22 ms per
// possible-placement query ([MeasuredLatency]).
type Latency struct {
	Profile     time.Duration // a profile query that succeeds (V1, V2 or V3)
	Unsupported time.Duration // a profile query that fails
	Placements  time.Duration // a possible-placement query
}

// MeasuredLatency is what driver 580.159.04 took on an H200
// (mig-hardware-facts).
var MeasuredLatency = Latency{Profile: 500 * time.Microsecond, Unsupported: 170 * time.Microsecond, Placements: 220 * time.Microsecond}

// Op names a call whose next result a test can force with [Server.FailNext].
type Op string

// Operations that accept injected failures.
const (
	OpCreateGpuInstance         Op = "CreateGpuInstanceWithPlacement"
	OpCreateComputeInstance     Op = "CreateComputeInstance"
	OpDestroyGpuInstance        Op = "GpuInstance.Destroy"
	OpDestroyComputeInstance    Op = "ComputeInstance.Destroy"
	OpGetMigDeviceHandleByIndex Op = "GetMigDeviceHandleByIndex"
	OpGetComputeRunningProcs    Op = "GetComputeRunningProcesses"
	OpSetMigMode                Op = "SetMigMode"
	OpGetMigMode                Op = "GetMigMode"
	// OpMIGDeviceQuery fails the next identity or process query on a MIG
	// device handle (GetUUID, GetGpuInstanceId, GetComputeInstanceId,
	// Get*RunningProcesses), as on a handle whose compute instance another
	// NVML client destroyed in the middle of a scan.
	OpMIGDeviceQuery Op = "MIGDevice query"
)

// Server is a strict NVML mock of an 8-GPU DGX server: go-nvml's mock
// server with the MIG calls replaced by ones that check what real NVML
// checks. Calls not overridden here fall through to go-nvml's mock (and
// panic there when go-nvml leaves them unset). Every call but Init fails
// with ERROR_UNINITIALIZED until Init has been called, as in real NVML.
//
// All state is guarded by one mutex; a Server is safe for concurrent use.
type Server struct {
	*server.Server

	model Model
	opts  Options

	mu      sync.Mutex
	inits   int
	devices []*Device
	serial  uint64 // MIG device UUID counter
	faults  map[Op][]nvml.Return

	events eventHub // event sets (events.go); its own lock

	queries atomic.Int64 // profile and placement queries answered
}

// New returns a strict server of the given model.
func New(model Model, opts Options) *Server {
	spec, ok := model.spec(opts.Driver)
	if !ok {
		panic(fmt.Sprintf("nvmlmock: unknown model %d", int(model)))
	}
	driver := "580.65.06"
	if opts.Driver580 {
		driver = "580.159.04"
	}
	base, err := server.New(server.WithGPUs(gpus.Multiple(8, spec.base)...),
		server.WithDriverVersion(driver), server.WithNVMLVersion("13."+driver), server.WithCUDADriverVersion(13000))
	if err != nil {
		panic(err) // go-nvml's options never fail
	}
	s := &Server{Server: base, model: model, opts: opts, faults: make(map[Op][]nvml.Return)}
	for i, d := range base.Devices {
		s.devices = append(s.devices, newDevice(s, i, d.(*server.Device), spec))
	}
	return s
}

// ProfileQueries returns how many profile and possible-placement queries
// the server has answered (V1, V2 and V3 profile queries count one each).
func (s *Server) ProfileQueries() int64 { return s.queries.Load() }

// spend counts one profile (placements false) or placement query and
// takes the time Options.Latency gives it.
func (s *Server) spend(ret nvml.Return, placements bool) {
	s.queries.Add(1)
	l := s.opts.Latency
	d := l.Unsupported
	switch {
	case placements:
		d = l.Placements
	case ret == nvml.SUCCESS:
		d = l.Profile
	}
	if d > 0 {
		time.Sleep(d)
	}
}

// Extensions returns the library extensions; LookupSymbol fails for
// Options.MissingSymbols.
func (s *Server) Extensions() nvml.ExtendedInterface { return symbols{s} }

type symbols struct{ s *Server }

func (x symbols) LookupSymbol(name string) error {
	if x.s.missing(name) {
		return fmt.Errorf("nvmlmock: symbol %s not found", name)
	}
	return nil
}

// missing reports whether the imitated library lacks symbol name.
func (s *Server) missing(name string) bool { return slices.Contains(s.opts.MissingSymbols, name) }

// Sysfs returns the part of a /sys tree that holds each GPU's PCI NUMA
// node (bus/pci/devices/<bus id>/numa_node), as on a DGX: GPUs 0-3 on
// node 0, 4-7 on node 1. Pass it as nvmlhal.Options.Sysfs.
func (s *Server) Sysfs() fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, d := range s.devices {
		fsys["bus/pci/devices/"+d.busID()[4:]+"/numa_node"] = &fstest.MapFile{Data: []byte(fmt.Sprintf("%d\n", d.index/4))}
	}
	return fsys
}

// Model returns the server's model.
func (s *Server) Model() Model { return s.model }

// Inits returns how many Init calls are not yet balanced by Shutdown.
func (s *Server) Inits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inits
}

// FailNext makes the next call of op (on any GPU) return ret instead of
// running. Several calls queue up in order.
func (s *Server) FailNext(op Op, ret nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[op] = append(s.faults[op], ret)
}

// fault pops an injected failure for op; s.mu must be held.
func (s *Server) fault(op Op) (nvml.Return, bool) {
	q := s.faults[op]
	if len(q) == 0 {
		return nvml.SUCCESS, false
	}
	s.faults[op] = q[1:]
	return q[0], true
}

// lock takes the state lock and reports whether NVML is initialised.
func (s *Server) lock() bool {
	s.mu.Lock()
	return s.inits > 0
}

// Init initialises the mock library; it is counted like nvmlInit.
func (s *Server) Init() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inits++
	return nvml.SUCCESS
}

// Shutdown balances one Init; without one it is ERROR_UNINITIALIZED.
func (s *Server) Shutdown() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inits == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	s.inits--
	return nvml.SUCCESS
}

// DeviceGetCount returns the number of GPUs.
func (s *Server) DeviceGetCount() (int, nvml.Return) {
	defer s.mu.Unlock()
	if !s.lock() {
		return 0, nvml.ERROR_UNINITIALIZED
	}
	return len(s.devices), nvml.SUCCESS
}

// DeviceGetHandleByIndex returns the strict device at index.
func (s *Server) DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return) {
	defer s.mu.Unlock()
	if !s.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if index < 0 || index >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.devices[index], nvml.SUCCESS
}

// DeviceGetHandleByUUID returns the strict device with the GPU UUID.
func (s *Server) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	defer s.mu.Unlock()
	if !s.lock() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	for _, d := range s.devices {
		if d.UUID == uuid {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// GPU returns the strict device at index, for test setup and inspection.
// It panics on an index out of range.
func (s *Server) GPU(index int) *Device { return s.devices[index] }

// StartProcess starts a compute process on a GPU outside MIG. A GPU in MIG
// mode runs CUDA work only inside MIG devices, so that is an error.
func (s *Server) StartProcess(gpu int, pid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.gpu(gpu)
	if err != nil {
		return err
	}
	if d.migMode == nvml.DEVICE_MIG_ENABLE {
		return fmt.Errorf("nvmlmock: GPU %d is in MIG mode; start processes in a MIG device", gpu)
	}
	d.procs = append(d.procs, process{pid: pid, gi: noInstance, ci: noInstance})
	return nil
}

// StartMIGProcess starts a compute process in compute instance ci of GPU
// instance gi.
func (s *Server) StartMIGProcess(gpu int, gi, ci, pid uint32) error {
	return s.startKind(gpu, gi, ci, pid, kindCompute)
}

// StartGraphicsProcess starts a graphics client in compute instance ci of
// GPU instance gi (a +gfx instance's renderer): NVML lists it only in
// GetGraphicsRunningProcesses, not among compute processes.
func (s *Server) StartGraphicsProcess(gpu int, gi, ci, pid uint32) error {
	return s.startKind(gpu, gi, ci, pid, kindGraphics)
}

// StartMPSProcess starts an MPS client in compute instance ci of GPU
// instance gi: NVML lists it only in GetMPSComputeRunningProcesses.
func (s *Server) StartMPSProcess(gpu int, gi, ci, pid uint32) error {
	return s.startKind(gpu, gi, ci, pid, kindMPS)
}

func (s *Server) startKind(gpu int, gi, ci, pid uint32, kind procKind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.gpu(gpu)
	if err != nil {
		return err
	}
	g := d.gis[gi]
	if g == nil || g.cis[ci] == nil {
		return fmt.Errorf("nvmlmock: GPU %d has no compute instance %d/%d", gpu, gi, ci)
	}
	d.procs = append(d.procs, process{pid: pid, gi: gi, ci: ci, kind: kind})
	return nil
}

// StartProcessOnMIGDevice starts a compute process in the MIG device with
// the given UUID, on whichever GPU has it, and returns that GPU's index.
func (s *Server) StartProcessOnMIGDevice(migUUID string, pid uint32) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		for _, ci := range d.migSlots {
			if ci != nil && ci.mig.uuid == migUUID {
				d.procs = append(d.procs, process{pid: pid, gi: ci.gi.id, ci: ci.id})
				return d.index, nil
			}
		}
	}
	return -1, fmt.Errorf("nvmlmock: no MIG device %s", migUUID)
}

// StopProcess ends every process with pid on the GPU.
func (s *Server) StopProcess(gpu int, pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, err := s.gpu(gpu); err == nil {
		d.procs = slices.DeleteFunc(d.procs, func(p process) bool { return p.pid == pid })
	}
}

// ResetGPU applies a pending MIG mode change, as a GPU reset does. It fails
// while processes run, and destroys every instance when MIG turns off.
func (s *Server) ResetGPU(gpu int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.gpu(gpu)
	if err != nil {
		return err
	}
	if len(d.procs) > 0 {
		return fmt.Errorf("nvmlmock: GPU %d is in use", gpu)
	}
	d.setMode(d.pendingMode)
	return nil
}

func (s *Server) gpu(i int) (*Device, error) {
	if i < 0 || i >= len(s.devices) {
		return nil, fmt.Errorf("nvmlmock: no GPU %d", i)
	}
	return s.devices[i], nil
}

// newMIGUUID returns a fresh MIG device UUID; s.mu must be held.
func (s *Server) newMIGUUID(gpu int, gi, ci uint32) string {
	s.serial++
	return fmt.Sprintf("MIG-%08x-%04x-4%03x-8%03x-%012x", uint32(s.model)<<24|uint32(gpu), gi&0xffff, ci&0xfff, gpu&0xfff, s.serial)
}
