package extender

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The scheduler extender wire types, mirroring
// k8s.io/kube-scheduler/extender/v1 (which declares no JSON tags, so the
// keys are the Go field names; encoding/json matches them case-insensitively
// on input).

// Args is the body of filter and prioritize calls.
type Args struct {
	Pod       *corev1.Pod
	Nodes     *corev1.NodeList // when the extender is not nodeCacheCapable
	NodeNames *[]string        // when it is
}

// FilterResult is the filter reply.
type FilterResult struct {
	Nodes                      *corev1.NodeList  `json:",omitempty"`
	NodeNames                  *[]string         `json:",omitempty"`
	FailedNodes                map[string]string `json:",omitempty"`
	FailedAndUnresolvableNodes map[string]string `json:",omitempty"`
	Error                      string            `json:",omitempty"`
}

// HostPriority is one node's score in a prioritize reply.
type HostPriority struct {
	Host  string
	Score int64
}

// MaxExtenderPriority is the highest score an extender returns.
const MaxExtenderPriority = 10

// BindingArgs is the body of a bind call.
type BindingArgs struct {
	PodName      string
	PodNamespace string
	PodUID       types.UID
	Node         string
}

// BindingResult is the bind reply; Error is empty on success.
type BindingResult struct {
	Error string `json:",omitempty"`
}

// names returns the candidate node names of args.
func (a *Args) names() []string {
	if a.NodeNames != nil {
		return *a.NodeNames
	}
	if a.Nodes == nil {
		return nil
	}
	out := make([]string, len(a.Nodes.Items))
	for i := range a.Nodes.Items {
		out[i] = a.Nodes.Items[i].Name
	}
	return out
}
