// Command migctl is the operator's tool for dynamic MIG: it speaks the wire
// formats of the scheduler and device plugin (hami.io/node-nvidia-register,
// hami.io/vgpu-mig-allocations, the device config's migProfileAllowlist, the
// metrics exposition) and reads Kubernetes JSON exactly as
// `kubectl get ... -o json` prints it (Pod, PodList, Node, NodeList and
// generic List; YAML works too). A JSON object without "kind" is not a
// Kubernetes object and is refused. Node registrations are read as the
// scheduler reads them: an unhealthy GPU (written without "health") keeps
// its pods but takes no new ones, and a malformed device entry leaves out
// that GPU only and is reported.
//
// Usage:
//
//	migctl <command> [flags] [args]
//
// Commands:
//
//	discover        node registration a fake node of the given GPU models would publish
//	validate        check a hami.io/vgpu-mig-allocations value, Pod or PodList
//	place           the allocation the scheduler would write for a pod on a node
//	status          per-GPU slot maps, reservations and fragmentation of a node
//	metrics         the exposition text the scheduler would serve for a node
//	defaults        the built-in migProfileAllowlist
//	convert-legacy  convert a v2.9 knownMigGeometries device config
//	simulate        compare placement policies on a trace
//	version         print migctl's version and VCS revision (also --version)
//
// Every command takes --help; `migctl version` prints the module version
// and VCS revision. Files may be "-" for standard input.
//
// A node that cannot take MIG pods (no hami.io/node-nvidia-register
// annotation, or no GPU in MIG mode) is an error naming what is missing,
// for every command that reads one.
//
// # Building
//
// migctl builds without cgo: CGO_ENABLED=0 go install
// github.com/dynmig/dynmig/cmd/migctl@latest gives a static migctl whose
// discover has no --nvml (reading a real node's GPUs needs cgo and gcc,
// because go-nvml does).
//
// Exit codes:
//
//	0   success
//	1   invalid input or findings (validation problems, malformed files,
//	    unreadable files, lossy legacy conversion)
//	2   place: the pod is unschedulable on the node
//	64  usage error (unknown command or flag, missing argument)
//
// The other dynmig commands (examples/lifecycle, the components under cmd/)
// follow the same convention: 0 for success and -h, 1 for a failure, 64 for
// a usage error.
package main
