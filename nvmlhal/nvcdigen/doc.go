// Package nvcdigen describes MIG instances as CDI container edits with
// NVIDIA's own library, github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi
// (the code behind "nvidia-ctk cdi generate"): a MIG device's nodes, the
// control nodes, the driver's libraries and binaries found under the
// driver root, and the toolkit's hooks (nvidia-cdi-hook: symlinks, the
// ld cache, device-node protection), so that a container gets a working
// MIG device from its CDI spec alone, without the toolkit's legacy mode
// acting on NVIDIA_VISIBLE_DEVICES.
//
// A [Generator] implements deviceplugin.CDIGenerator and
// dradriver.CDIGenerator (both take the [migcdi.Instance] of package
// internal/leaf/migcdi), for the nvml backend of the node binaries; the
// fake backend keeps the components' node-only generators (NewFakeCDI).
//
// Like nvmlhal, the package needs cgo (the toolkit module links go-nvml):
// only the nvmlhal tree and the cgo build of the binaries import it, and
// every other package builds with CGO_ENABLED=0. Its tests run against
// package nvmlmock and a fake driver root (a MIG device's capability
// minors, which nvcdi reads from the host's /proc only, through a mount
// namespace private to the test's thread); what they cannot show without
// a real driver is listed in nvcdigen_test.go.
package nvcdigen
