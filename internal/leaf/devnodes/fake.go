package devnodes

import "strconv"

// FakeCapsMajor is the character major [Fake] gives /dev/nvidia-caps
// nodes; the driver's is assigned at load time (/proc/devices).
const FakeCapsMajor = 511

// Fake numbers device nodes for fake hardware, without reading anything:
// a GPU's minor is its index, and capability minors follow the layout of
// the driver's /proc/driver/nvidia-caps/mig-minors (config 1, monitor 2,
// then per GPU 15 GPU instances of an access minor and 8 compute
// instances each).
type Fake struct{}

// migMinorsPerGI and migMinorsPerGPU lay out the capability minors.
const (
	migMinorsPerGI  = 1 + 8
	migMinorsPerGPU = 15 * migMinorsPerGI
)

// MIGNodes returns the nodes of compute instance ci of GPU instance gi on
// the GPU with index gpu, in the order of [Proc.MIGNodes].
func (Fake) MIGNodes(gpu int, gi, ci uint32) []Node {
	access := 3 + int64(gpu)*migMinorsPerGPU + int64(gi)*migMinorsPerGI
	return []Node{gpuNode(int64(gpu)), capNode(access), capNode(access + 1 + int64(ci))}
}

// ControlNodes returns /dev/nvidiactl, as [Proc.ControlNodes] finds it
// without nvidia-uvm.
func (Fake) ControlNodes() []Node {
	return []Node{{Path: "/dev/nvidiactl", Major: NVIDIAMajor, Minor: 255, FileMode: 0o666}}
}

func capNode(minor int64) Node {
	return Node{Path: "/dev/nvidia-caps/nvidia-cap" + strconv.FormatInt(minor, 10), Major: FakeCapsMajor, Minor: minor, FileMode: 0o444}
}
