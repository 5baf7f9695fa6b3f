package nvmlhal

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/internal/leaf/gpulock"
	"github.com/dynmig/dynmig/realize"
)

// Compile-time conformance with the interfaces the realize Manager uses.
var (
	_ realize.Realizer      = (*Backend)(nil)
	_ realize.MIGModeSetter = (*Backend)(nil)
)

// ErrNotInitialized is returned by [Backend.Shutdown] when the backend's own
// [Backend.Init] calls are already balanced by Shutdown calls.
var ErrNotInitialized = errors.New("nvmlhal: shutdown without a matching init")

// Options configures a [Backend]. The zero value uses the system NVML
// library (nvml.New()) and discards logs.
type Options struct {
	// NVML is the library to drive. nil means nvml.New(), which loads
	// libnvidia-ml.so.1 when [Backend.Init] is called. Tests pass a strict
	// mock from package nvmlmock; an embedding program may pass a library
	// it has already initialised (then it need not call Backend.Init).
	NVML nvml.Interface
	// Logger receives one line per hardware mutation; nil discards.
	Logger *slog.Logger
	// Sysfs is the /sys tree the GPUs' NUMA nodes are read from
	// (bus/pci/devices/<PCI bus ID>/numa_node, as NVIDIA's device plugin
	// reads them). nil means os.DirFS("/sys"); tests pass an fstest.MapFS.
	Sysfs fs.FS
}

// Backend is the NVML implementation of [realize.Realizer] and
// [capability.HardwareView] for the GPUs of one node. Build it with [New].
// A Backend is safe for concurrent use; see the package doc for the
// locking and Init/Shutdown contract.
type Backend struct {
	lib nvml.Interface
	log *slog.Logger

	// owned is true when the backend made the library (Options.NVML nil):
	// then no one else can have initialised it.
	owned  bool
	initMu sync.Mutex   // serialises Init and Shutdown
	inits  atomic.Int64 // successful Init calls not yet balanced by Shutdown
	gate   gate         // keeps Shutdown out of in-flight calls
	sysfs  fs.FS
	newLib func() nvml.Interface // makes the library when owned

	locks gpulock.Set // per-GPU mutation lock

	// tables caches each GPU's profile table (see [Backend.GIProfiles]).
	tablesMu sync.Mutex
	tables   map[tableKey][]tableEntry
}

// New returns a Backend over opts.NVML. It does not call NVML; call
// [Backend.Init] unless the library is already initialised.
func New(opts Options) *Backend {
	newLib := func() nvml.Interface { return nvml.New() }
	lib := opts.NVML
	if lib == nil {
		lib = newLib()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sysfs := opts.Sysfs
	if sysfs == nil {
		sysfs = os.DirFS("/sys")
	}
	return &Backend{lib: lib, log: log, owned: opts.NVML == nil, sysfs: sysfs, newLib: newLib}
}

// Init initialises NVML (nvmlInit_v2; for nvml.New() this loads the
// library). NVML counts initialisations, so Init on a library the caller
// already initialised is harmless; every successful Init must be balanced by
// one [Backend.Shutdown]. A failure is a [*realize.HardwareError] with GPU -1
// whose Cause is the [*ReturnError].
//
// go-nvml loads libnvidia-ml before calling nvmlInit and keeps it loaded
// when nvmlInit then fails; it offers no call that unloads it in that
// state. So a backend that made its library (Options.NVML nil) makes at
// most one such attempt per library: after a failed Init it builds a fresh
// library for the next one rather than stacking references on the old.
func (b *Backend) Init(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.initMu.Lock()
	defer b.initMu.Unlock()
	if ret := b.lib.Init(); ret != nvml.SUCCESS {
		if b.owned && b.inits.Load() == 0 {
			b.lib = b.newLib() // a fresh library for the next attempt
		}
		return hwError("Init", -1, nil, ret)
	}
	b.inits.Add(1)
	return nil
}

// Shutdown balances one successful [Backend.Init]. It never shuts down an
// initialisation the backend did not make: with no unbalanced Init it
// returns [ErrNotInitialized] and leaves the library alone, so a caller that
// initialised NVML itself keeps ownership of it.
//
// Shutdown waits, as long as ctx allows, for the backend's calls in flight
// to finish, and calls that start meanwhile wait for it, so no call runs on
// a library being shut down.
func (b *Backend) Shutdown(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.initMu.Lock()
	defer b.initMu.Unlock()
	if b.inits.Load() == 0 {
		return ErrNotInitialized
	}
	release, err := b.gate.close(ctx)
	if err != nil {
		return err
	}
	defer release()
	if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
		return hwError("Shutdown", -1, nil, ret)
	}
	b.inits.Add(-1)
	return nil
}

