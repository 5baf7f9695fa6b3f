package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/reservation"
)

// Annotation writer sentinels; every [*PatchError] matches one of them.
var (
	// ErrReservationChanged: the pod's reservation is no longer the one
	// that was realized (an entry vanished, a scheduler-written field
	// changed, or another writer stored a different runtime identity).
	// Nothing was written; the realized instance belongs to no record and
	// reconciliation will reclaim it.
	ErrReservationChanged = errors.New("kube: pod reservation changed since it was realized")
	// ErrPodGone: the pod was deleted, or replaced by a pod with another
	// UID, before the identity could be written.
	ErrPodGone = errors.New("kube: pod gone")
	// ErrTooManyConflicts: every attempt lost a resourceVersion race.
	ErrTooManyConflicts = errors.New("kube: too many update conflicts")
)

// PatchError reports a runtime identity that could not be written. It
// matches Kind and Err (the API or reservation error, when any) with
// errors.Is and errors.As.
type PatchError struct {
	Namespace, Name, UID string
	Attempts             int   // patch attempts made
	Kind                 error // ErrReservationChanged, ErrPodGone, ErrTooManyConflicts, or nil for an API error
	Err                  error
}

func (e *PatchError) Error() string {
	msg := fmt.Sprintf("kube: write runtime identity of pod %s/%s (%s) after %d attempts", e.Namespace, e.Name, e.UID, e.Attempts)
	if e.Kind != nil {
		msg += ": " + e.Kind.Error()
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Kind and Err.
func (e *PatchError) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// DefaultPatchAttempts bounds the attempts of an [AnnotationWriter].
const DefaultPatchAttempts = 5

// AnnotationWriterOptions configures an [AnnotationWriter]. The zero value
// works.
type AnnotationWriterOptions struct {
	// Attempts bounds the patch attempts per write (the first plus the
	// retries after conflicts); 0 means [DefaultPatchAttempts].
	Attempts int
	// Logger receives retries and refusals; nil discards.
	Logger *slog.Logger
}

// AnnotationWriter persists runtime identities into pods'
// hami.io/vgpu-mig-allocations annotation. It is safe for concurrent use
// and keeps no state between calls.
type AnnotationWriter struct {
	client   kubernetes.Interface
	attempts int
	log      *slog.Logger
}

// NewAnnotationWriter returns a writer that patches pods through client.
func NewAnnotationWriter(client kubernetes.Interface, opts AnnotationWriterOptions) *AnnotationWriter {
	w := &AnnotationWriter{client: client, attempts: opts.Attempts, log: opts.Logger}
	if w.attempts <= 0 {
		w.attempts = DefaultPatchAttempts
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	return w
}

// WriteRuntime stores the runtime identity of realized (entries with a
// complete runtime identity, as realize.Device.Entry) in pod's annotation
// and returns the pod as patched (or pod itself when the annotation already
// held every identity).
//
// pod is the version the reservation was realized from. Each attempt sends
// a JSON merge patch of the annotation carrying the pod's resourceVersion
// (when it has one, as every pod read from an API server does), so the API
// server applies it only to that version. On a conflict the
// writer re-reads the pod from the API server and re-validates: the pod
// must have the same UID, each realized entry must still exist with the
// same GPU, profile and placement, and its runtime identity must be
// absent, equal to ours, or the one pod held (which the realization
// replaced); otherwise it refuses with [ErrReservationChanged] without
// writing. Other API errors are returned at once. Errors are
// [*PatchError] values; an entry of realized without a complete runtime
// identity is one with a nil Kind matching reservation.ErrBadIdentity.
func (w *AnnotationWriter) WriteRuntime(ctx context.Context, pod *corev1.Pod, realized []reservation.Allocation) (*corev1.Pod, error) {
	fail := func(attempts int, kind, err error) (*corev1.Pod, error) {
		return nil, &PatchError{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Attempts: attempts, Kind: kind, Err: err}
	}
	for _, r := range realized {
		if _, ok := r.Runtime(); !ok {
			return fail(0, nil, &reservation.RuntimeError{ContainerIndex: r.ContainerIndex, DeviceIndex: r.DeviceIndex,
				Kind: reservation.ErrBadIdentity, Cause: reservation.ErrPartialRuntime})
		}
	}
	base, err := reservation.DecodeString(pod.Annotations[reservation.AnnotationKey])
	if err != nil {
		return fail(0, ErrReservationChanged, err)
	}
	cur := pod
	for attempt := 1; ; attempt++ {
		value, changed, err := mergeRuntime(cur.Annotations[reservation.AnnotationKey], base, realized)
		if err != nil {
			w.log.Warn("refusing to write runtime identity", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			return fail(attempt-1, ErrReservationChanged, err)
		}
		if !changed {
			return cur, nil
		}
		patch := reservation.AnnotationPatch(value, reservation.PatchOptions{ResourceVersion: cur.ResourceVersion})
		out, err := w.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil && out.UID != pod.UID:
			// Only possible without a resourceVersion precondition.
			return fail(attempt, ErrPodGone, nil)
		case err == nil:
			return out, nil
		case apierrors.IsNotFound(err):
			return fail(attempt, ErrPodGone, err)
		case !apierrors.IsConflict(err):
			return fail(attempt, nil, err)
		case attempt >= w.attempts:
			return fail(attempt, ErrTooManyConflicts, err)
		}
		w.log.Debug("runtime identity patch conflicted; re-reading the pod", "pod", pod.Namespace+"/"+pod.Name, "attempt", attempt)
		cur, err = w.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fail(attempt, ErrPodGone, err)
		case err != nil:
			return fail(attempt, nil, err)
		case cur.UID != pod.UID:
			return fail(attempt, ErrPodGone, nil)
		}
	}
}

// mergeRuntime fills the realized identities into value, the pod's current
// annotation. base is the record the identities were realized from: an
// identity that differs from ours may be replaced only if base held it too.
func mergeRuntime(value string, base, realized []reservation.Allocation) (string, bool, error) {
	allocs, err := reservation.DecodeString(value)
	if err != nil {
		return "", false, err
	}
	if err := reservation.Validate(allocs); err != nil {
		return "", false, err
	}
	changed := false
	for _, r := range realized {
		id, _ := r.Runtime() // checked by WriteRuntime
		i := entryIndex(allocs, r.ContainerIndex, r.DeviceIndex)
		if i < 0 {
			return "", false, &reservation.RuntimeError{ContainerIndex: r.ContainerIndex, DeviceIndex: r.DeviceIndex, Kind: reservation.ErrNoEntry}
		}
		if allocs[i].Scheduled() != r.Scheduled() {
			return "", false, &reservation.RuntimeError{ContainerIndex: r.ContainerIndex, DeviceIndex: r.DeviceIndex, Kind: reservation.ErrSchedulerField}
		}
		if have, ok := allocs[i].Runtime(); ok && have != id {
			if !heldBefore(base, r, have) {
				return "", false, &reservation.RuntimeError{ContainerIndex: r.ContainerIndex, DeviceIndex: r.DeviceIndex, Kind: reservation.ErrRuntimeMismatch}
			}
			allocs[i] = allocs[i].Scheduled() // the stale identity the realization replaced
		}
		c, err := reservation.ApplyRuntime(allocs, r.ContainerIndex, r.DeviceIndex, id)
		if err != nil {
			return "", false, err
		}
		changed = changed || c
	}
	if !changed {
		return value, false, nil
	}
	if err := reservation.Validate(allocs); err != nil {
		return "", false, err
	}
	return reservation.EncodeString(allocs), true, nil
}

// heldBefore reports whether base's entry for r held the identity id.
func heldBefore(base []reservation.Allocation, r reservation.Allocation, id reservation.RuntimeIdentity) bool {
	j := entryIndex(base, r.ContainerIndex, r.DeviceIndex)
	if j < 0 {
		return false
	}
	old, ok := base[j].Runtime()
	return ok && old == id
}

func entryIndex(allocs []reservation.Allocation, container, device int) int {
	for i := range allocs {
		if allocs[i].ContainerIndex == container && allocs[i].DeviceIndex == device {
			return i
		}
	}
	return -1
}
