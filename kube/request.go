package kube

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dynmig/dynmig/placement"
)

// Pod annotations and container resources of a MIG request (wire
// compatibility, "Requests").
const (
	// VGPUModeAnnotation opts a pod in to MIG when set to [VGPUModeMIG].
	VGPUModeAnnotation = "nvidia.com/vgpu-mode"
	// VGPUModeMIG is the opt-in value.
	VGPUModeMIG = "mig"
	// UseGPUUUIDAnnotation and NoUseGPUUUIDAnnotation are comma-separated
	// GPU UUID allow and deny lists.
	UseGPUUUIDAnnotation   = "nvidia.com/use-gpuuuid"
	NoUseGPUUUIDAnnotation = "nvidia.com/nouse-gpuuuid"
	// UseGPUTypeAnnotation and NoUseGPUTypeAnnotation are comma-separated
	// GPU type allow and deny lists, matched as substrings of the NVML
	// device name ignoring case.
	UseGPUTypeAnnotation   = "nvidia.com/use-gputype"
	NoUseGPUTypeAnnotation = "nvidia.com/nouse-gputype"
	// ProfilePreferenceAnnotation lists profile names or prefixes to try
	// first, e.g. "4g" or "3g.20gb,2g".
	ProfilePreferenceAnnotation = "nvidia.com/mig-profile-preference"

	// ResourceGPU is the number of MIG devices a container requests.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// ResourceGPUMem is the memory per device in MiB.
	ResourceGPUMem corev1.ResourceName = "nvidia.com/gpumem"
	// ResourceGPUMemPercentage is the memory per device as a percentage of
	// the physical GPU's memory (1..100).
	ResourceGPUMemPercentage corev1.ResourceName = "nvidia.com/gpumem-percentage"
)

// ErrNotMIG is returned by [ParseRequest] and [ParseRequestFor] for a pod that does not carry
// nvidia.com/vgpu-mode: "mig"; it is not a MIG pod and not an error for the
// pod, only for the caller that asked for its MIG request.
var ErrNotMIG = errors.New("kube: pod does not opt in to MIG")

// ErrInvalidRequest is matched by every [*RequestError].
var ErrInvalidRequest = errors.New("kube: invalid MIG request")

// RequestError reports a pod whose MIG request cannot be parsed: which
// container (or the pod's annotations), which resource or annotation, the
// offending value and why. It matches [ErrInvalidRequest], and the
// placement.RequestError it was derived from, when any, with errors.Is and
// errors.As.
type RequestError struct {
	// Container is the containerIndex (init containers first), or -1 for
	// a pod annotation.
	Container int
	// ContainerName is the container's name, empty for pod annotations.
	ContainerName string
	// Field is the resource or annotation name, such as
	// "nvidia.com/gpumem".
	Field string
	// Value is the offending value as written in the pod.
	Value string
	// Reason says what is wrong.
	Reason string
	// Err is placement's validation error, or nil.
	Err error
}