// device returns the handle of the GPU at NVML index gpu. An index NVML does
// not know is realize.ErrNotFound.
func (b *Backend) device(op string, gpu int) (nvml.Device, error) {
	if err := b.ready(op, gpu); err != nil {
		return nil, err
	}
	if gpu < 0 {
		return nil, kindError(op, gpu, realize.ErrNotFound, &ArgumentError{Field: "gpu", Reason: "negative index"})
	}
	dev, ret := b.lib.DeviceGetHandleByIndex(gpu)
	if ret != nvml.SUCCESS {
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			return nil, &realize.HardwareError{Op: op, GPU: gpu, Kind: realize.ErrNotFound, Cause: &ReturnError{Return: ret}}
		}
		return nil, hwError(op, gpu, nil, ret)
	}
	return dev, nil
}

// ready refuses calls on a library the backend made and has not
// initialised: go-nvml links lazily, and calling NVML before Init would end
// the process on an unresolved symbol instead of returning an error.
func (b *Backend) ready(op string, gpu int) error {
	if b.owned && b.inits.Load() == 0 {
		return hwError(op, gpu, nil, nvml.ERROR_UNINITIALIZED)
	}
	return nil
}

// begin is the common start of a call on one GPU: ctx check, entry past
// Shutdown's gate, handle, lock. The returned func undoes it.
func (b *Backend) begin(ctx context.Context, op string, gpu int) (nvml.Device, func(), error) {
	leave, err := b.enter(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Resolve the handle first so that only real GPUs get a lock.
	dev, err := b.device(op, gpu)
	if err != nil {
		leave()
		return nil, nil, err
	}
	unlock, err := b.locks.Lock(ctx, gpu)
	if err != nil {
		leave()
		return nil, nil, err
	}
	return dev, func() { unlock(); leave() }, nil
}

// enter checks ctx and admits a call past Shutdown's gate; the returned
// func lets it out.
func (b *Backend) enter(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.gate.enter(ctx)
}

// migModes reads the current and pending MIG mode. A GPU without MIG
// support reads as disabled in both.
func migModes(op string, gpu int, dev nvml.Device) (cur, pend capability.MIGMode, err error) {
	c, p, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		return migMode(c), migMode(p), nil
	case nvml.ERROR_NOT_SUPPORTED:
		return capability.MIGDisabled, capability.MIGDisabled, nil
	}
	return capability.MIGUnknown, capability.MIGUnknown, hwError(op, gpu, nil, ret)
}

func migMode(m int) capability.MIGMode {
	switch m {
	case nvml.DEVICE_MIG_ENABLE:
		return capability.MIGEnabled
	case nvml.DEVICE_MIG_DISABLE:
		return capability.MIGDisabled
	}
	return capability.MIGUnknown
}

// MIGMode reports the GPU's current MIG mode and the mode pending until the
// next GPU reset (equal to the current one when nothing is pending).
func (b *Backend) MIGMode(ctx context.Context, gpu int) (current, pending capability.MIGMode, err error) {
	leave, err := b.enter(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer leave()
	dev, err := b.device("GetMigMode", gpu)
	if err != nil {
		return 0, 0, err
	}
	return migModes("GetMigMode", gpu, dev)
}
