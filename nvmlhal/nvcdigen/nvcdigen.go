package nvcdigen

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/internal/leaf/migcdi"
)

// DefaultHookPath is where the toolkit installs nvidia-cdi-hook on the
// host, the path the specs' hooks name when Options.HookPath is "".
const DefaultHookPath = "/usr/bin/nvidia-cdi-hook"

// ErrGenerate: NVIDIA's library could not describe a device or the common
// edits; a [*Error] says which.
var ErrGenerate = errors.New("nvcdigen: CDI edits")

// Error names the device [ErrGenerate] is about.
type Error struct {
	ID  string // the MIG or GPU UUID; "" for the common edits
	Err error
}

func (e *Error) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("nvcdigen: common CDI edits: %v", e.Err)
	}
	return fmt.Sprintf("nvcdigen: CDI edits of %s: %v", e.ID, e.Err)
}

// Unwrap returns [ErrGenerate] and the cause.
func (e *Error) Unwrap() []error { return []error{ErrGenerate, e.Err} }

// ErrMissingNodes: nvcdi found a device but not its device nodes under
// the device root (Options.DevRoot, by default the driver root); a
// [*NodesError] says how many it found.
var ErrMissingNodes = errors.New("nvcdigen: device nodes missing")

// NodesError is the cause [Error] carries for [ErrMissingNodes]: the edits
// held GPUNodes GPU nodes and CapNodes MIG capability nodes, where a GPU
// needs one and a MIG device also its GPU and compute instances' two.
type NodesError struct {
	DevRoot            string
	GPUNodes, CapNodes int
}

func (e *NodesError) Error() string {
	return fmt.Sprintf("device nodes missing under %s (found %d GPU and %d MIG capability nodes): is the driver root right?", e.DevRoot, e.GPUNodes, e.CapNodes)
}

// Unwrap returns [ErrMissingNodes].
func (e *NodesError) Unwrap() error { return ErrMissingNodes }

// Options configure [New]. The zero value describes the host's driver
// through the host's NVML, with the toolkit's hook at [DefaultHookPath].
type Options struct {
	// NVML is the library the devices are looked up in; nil loads
	// libnvidia-ml.so.1 from under DriverRoot. nvcdi calls its Init and
	// Shutdown around each lookup; NVML counts them, so a backend holding
	// NVML open is not disturbed.
	NVML nvml.Interface
	// DriverRoot is where the driver's files are (libraries, binaries,
	// firmware, /proc); "" is "/". A containerised driver (GPU operator)
	// is under /run/nvidia/driver.
	DriverRoot string
	// DevRoot is where the device nodes are; "" is DriverRoot.
	DevRoot string
	// HookPath is the nvidia-cdi-hook the specs' hooks run, a path on
	// the host; "" is [DefaultHookPath].
	HookPath string
	// Logger receives nvcdi's messages; nil is slog.Default().
	Logger *slog.Logger
}

// Generator describes MIG devices (and, for the DRA driver's admin
// access, whole GPUs) with nvcdi. Its methods may be called concurrently;
// calls into nvcdi are serialized.
type Generator struct {
	mu      sync.Mutex
	lib     nvcdi.Interface
	devRoot string                  // where nvcdi looks for device nodes, for errors
	common  *cdispec.ContainerEdits // the common edits, once found
}

// New returns a Generator for the driver o describes. It reads nothing
// yet: a missing driver file surfaces in the first call.
func New(o Options) (*Generator, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	hook := o.HookPath
	if hook == "" {
		hook = DefaultHookPath
	}
	opts := []nvcdi.Option{
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithLogger(logger{log}),
		nvcdi.WithNVIDIACDIHookPath(hook),
	}
	if o.NVML != nil {
		opts = append(opts, nvcdi.WithNvmlLib(o.NVML))
	}
	if o.DriverRoot != "" {
		opts = append(opts, nvcdi.WithDriverRoot(o.DriverRoot))
	}
	if o.DevRoot != "" {
		opts = append(opts, nvcdi.WithDevRoot(o.DevRoot))
	}
	lib, err := nvcdi.New(opts...)
	if err != nil {
		return nil, &Error{Err: err}
	}
	devRoot := o.DevRoot
	if devRoot == "" {
		devRoot = o.DriverRoot
	}
	if devRoot == "" {
		devRoot = "/"
	}
	return &Generator{lib: lib, devRoot: devRoot}, nil
}

