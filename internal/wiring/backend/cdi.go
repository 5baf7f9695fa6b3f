package backend

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/internal/leaf/migcdi"
	"github.com/dynmig/dynmig/internal/wiring/cli"
)

// ErrNoNVCDI is returned by [NVCDI] in a build without cgo, which has no
// nvml backend either.
var ErrNoNVCDI = errors.New("backend: the NVIDIA CDI generator needs a cgo build")

// CDIGenerator describes MIG instances, and whole GPUs, as CDI container
// edits: the methods of deviceplugin.CDIGenerator and
// dradriver.CDIGenerator together, so that one value serves either
// component.
type CDIGenerator interface {
	DeviceEdits(migcdi.Instance) (cdispec.ContainerEdits, error)
	GPUEdits(migcdi.Instance) (cdispec.ContainerEdits, error)
	CommonEdits() (cdispec.ContainerEdits, error)
}

// ErrDriverRoot: -driver-root names no directory.
var ErrDriverRoot = errors.New("backend: the driver root is not a directory")

// CDIOptions configure [NVCDI]; the zero value describes the host's
// driver at "/" with the toolkit's hook at /usr/bin/nvidia-cdi-hook.
type CDIOptions struct {
	// DriverRoot is where the driver's files are (libraries, binaries,
	// device nodes), as this process sees them and as the specs name
	// them on the host; "" is "/".
	DriverRoot string
	HookPath   string // the host's nvidia-cdi-hook; "" is the toolkit's default
	Logger     *slog.Logger
}

// newNVCDI builds the generator of package nvmlhal/nvcdigen; nvml.go sets
// it when built with cgo.
var newNVCDI func(CDIOptions) (CDIGenerator, error)

// NVCDI returns the CDI generator of the nvml backend, built on NVIDIA's
// container toolkit library (package nvmlhal/nvcdigen): device nodes, the
// driver's libraries and the toolkit's hooks.
func NVCDI(o CDIOptions) (CDIGenerator, error) {
	if newNVCDI == nil {
		return nil, ErrNoNVCDI
	}
	return newNVCDI(o)
}

// DefaultDriverRoot is -driver-root's default: a driver installed on the
// host.
const DefaultDriverRoot = "/"

// DriverRootFlag defines -driver-root on fs: where the NVIDIA driver's
// files are, for the specs [NVCDI] generates. Check its value with
// [CheckDriverRoot].
func DriverRootFlag(fs *flag.FlagSet) *string {
	return fs.String("driver-root", DefaultDriverRoot, "where the NVIDIA driver's files (libraries, binaries, device nodes) are, for the CDI specs of -backend=nvml: "+
		"/ for a driver installed on the host, /run/nvidia/driver for the GPU Operator's containerised driver (mounted at the same path in this container, so that the specs name host paths)")
}

// CheckDriverRoot refuses a -driver-root that is not an existing
// directory, before anything is opened: a [*cli.FlagError] naming the
// flag, whose Err is [ErrDriverRoot] and the cause.
func CheckDriverRoot(root string) error {
	if root == "" {
		return &cli.FlagError{Flag: "driver-root", Err: ErrDriverRoot, Reason: "is required: " + DefaultDriverRoot + " for a driver installed on the host"}
	}
	fi, err := os.Stat(root)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is a %s", root, fi.Mode().Type())
	}
	if err != nil {
		return &cli.FlagError{Flag: "driver-root", Value: root, Err: errors.Join(ErrDriverRoot, err),
			Reason: fmt.Sprintf("no driver directory here (%v); mount the driver's directory into the container at this path", err)}
	}
	return nil
}
