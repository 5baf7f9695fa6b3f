package deviceplugin

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/dynmig/dynmig/internal/leaf/bootid"
)

// ErrCheckpointInUse is matched by the [*CheckpointError] [New] returns
// when another plugin process holds the checkpoint directory's lock (a
// rolling update with surge, a stray copy): two processes would overwrite
// each other's hand-outs, so the second one stops instead.
var ErrCheckpointInUse = errors.New("deviceplugin: checkpoint directory locked by another plugin process")

// ErrBootID: the node's boot ID could not be read or is empty.
var ErrBootID = errors.New("deviceplugin: cannot read the node's boot ID")

// bootID returns the node's boot ID through read (nil reads the kernel's;
// see package bootid), or an error matching [ErrBootID].
func bootID(read func() (string, error)) (string, error) {
	boot, err := bootid.Read(read)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBootID, err)
	}
	return boot, nil
}

// openCheckpointDir creates the checkpoint's directory when missing, takes
// its exclusive lock ([lockDir]) and removes the temporary files an
// interrupted atomic write left there. The caller releases the lock by
// closing the returned file.
func openCheckpointDir(path string, log *slog.Logger) (*os.File, error) {
	dir := filepath.Dir(path)
	bad := func(err error) error { return &CheckpointError{Path: path, Pod: -1, Device: -1, Err: err} }
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, bad(err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, bad(err)
	}
	if err := removeStaleTemps(path, log); err != nil {
		lock.Close()
		return nil, bad(err)
	}
	return lock, nil
}

// removeStaleTemps removes the temporary files internal/leaf/atomicfile names
// after path (".<base>.tmp-*"): a write interrupted before its rename
// left them, and only the lock holder writes there.
func removeStaleTemps(path string, log *slog.Logger) error {
	stale, err := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*"))
	if err != nil {
		return err
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		log.Info("removed a temporary checkpoint file an interrupted write left", "file", f)
	}
	return nil
}
