package deviceplugin

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HealthAction is the action of the plugin's GPU health Events.
const HealthAction = "MonitorGPUHealth"

// nodeRef returns the reference the plugin's Events regard: this node, with
// its UID (kubectl describe node matches Events by it). The UID is read
// from the API server once and kept; while that read fails the reference
// has none, and the Event is still recorded.
func (p *Plugin) nodeRef(ctx context.Context) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: p.cfg.Node}
	p.mu.Lock()
	ref.UID = p.nodeUID
	p.mu.Unlock()
	if ref.UID != "" {
		return ref
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.Node, metav1.GetOptions{})
	if err != nil {
		p.log.Warn("reading the node for its Events' reference", "node", p.cfg.Node, "err", err)
		return ref
	}
	ref.UID = n.UID
	p.mu.Lock()
	p.nodeUID = n.UID
	p.mu.Unlock()
	return ref
}
