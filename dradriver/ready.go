package dradriver

import "errors"

// ErrNotReady: the driver has not yet registered with the kubelet and
// published its devices; [Driver.Ready] says so until [Driver.Run] has
// synced its claim informer, run the first maintenance pass and started
// the kubelet plugin.
var ErrNotReady = errors.New("dradriver: not yet serving the kubelet")

// Ready reports whether [Driver.Run] serves the kubelet: nil once its
// claim informer synced, the first maintenance pass ran and the kubelet
// plugin (registration and DRA sockets, ResourceSlice publisher) started;
// [ErrNotReady] before. It is the readiness probe's check.
func (d *Driver) Ready() error {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	if d.publisher == nil {
		return ErrNotReady
	}
	return nil
}
