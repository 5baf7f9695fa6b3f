package dradriver

import (
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/internal/leaf/devnodes"
	"github.com/dynmig/dynmig/internal/leaf/migcdi"
)

// CDIInstance is the device a [CDIGenerator] describes: a MIG instance,
// or, with MIGUUID "", a whole GPU (admin access). It is the device
// plugin's CDIInstance (package internal/leaf/migcdi).
type CDIInstance = migcdi.Instance

// CDIGenerator describes a claim's devices as CDI container edits; the
// driver adds NVIDIA_VISIBLE_DEVICES (see [ClaimSpecFrom]). Package
// nvmlhal/nvcdigen (cgo) implements it with NVIDIA's container toolkit
// library (device nodes, the driver's libraries, the toolkit's hooks);
// [NewFakeCDI] for fakehal. Its methods may be called concurrently.
type CDIGenerator interface {
	// DeviceEdits returns the edits that give a container the MIG
	// instance: at least its device nodes.
	DeviceEdits(CDIInstance) (cdispec.ContainerEdits, error)
	// GPUEdits returns the edits that give a container the whole GPU
	// in.GPUUUID.
	GPUEdits(CDIInstance) (cdispec.ContainerEdits, error)
	// CommonEdits returns the edits every container using a device
	// needs, injected once per spec.
	CommonEdits() (cdispec.ContainerEdits, error)
}

// FakeCDI is the [CDIGenerator] for fakehal, whose GPUs have no /proc
// files: device nodes numbered from the GPU index and instance IDs
// (package internal/leaf/devnodes, Fake), as the device plugin's
// NewFakeCDI numbers them.
type FakeCDI struct{}

// NewFakeCDI returns the generator for fakehal.
func NewFakeCDI() FakeCDI { return FakeCDI{} }

// DeviceEdits implements [CDIGenerator].
func (FakeCDI) DeviceEdits(in CDIInstance) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{DeviceNodes: cdiNodes(devnodes.Fake{}.MIGNodes(in.GPU, in.GPUInstanceID, in.ComputeInstanceID))}, nil
}

// GPUEdits implements [CDIGenerator]: the GPU's node, the first of its MIG
// devices' nodes.
func (FakeCDI) GPUEdits(in CDIInstance) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{DeviceNodes: cdiNodes(devnodes.Fake{}.MIGNodes(in.GPU, 0, 0)[:1])}, nil
}

// CommonEdits implements [CDIGenerator].
func (FakeCDI) CommonEdits() (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{DeviceNodes: cdiNodes(devnodes.Fake{}.ControlNodes())}, nil
}

var _ CDIGenerator = FakeCDI{}
