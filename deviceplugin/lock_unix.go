//go:build unix

package deviceplugin

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on dir without waiting; a lock another
// open file holds, in this process or another, is [ErrCheckpointInUse].
// Closing the returned file releases it, and so does the process's end.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrCheckpointInUse
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}
