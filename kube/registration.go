package kube

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// RegistrationPublisher publishes a node's GPUs in the
// hami.io/node-nvidia-register node annotation. It is safe for concurrent
// use and keeps no state between calls.
type RegistrationPublisher struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger
}

// RegistrationPublisherOptions configures a [RegistrationPublisher]. The
// zero value works.
type RegistrationPublisherOptions struct {
	// Logger receives published changes; nil discards.
	Logger *slog.Logger
}

// NewRegistrationPublisher returns a publisher for node.
func NewRegistrationPublisher(client kubernetes.Interface, node string, opts RegistrationPublisherOptions) *RegistrationPublisher {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RegistrationPublisher{client: client, node: node, log: log}
}

// Publish encodes devs ([capability.EncodeNodeRegistration], which
// validates them) and patches the node annotation with a JSON merge patch,
// but only when the node's current value differs: it reads the node first,
// and reports whether it wrote. Encoding errors are capability's
// [*capability.RegistrationError]; API errors are returned as they come.
func (p *RegistrationPublisher) Publish(ctx context.Context, devs []capability.NodeDevice) (changed bool, err error) {
	value, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		return false, err
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if cur, ok := node.Annotations[capability.NodeRegisterAnnotation]; ok && cur == string(value) {
		return false, nil
	}
	patch := annotationPatch(capability.NodeRegisterAnnotation, string(value))
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, p.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, err
	}
	p.log.Info("published node registration", "node", p.node, "devices", len(devs))
	return true, nil
}

// PublishGPUs publishes the MIG-enabled GPUs of gpus ([capability.MIGNodeDevices]),
// healthy unless marked [capability.GPU.Unhealthy]. GPUs that cannot be
// published, such as those with MIG disabled, are left out and logged: they
// must not keep the rest from being scheduled. The error is
// [RegistrationPublisher.Publish]'s.
func (p *RegistrationPublisher) PublishGPUs(ctx context.Context, gpus []capability.GPU) (changed bool, err error) {
	devs, skipped := capability.MIGNodeDevices(gpus)
	for _, err := range skipped {
		p.log.Warn("GPU left out of the node registration", "node", p.node, "err", err)
	}
	return p.Publish(ctx, devs)
}

// annotationPatch returns {"metadata":{"annotations":{key:value}}}.
func annotationPatch(key, value string) []byte {
	// reservation.AnnotationPatch only writes its own key; build the same
	// shape for any key with encoding that cannot fail on strings.
	b := []byte(`{"metadata":{"annotations":{`)
	b = appendQuoted(b, key)
	b = append(b, ':')
	b = appendQuoted(b, value)
	return append(b, "}}}"...)
}

// NodeGPUs decodes a node's registration into the capability the scheduler
// works with ([capability.ReadNodeRegistration]): the devices in MIG mode,
// ordered by index, each with [capability.GPU.Unhealthy] set from the
// registration's health (placement never chooses an unhealthy GPU, and its
// pods keep their slots). A node without the annotation has no GPUs.
//
// A device entry that is malformed or invalid takes out that GPU only:
// gpus holds the others and err reports every rejected entry, wrapping
// capability's [*capability.RegistrationError] values (entry position and
// field, joined), so a scheduler keeps placing on gpus and logs err. When
// the value as a whole is unusable (not a JSON array), gpus is nil.
func NodeGPUs(node *corev1.Node) (gpus []capability.GPU, err error) {
	v, ok := node.Annotations[capability.NodeRegisterAnnotation]
	if !ok {
		return nil, nil
	}
	reg, err := capability.ReadNodeRegistration([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("kube: node %q annotation %s: %w", node.Name, capability.NodeRegisterAnnotation, err)
	}
	gpus = reg.GPUs()
	if err := reg.Err(); err != nil {
		return gpus, fmt.Errorf("kube: node %q annotation %s: %d GPUs left out: %w",
			node.Name, capability.NodeRegisterAnnotation, rejectedEntries(reg), err)
	}
	return gpus, nil
}

// rejectedEntries counts the entries with at least one rejection.
func rejectedEntries(reg capability.NodeRegistration) int {
	n, last := 0, -1
	for _, re := range reg.Rejected {
		if re.Device != last {
			n, last = n+1, re.Device
		}
	}
	return n
}

// PodAllocations decodes and validates a pod's hami.io/vgpu-mig-allocations
// annotation; a pod without it has none.
func PodAllocations(pod *corev1.Pod) ([]reservation.Allocation, error) {
	v, ok := pod.Annotations[reservation.AnnotationKey]
	if !ok {
		return nil, nil
	}
	allocs, err := reservation.DecodeString(v)
	if err != nil {
		return nil, err
	}
	if err := reservation.Validate(allocs); err != nil {
		return nil, err
	}
	return allocs, nil
}