// DeviceEdits returns the edits of the MIG device in.MIGUUID (its parent
// GPU's node and its capability nodes), or, when in.MIGUUID is "", of the
// GPU in.GPUUUID. They set no NVIDIA_VISIBLE_DEVICES: a runtime resolving
// the CDI name needs none.
//
// Edits without the device's nodes under the device root (no GPU node;
// for a MIG device, fewer than its two capability nodes) are refused with
// [ErrMissingNodes]: nvcdi drops the nodes it does not find, which a wrong
// driver root would otherwise turn into a spec granting nothing usable.
func (g *Generator) DeviceEdits(in migcdi.Instance) (cdispec.ContainerEdits, error) {
	id := in.MIGUUID
	if id == "" {
		id = in.GPUUUID
	}
	if id == "" {
		return cdispec.ContainerEdits{}, &Error{Err: errors.New("instance has neither a MIG nor a GPU UUID")}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	devs, err := g.lib.GetDeviceSpecsByID(id)
	if err != nil {
		return cdispec.ContainerEdits{}, &Error{ID: id, Err: err}
	}
	if len(devs) == 0 {
		return cdispec.ContainerEdits{}, &Error{ID: id, Err: errors.New("nvcdi described no device")}
	}
	if err := g.checkNodes(devs[0].ContainerEdits, in.MIGUUID != ""); err != nil {
		return cdispec.ContainerEdits{}, &Error{ID: id, Err: err}
	}
	return devs[0].ContainerEdits, nil
}

// checkNodes refuses edits that would give a container no usable device:
// nvcdi leaves out, with a log line only, every node it does not find
// under the device root, so a wrong driver root would otherwise yield a
// spec without the GPU's node, or a MIG device without its capability
// nodes (the parent GPU alone, which CUDA cannot use as that MIG device).
func (g *Generator) checkNodes(e cdispec.ContainerEdits, mig bool) error {
	var gpu, caps int
	for _, n := range e.DeviceNodes {
		if strings.HasPrefix(n.Path, "/dev/nvidia-caps/") {
			caps++
		} else {
			gpu++
		}
	}
	if gpu == 0 || (mig && caps < 2) {
		return &NodesError{DevRoot: g.devRoot, GPUNodes: gpu, CapNodes: caps}
	}
	return nil
}

// GPUEdits returns the edits of the whole GPU in.GPUUUID, whatever
// in.MIGUUID says.
func (g *Generator) GPUEdits(in migcdi.Instance) (cdispec.ContainerEdits, error) {
	in.MIGUUID = ""
	return g.DeviceEdits(in)
}

// CommonEdits returns the edits every container using a device needs:
// control nodes, the driver's libraries and binaries, IPC sockets and the
// hooks that link them. They are found once and reused: the driver they
// describe is the one NVML loaded, which changes only with a restart.
func (g *Generator) CommonEdits() (cdispec.ContainerEdits, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.common == nil {
		edits, err := g.lib.GetCommonEdits()
		if err != nil {
			return cdispec.ContainerEdits{}, &Error{Err: err}
		}
		if edits == nil || edits.ContainerEdits == nil {
			return cdispec.ContainerEdits{}, &Error{Err: errors.New("nvcdi returned no common edits")}
		}
		g.common = edits.ContainerEdits
	}
	return clipped(*g.common), nil
}

// clipped returns e with its slices clipped, so that a caller appending
// to them (as the components do to add their own edits) copies instead
// of writing into the cached edits another caller holds.
func clipped(e cdispec.ContainerEdits) cdispec.ContainerEdits {
	e.Env = slices.Clip(e.Env)
	e.DeviceNodes = slices.Clip(e.DeviceNodes)
	e.Hooks = slices.Clip(e.Hooks)
	e.Mounts = slices.Clip(e.Mounts)
	e.NetDevices = slices.Clip(e.NetDevices)
	e.AdditionalGIDs = slices.Clip(e.AdditionalGIDs)
	return e
}

// logger hands nvcdi's printf-style messages to slog.
type logger struct{ l *slog.Logger }

func (l logger) Debugf(f string, args ...any) {
	l.l.Debug(fmt.Sprintf(f, args...), "component", "nvcdi")
}
func (l logger) Tracef(f string, args ...any) {
	l.l.Debug(fmt.Sprintf(f, args...), "component", "nvcdi")
}
func (l logger) Infof(f string, args ...any) { l.l.Info(fmt.Sprintf(f, args...), "component", "nvcdi") }
func (l logger) Warningf(f string, args ...any) {
	l.l.Warn(fmt.Sprintf(f, args...), "component", "nvcdi")
}
func (l logger) Errorf(f string, args ...any) {
	l.l.Error(fmt.Sprintf(f, args...), "component", "nvcdi")
}