func (e *RequestError) Error() string {
	var b strings.Builder
	b.WriteString("kube: invalid MIG request: ")
	if e.Container >= 0 {
		fmt.Fprintf(&b, "container %d (%q) ", e.Container, e.ContainerName)
	} else {
		b.WriteString("pod annotation ")
	}
	b.WriteString(e.Field)
	if e.Value != "" {
		fmt.Fprintf(&b, "=%q", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns [ErrInvalidRequest] and the placement error, if any.
func (e *RequestError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidRequest, e.Err}
	}
	return []error{ErrInvalidRequest}
}

// WantsMIG reports whether the pod opts in to MIG with
// nvidia.com/vgpu-mode: "mig" (exactly, as the deployed scheduler
// compares it).
func WantsMIG(pod *corev1.Pod) bool {
	return pod.Annotations[VGPUModeAnnotation] == VGPUModeMIG
}

// ParseRequest reads a MIG pod's request into placement's request model.
// Per container, indexed init containers first, then regular containers:
//
//   - nvidia.com/gpu is the device count (a whole number; absent or 0:
//     the container takes no device);
//   - nvidia.com/gpumem is MiB per device (a positive whole number);
//     otherwise nvidia.com/gpumem-percentage is the share of the physical
//     GPU's memory (1..100); with neither, the whole GPU is requested. When
//     both are set gpumem wins, as in the deployed scheduler.
//
// Limits are read, falling back to requests (Kubernetes requires the two
// to be equal for extended resources). A memory resource on a container
// without nvidia.com/gpu is refused rather than ignored.
//
// The pod annotations nvidia.com/use-gpuuuid, nouse-gpuuuid, use-gputype,
// nouse-gputype and mig-profile-preference are comma-separated lists
// ([placement.SplitList]).
//
// It returns [ErrNotMIG] when the pod does not opt in (a value that differs
// from "mig" only in case or white space is a [*RequestError], so that a
// typo is visible) and a [*RequestError] naming the container and field
// for anything malformed. The request has passed placement's Validate.
//
// ParseRequest reads the device count from [ResourceGPU]; a deployment
// whose device plugin serves another resource name uses [ParseRequestFor].
func ParseRequest(pod *corev1.Pod) (placement.Request, error) {
	return ParseRequestFor(pod, ResourceGPU)
}

// ParseRequestFor is [ParseRequest] with the device count read from gpu,
// the extended resource the device plugin serves (empty means
// [ResourceGPU]): the resource whose limits the trust rule checks
// reservations against ([SchedulerViewOptions.Resource], [PodViewFor]). A
// scheduler parses requests with the resource it builds its view with, or
// a pod's devices would be counted under one name and trusted under
// another. The memory resources keep their names ([ResourceGPUMem],
// [ResourceGPUMemPercentage]); a [*RequestError] about the device count
// names gpu.
func ParseRequestFor(pod *corev1.Pod, gpu corev1.ResourceName) (placement.Request, error) {
	if gpu == "" {
		gpu = ResourceGPU
	}
	mode, ok := pod.Annotations[VGPUModeAnnotation]
	if !ok || mode != VGPUModeMIG {
		if ok && strings.EqualFold(strings.TrimSpace(mode), VGPUModeMIG) {
			return placement.Request{}, &RequestError{Container: -1, Field: VGPUModeAnnotation, Value: mode,
				Reason: `must be exactly "mig" to opt in`}
		}
		return placement.Request{}, ErrNotMIG
	}
	req := placement.Request{
		Containers: make([]placement.ContainerRequest, ContainerCount(pod)),
		Preference: placement.SplitList(pod.Annotations[ProfilePreferenceAnnotation]),
		UseUUIDs:   placement.SplitList(pod.Annotations[UseGPUUUIDAnnotation]),
		NoUseUUIDs: placement.SplitList(pod.Annotations[NoUseGPUUUIDAnnotation]),
		UseTypes:   placement.SplitList(pod.Annotations[UseGPUTypeAnnotation]),
		NoUseTypes: placement.SplitList(pod.Annotations[NoUseGPUTypeAnnotation]),
	}
	for i := range req.Containers {
		c, err := parseContainer(i, ContainerAt(pod, i), gpu)
		if err != nil {
			return placement.Request{}, err
		}
		req.Containers[i] = c
	}
	if err := req.Validate(); err != nil {
		return placement.Request{}, fromPlacementError(pod, err, gpu)
	}
	return req, nil
}

func parseContainer(index int, c *corev1.Container, gpu corev1.ResourceName) (placement.ContainerRequest, error) {
	fail := func(name corev1.ResourceName, q resource.Quantity, reason string) error {
		return &RequestError{Container: index, ContainerName: c.Name, Field: string(name), Value: q.String(), Reason: reason}
	}
	devices, hasDevices, err := wholeResource(c, gpu, math.MaxInt32)
	if err != nil {
		return placement.ContainerRequest{}, fail(gpu, quantity(c, gpu), err.Error())
	}
	mem, hasMem, err := wholeResource(c, ResourceGPUMem, math.MaxInt64)
	if err != nil {
		return placement.ContainerRequest{}, fail(ResourceGPUMem, quantity(c, ResourceGPUMem), err.Error())
	}
	pct, hasPct, err := wholeResource(c, ResourceGPUMemPercentage, 100)
	if err != nil {
		return placement.ContainerRequest{}, fail(ResourceGPUMemPercentage, quantity(c, ResourceGPUMemPercentage), err.Error())
	}
	if !hasDevices || devices == 0 {
		for _, r := range []struct {
			name corev1.ResourceName
			set  bool
		}{{ResourceGPUMem, hasMem}, {ResourceGPUMemPercentage, hasPct}} {
			if r.set {
				return placement.ContainerRequest{}, fail(r.name, quantity(c, r.name), "set on a container that requests no "+string(gpu))
			}
		}
		return placement.ContainerRequest{}, nil
	}
	cr := placement.ContainerRequest{Devices: int(devices)}
	switch {
	case hasMem:
		if mem == 0 {
			return placement.ContainerRequest{}, fail(ResourceGPUMem, quantity(c, ResourceGPUMem), "must be at least 1 MiB")
		}
		cr.Memory = placement.MiB(uint64(mem))
	case hasPct:
		if pct == 0 {
			return placement.ContainerRequest{}, fail(ResourceGPUMemPercentage, quantity(c, ResourceGPUMemPercentage), "must be between 1 and 100")
		}
		cr.Memory = placement.Percent(uint32(pct))
	}
	return cr, nil
}

// quantity returns the container's limit for name, falling back to its
// request.
func quantity(c *corev1.Container, name corev1.ResourceName) resource.Quantity {
	if q, ok := c.Resources.Limits[name]; ok {
		return q
	}
	return c.Resources.Requests[name]
}

// wholeResource reads a non-negative whole-number resource no larger than
// limit, and whether it is set at all.
func wholeResource(c *corev1.Container, name corev1.ResourceName, limit int64) (int64, bool, error) {
	q, ok := c.Resources.Limits[name]
	if !ok {
		q, ok = c.Resources.Requests[name]
	}
	if !ok {
		return 0, false, nil
	}
	if q.Sign() < 0 {
		return 0, true, errors.New("must not be negative")
	}
	v, exact := q.AsInt64()
	if !exact {
		if q.MilliValue()%1000 != 0 {
			return 0, true, errors.New("must be a whole number")
		}
		return 0, true, errors.New("too large")
	}
	if v > limit {
		return 0, true, errors.New("must be at most " + strconv.FormatInt(limit, 10))
	}
	return v, true, nil
}

// fromPlacementError names the container and resource behind a
// placement.RequestError. parseContainer has already refused bad memory
// resources and SplitList drops empty list entries, so what placement
// still refuses is a device count (the pod's total above
// placement.MaxDevices); any other field is reported as placement names it.
func fromPlacementError(pod *corev1.Pod, err error, gpu corev1.ResourceName) error {
	re := &RequestError{Container: -1, Field: "request", Reason: err.Error(), Err: err}
	var pe *placement.RequestError
	if !errors.As(err, &pe) {
		return re
	}
	re.Field, re.Reason = pe.Field, pe.Reason
	if c := ContainerAt(pod, pe.Container); c != nil {
		re.Container, re.ContainerName = pe.Container, c.Name
		re.Field = string(gpu)
		if strings.HasPrefix(pe.Field, "Memory") {
			re.Field = string(ResourceGPUMem)
		}
	}
	return re
}
