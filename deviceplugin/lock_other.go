//go:build !unix

package deviceplugin

import "os"

// lockDir opens dir without a lock: flock is a Unix call, and the kubelet
// runs device plugins on Linux only.
func lockDir(dir string) (*os.File, error) { return os.Open(dir) }
