// Package bootid reads the node's boot ID, the random UUID Linux draws at
// every boot and exposes in /proc/sys/kernel/random/boot_id (the kubelet
// reports the same value as a node's status.nodeInfo.bootID).
//
// Node-local checkpoints record it: no MIG instance and no container
// survives a reboot, so a checkpoint written under another boot ID
// describes hardware state that is gone, while one written under the
// current boot ID describes a restart of the process alone.
//
// [Read] is safe for concurrent use.
package bootid
