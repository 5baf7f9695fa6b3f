package deviceplugin

import (
	"log/slog"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// SetRecordInterval sets how often the health loop reads the node's
// health record while it names a GPU, for tests, as SetPruneInterval.
func SetRecordInterval(d time.Duration) (restore func()) {
	old := recordInterval
	recordInterval = d
	return func() { recordInterval = old }
}

// SetPruneInterval sets how often the health loop prunes vanished MIG
// devices, for tests; call it before starting a plugin and the returned
// func after stopping it.
func SetPruneInterval(d time.Duration) (restore func()) {
	old := pruneInterval
	pruneInterval = d
	return func() { pruneInterval = old }
}

// PassRecordsHandOut runs, for tests, the checkpoint's side of a
// maintenance pass that finds in managed while in's pod is listed, on a
// fresh checkpoint under dir, and reports whether in's container is then
// recorded as handed a device.
func PassRecordsHandOut(dir string, in realize.ManagedInstance) bool {
	r := newNodeRecord(filepath.Join(dir, "checkpoint.json"), Checkpoint{}, true, "boot", slog.New(slog.DiscardHandler))
	snap := reservation.Snapshot{Complete: true, Pods: []reservation.Pod{{UID: in.Owner.PodUID}}}
	r.sync(func() []realize.ManagedInstance { return []realize.ManagedInstance{in} }, snap)
	return r.handed(types.UID(in.Owner.PodUID), in.Owner.ContainerIndex)
}

// OverlayInherited runs, for tests, the recorded view of an inherited
// pod (the plugin started without a checkpoint) whose recorded devices
// are recorded, on a fresh record under dir, and returns the view's
// record.
func OverlayInherited(dir string, pod reservation.Pod, recorded []HandedDevice) string {
	r := newNodeRecord(filepath.Join(dir, "checkpoint.json"), Checkpoint{Devices: recorded}, false, "boot", slog.New(slog.DiscardHandler))
	r.inherited[types.UID(pod.UID)] = true
	r.overlay(&pod)
	return pod.Annotations[reservation.AnnotationKey]
}

// InheritThenRead runs, for tests, the record of a plugin that starts
// without a checkpoint under dir and inherits pod (observed, and read by
// its first maintenance pass, before its first Allocate), and returns the
// recorded view of later's record, the same pod's record read afterwards:
// by that plugin once it serves, and by one restarted with its checkpoint.
func InheritThenRead(dir string, pod, later reservation.Pod) (serving, restarted string, err error) {
	path, log := filepath.Join(dir, "checkpoint.json"), slog.New(slog.DiscardHandler)
	r := newNodeRecord(path, Checkpoint{}, false, "boot", log)
	r.setObservations(map[types.UID]kube.Observation{types.UID(pod.UID): {At: time.Unix(1, 0)}})
	r.overlay(&pod)
	r.serving()
	view := later // overlay replaces, never changes, the annotation map
	r.overlay(&view)
	serving = view.Annotations[reservation.AnnotationKey]
	c, _, err := ReadCheckpoint(path)
	if err != nil {
		return "", "", err
	}
	r = newNodeRecord(path, c, true, "boot", log)
	view = later
	r.overlay(&view)
	return serving, view.Annotations[reservation.AnnotationKey], nil
}
