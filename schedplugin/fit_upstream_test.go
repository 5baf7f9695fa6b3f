package schedplugin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/dynmig/dynmig/kube"
)

// TestUpstreamFitHintChecksIgnoredResources states upstream behaviour
// (k8s.io/kubernetes v1.37.2, noderesources/fit.go): NodeResourcesFit's
// queueing hint for a node added or its allocatable changed checks the
// pod against the new node with Fits, which passes no ignored resources to
// fitsRequest. A MIG pod asking for nvidia.com/gpumem (advertised by no
// node) therefore gets QueueSkip for every node change, although Filter,
// which honours ignoredResources (or ignoredResourceGroups), admits it on
// that node. The extender's managedResources[].ignoredByScheduler is
// copied into the same NodeResourcesFitArgs.IgnoredResources by the
// scheduler (buildExtenders), so neither configuration makes the hint
// correct; the DynMIG profile has NodeResourcesFit ignore the device
// resource too and checks it itself, with hints of its own.
func TestUpstreamFitHintChecksIgnoredResources(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil)
	require.NoError(t, err)
	defer func() { cancel(); frameworkruntime.WaitForShutdown(fh) }()

	before := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")}}}
	after := before.DeepCopy() // the device plugin registered 7 devices
	after.Status.Allocatable[kube.ResourceGPU] = resource.MustParse("7")
	pod := func(gpumem bool) *corev1.Pod {
		limits := corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}
		if gpumem {
			limits[kube.ResourceGPUMem] = resource.MustParse("4000")
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "uid-p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}}}
	}
	strategy := &config.ScoringStrategy{Type: config.LeastAllocated, Resources: []config.ResourceSpec{{Name: "cpu", Weight: 1}}}
	tests := []struct {
		name       string
		args       config.NodeResourcesFitArgs
		gpumem     bool
		wantFilter fwk.Code
		wantHint   fwk.QueueingHint
	}{
		{"gpu only", config.NodeResourcesFitArgs{ScoringStrategy: strategy}, false, fwk.Success, fwk.Queue},
		{"gpumem ignored (ignoredResources)", config.NodeResourcesFitArgs{ScoringStrategy: strategy,
			IgnoredResources: []string{string(kube.ResourceGPUMem), string(kube.ResourceGPUMemPercentage)}}, true, fwk.Success, fwk.QueueSkip},
		{"gpumem ignored (ignoredResourceGroups)", config.NodeResourcesFitArgs{ScoringStrategy: strategy,
			IgnoredResourceGroups: []string{"nvidia.com"}}, true, fwk.Success, fwk.QueueSkip},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := noderesources.NewFit(ctx, &tc.args, fh, plfeature.Features{})
			require.NoError(t, err)
			fit := pl.(*noderesources.Fit)
			p := pod(tc.gpumem)
			ni := framework.NewNodeInfo()
			ni.SetNode(after)
			cs := framework.NewCycleState()
			_, st := fit.PreFilter(ctx, cs, p, []fwk.NodeInfo{ni})
			require.True(t, st.IsSuccess(), "%v", st)
			assert.Equal(t, tc.wantFilter, fit.Filter(ctx, cs, p, ni).Code(), "Filter on the node after the change")

			events, err := fit.EventsToRegister(ctx)
			require.NoError(t, err)
			var hint fwk.QueueingHintFn
			for _, ev := range events {
				if ev.Event.Resource == fwk.Node && ev.Event.ActionType&fwk.UpdateNodeAllocatable != 0 {
					hint = ev.QueueingHintFn
				}
			}
			require.NotNil(t, hint)
			got, err := hint(klog.Background(), p, before, after)
			require.NoError(t, err)
			assert.Equal(t, tc.wantHint, got, "upstream hint for the allocatable change")
		})
	}
}
