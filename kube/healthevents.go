package kube

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/realize"
)

// Reasons of the Events a node component records on its node when a GPU's
// or MIG device's health changes ([HealthEventFor]).
const (
	ReasonGPUUnhealthy       = "GPUUnhealthy"       // Warning
	ReasonGPUHealthy         = "GPUHealthy"         // Normal: recovered
	ReasonMIGDeviceUnhealthy = "MIGDeviceUnhealthy" // Warning
	ReasonMIGDeviceHealthy   = "MIGDeviceHealthy"   // Normal
	ReasonGPUUnmonitored     = "GPUUnmonitored"     // Warning: its health cannot be watched
	ReasonGPUMonitored       = "GPUMonitored"       // Normal: watched again
)

// HealthAction is the action of GPU health Events.
const HealthAction = "MonitorGPUHealth"

// HealthEventFor returns the type, reason and note of the node Event for
// one health transition of a GPU whose UUID is uuid ("" when unknown).
// consequence, when not "", says what the transition means for pods and
// new instances, and ends the note.
func HealthEventFor(e realize.HealthEvent, uuid, consequence string) (eventtype, reason, note string) {
	reason, eventtype = ReasonGPUUnhealthy, corev1.EventTypeWarning
	switch {
	case e.Cause == realize.CauseUnmonitored:
		reason = ReasonGPUUnmonitored
	case e.Cause == realize.CauseMonitored:
		reason, eventtype = ReasonGPUMonitored, corev1.EventTypeNormal
	case e.Healthy && e.WholeGPU():
		reason, eventtype = ReasonGPUHealthy, corev1.EventTypeNormal
	case e.Healthy:
		reason, eventtype = ReasonMIGDeviceHealthy, corev1.EventTypeNormal
	case !e.WholeGPU():
		reason = ReasonMIGDeviceUnhealthy
	}
	note = e.String()
	if uuid != "" {
		note += " " + uuid
	}
	if consequence != "" {
		note += ": " + consequence
	}
	return eventtype, reason, note
}

// NodeReference is the reference a node component's Events regard: its
// node, with the node's UID (kubectl describe node matches Events by it).
// The UID is read from the API server once and kept; while that read
// fails the reference has none, and the Event is still recorded. It is
// safe for concurrent use.
type NodeReference struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger

	mu  sync.Mutex
	uid types.UID
}

// NewNodeReference returns the reference to node, read through client;
// failed reads are logged to log (nil: slog.Default()).
func NewNodeReference(client kubernetes.Interface, node string, log *slog.Logger) *NodeReference {
	if log == nil {
		log = slog.Default()
	}
	return &NodeReference{client: client, node: node, log: log}
}

// Get returns the node's reference, reading its UID (for up to 10 s) if
// it is not known yet.
func (r *NodeReference) Get(ctx context.Context) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: r.node}
	r.mu.Lock()
	ref.UID = r.uid
	r.mu.Unlock()
	if ref.UID != "" {
		return ref
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := r.client.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
	if err != nil {
		r.log.Warn("reading the node for its Events' reference", "node", r.node, "err", err)
		return ref
	}
	r.mu.Lock()
	r.uid = n.UID
	r.mu.Unlock()
	ref.UID = n.UID
	return ref
}
