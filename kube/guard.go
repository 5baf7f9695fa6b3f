package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Labels and names through which NVIDIA GPU Operator's MIG Manager claims a
// node.
const (
	// MIGConfigLabel selects the MIG geometry MIG Manager applies to the
	// node's GPUs.
	MIGConfigLabel = "nvidia.com/mig.config"
	// MIGConfigStateLabel is MIG Manager's progress report for
	// MIGConfigLabel: "pending", "rebooting", "success" or "failed".
	MIGConfigStateLabel = "nvidia.com/mig.config.state"
	// MIGManagerDeployLabel is the GPU Operator label that schedules the
	// MIG Manager DaemonSet onto the node ("true" or "false").
	MIGManagerDeployLabel = "nvidia.com/gpu.deploy.mig-manager"
	// MIGManagerAppLabelValue is the app label of MIG Manager pods.
	MIGManagerAppLabelValue = "nvidia-mig-manager"
)

// ErrMIGManagerOwnsNode is matched by the [*OwnershipError] a
// [OwnershipGuard] returns when NVIDIA MIG Manager may still mutate the
// node's MIG geometry.
var ErrMIGManagerOwnsNode = errors.New("kube: NVIDIA MIG Manager owns the node's MIG configuration")

// ErrOwnershipUnknown is matched when the guard could not read the node or
// its pods; the caller must not mutate GPUs it cannot prove it owns.
var ErrOwnershipUnknown = errors.New("kube: MIG ownership of the node cannot be determined")

// OwnershipError explains why the node is not safe to mutate and what to
// change. It matches [ErrMIGManagerOwnsNode] or [ErrOwnershipUnknown] with
// errors.Is, and the API error (when any) with errors.As.
type OwnershipError struct {
	Node string
	// Evidence lists what shows MIG Manager's ownership, such as
	// `label nvidia.com/mig.config="all-1g.5gb"` or
	// `pod gpu-operator/nvidia-mig-manager-x2k4q`.
	Evidence []string
	// Remedy says what an operator changes to hand the node over.
	Remedy string
	// Err is the API error when ownership is unknown.
	Err error
}

func (e *OwnershipError) Error() string {
	var b strings.Builder
	if e.Err != nil {
		fmt.Fprintf(&b, "kube: node %q: cannot determine MIG ownership: %v", e.Node, e.Err)
	} else {
		fmt.Fprintf(&b, "kube: node %q: NVIDIA MIG Manager owns its MIG configuration (%s)", e.Node, strings.Join(e.Evidence, "; "))
	}
	if e.Remedy != "" {
		b.WriteString(": ")
		b.WriteString(e.Remedy)
	}
	return b.String()
}

// Unwrap returns the sentinel and the API error.
func (e *OwnershipError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrOwnershipUnknown, e.Err}
	}
	return []error{ErrMIGManagerOwnsNode}
}

// The remedy text: removing the label alone is not enough while a
// controller can reapply it or recreate the DaemonSet pod.
const migManagerRemedy = "stop MIG Manager reconciliation on this node before dynamic MIG mutates its GPUs: " +
	"disable it in the GPU Operator ClusterPolicy (spec.migManager.enabled=false) or label the node " +
	MIGManagerDeployLabel + "=false, then remove the node labels " + MIGConfigLabel + " and " + MIGConfigStateLabel +
	" and make sure no controller reapplies them; deleting the MIG Manager pod alone does not hand the node over " +
	"(or set the explicit override to accept concurrent mutation)"

// OwnershipGuardOptions configures an [OwnershipGuard]. The zero value
// works.
type OwnershipGuardOptions struct {
	// Override disables the refusal: Check logs what it found and returns
	// nil. Only for operators who have stopped MIG Manager some other way.
	Override bool
	// PodNamePrefix marks MIG Manager pods by name; empty means
	// "nvidia-mig-manager". Pods labelled app=nvidia-mig-manager or
	// app.kubernetes.io/name=nvidia-mig-manager always count.
	PodNamePrefix string
	// Logger receives overridden refusals; nil discards.
	Logger *slog.Logger
}

