// Package migcdi names the MIG instance a CDI spec describes, the one type
// the components' CDI generator interfaces (deviceplugin.CDIGenerator,
// dradriver.CDIGenerator) and their implementations (theirs, and package
// nvmlhal/nvcdigen's, which sits below the components and cannot import
// them) share. It holds data only.
package migcdi

// Instance is the MIG instance one CDI device describes. A generator asked
// for a whole GPU (the DRA driver's admin access) is given an Instance
// whose MIGUUID is "".
type Instance struct {
	GPU               int    // the parent GPU's NVML index
	GPUUUID           string // "GPU-..."
	MIGUUID           string // "MIG-...", the CDI device name
	GPUInstanceID     uint32
	ComputeInstanceID uint32
}
