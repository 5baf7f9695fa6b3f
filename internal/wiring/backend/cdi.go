package backend

import (
	"errors"
	"log/slog"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/internal/leaf/migcdi"
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

// CDIOptions configure [NVCDI]; the zero value describes the host's
// driver at "/" with the toolkit's hook at /usr/bin/nvidia-cdi-hook.
type CDIOptions struct {
	DriverRoot string // where the driver's files are; "" is "/"
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