// OwnershipGuard decides whether dynamic MIG may mutate a node's GPUs, that
// is whether NVIDIA MIG Manager has been taken off the node (design,
// "NVIDIA MIG Manager"). MIG Manager counts as owning the node when:
//
//   - the node carries [MIGConfigLabel] (any value, "all-disabled" too:
//     MIG Manager reconciles the node to it);
//   - [MIGConfigStateLabel] is "pending" or "rebooting" (a change is in
//     flight even if the config label was just removed);
//   - [MIGManagerDeployLabel] is "true" (the operator schedules MIG
//     Manager onto the node);
//   - a non-terminal pod labelled app=nvidia-mig-manager or
//     app.kubernetes.io/name=nvidia-mig-manager, or named with the MIG
//     Manager prefix, is scheduled to the node.
//
// When the node or its pods cannot be read, Check fails closed with
// [ErrOwnershipUnknown]. Check makes two API calls and keeps no state; it
// is safe for concurrent use.
type OwnershipGuard struct {
	client kubernetes.Interface
	node   string
	opts   OwnershipGuardOptions
	log    *slog.Logger
}

// NewOwnershipGuard returns a guard for node.
func NewOwnershipGuard(client kubernetes.Interface, node string, opts OwnershipGuardOptions) *OwnershipGuard {
	if opts.PodNamePrefix == "" {
		opts.PodNamePrefix = MIGManagerAppLabelValue
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &OwnershipGuard{client: client, node: node, opts: opts, log: log}
}

// Check returns nil when the node's GPUs may be mutated, and an
// [*OwnershipError] otherwise (or nil with the override set).
func (g *OwnershipGuard) Check(ctx context.Context) error {
	err := g.check(ctx)
	if err != nil && g.opts.Override {
		g.log.Warn("MIG ownership check overridden; mutating GPUs anyway", "node", g.node, "err", err)
		return nil
	}
	return err
}

func (g *OwnershipGuard) check(ctx context.Context) error {
	node, err := g.client.CoreV1().Nodes().Get(ctx, g.node, metav1.GetOptions{})
	if err != nil {
		return &OwnershipError{Node: g.node, Err: err, Remedy: "retry once the API server answers"}
	}
	evidence := LabelEvidence(node.Labels)
	pods, err := g.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", g.node).String(),
	})
	if err != nil {
		return &OwnershipError{Node: g.node, Evidence: evidence, Err: err, Remedy: "retry once the API server answers"}
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == g.node && g.isMIGManager(p) && !Terminal(p) {
			evidence = append(evidence, "pod "+p.Namespace+"/"+p.Name)
		}
	}
	if len(evidence) == 0 {
		return nil
	}
	return &OwnershipError{Node: g.node, Evidence: evidence, Remedy: migManagerRemedy}
}

func (g *OwnershipGuard) isMIGManager(p *corev1.Pod) bool {
	return p.Labels["app"] == MIGManagerAppLabelValue ||
		p.Labels["app.kubernetes.io/name"] == MIGManagerAppLabelValue ||
		strings.HasPrefix(p.Name, g.opts.PodNamePrefix)
}

// LabelEvidence returns the node labels that show MIG Manager ownership,
// each formatted as `label key="value"`, or nil when there are none. See
// [OwnershipGuard] for the rules.
func LabelEvidence(labels map[string]string) []string {
	var ev []string
	if v, ok := labels[MIGConfigLabel]; ok {
		ev = append(ev, fmt.Sprintf("label %s=%q", MIGConfigLabel, v))
	}
	if v := labels[MIGConfigStateLabel]; v == "pending" || v == "rebooting" {
		ev = append(ev, fmt.Sprintf("label %s=%q", MIGConfigStateLabel, v))
	}
	if v := labels[MIGManagerDeployLabel]; v == "true" {
		ev = append(ev, fmt.Sprintf("label %s=%q", MIGManagerDeployLabel, v))
	}
	return ev
}
