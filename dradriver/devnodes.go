package dradriver

import "github.com/dynmig/dynmig/internal/leaf/devnodes"

// DeviceNode is one character device a CDI device injects into a
// container. Major and minor are given, so the container runtime creates
// the node in the container whether or not the host has it (the
// /dev/nvidia-caps nodes of a MIG device usually exist only once
// nvidia-modprobe made them).
type DeviceNode = devnodes.Node

// NodeSource finds the device nodes a container needs to use MIG devices.
// The driver's CDI specs inject them, so that a container runtime that
// does not act on NVIDIA_VISIBLE_DEVICES (the NVIDIA container toolkit in
// CDI mode, an unprivileged pod) still grants access to exactly the
// claim's MIG devices.
type NodeSource interface {
	// MIGNodes returns the nodes of the MIG device with GPU instance gi
	// and compute instance ci on the GPU gpuUUID: its GPU instance's and
	// compute instance's capability nodes, and its parent GPU's node.
	MIGNodes(gpuUUID string, gi, ci uint32) ([]DeviceNode, error)
	// GPUNodes returns the GPU's own node (for admin access).
	GPUNodes(gpuUUID string) ([]DeviceNode, error)
	// ControlNodes returns the nodes every container using an NVIDIA GPU
	// needs: /dev/nvidiactl, and /dev/nvidia-uvm and /dev/nvidia-uvm-tools
	// when the nvidia-uvm module is loaded.
	ControlNodes() ([]DeviceNode, error)
}

// ErrDeviceNodes: the device nodes of a device could not be found.
var ErrDeviceNodes = devnodes.ErrNotFound

// DeviceNodeError names the file [ErrDeviceNodes] is about.
type DeviceNodeError = devnodes.Error

// ProcNodes is a [NodeSource] reading the NVIDIA kernel driver's files
// under Root's /proc, as NVIDIA's own DRA driver does; the device plugin
// shares it (package internal/leaf/devnodes, which says what it reads). The
// zero value reads under "/".
type ProcNodes = devnodes.Proc

var _ NodeSource = ProcNodes{}
