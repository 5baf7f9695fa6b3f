// Package devnodes finds the character devices a container needs to use
// an NVIDIA MIG device: its parent GPU's /dev/nvidia<minor>, its GPU and
// compute instances' /dev/nvidia-caps nodes, and the driver's control
// nodes. [Proc] reads them from the NVIDIA kernel driver's /proc files;
// [Fake] numbers them for fake hardware. The DRA driver and the device
// plugin put them into CDI specs; it imports only the standard library.
package devnodes
