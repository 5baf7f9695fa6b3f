package kubetest

import (
	"encoding/json"
	"errors"
	"strconv"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// NewClientset returns a fake clientset holding objs whose pods behave as
// on a real API server (see the package documentation).
func NewClientset(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.PrependReactor("patch", "pods", mergePatchPod(c))
	c.PrependReactor("create", "pods", bindPod(c))
	return c
}

// mergePatchPod applies a pod merge patch with its resourceVersion
// precondition and bumps the version.
func mergePatchPod(c *fake.Clientset) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa, ok := a.(k8stesting.PatchAction)
		if !ok || pa.GetPatchType() != types.MergePatchType || pa.GetSubresource() != "" {
			return false, nil, nil
		}
		pod, err := getPod(c, pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		var pre struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &pre); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		if rv := pre.Metadata.ResourceVersion; rv != "" && rv != pod.ResourceVersion {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, pod.Name,
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		orig, err := json.Marshal(pod)
		if err != nil {
			return true, nil, err
		}
		merged, err := jsonpatch.MergePatch(orig, pa.GetPatch())
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		out := &corev1.Pod{}
		if err := json.Unmarshal(merged, out); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		out.ResourceVersion = nextVersion(pod.ResourceVersion)
		return true, out, c.Tracker().Update(podsGVR, out, out.Namespace)
	}
}

// bindPod makes pods/binding set spec.nodeName.
func bindPod(c *fake.Clientset) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b, ok := ca.GetObject().(*corev1.Binding)
		if !ok {
			return true, nil, apierrors.NewBadRequest("pods/binding: not a Binding")
		}
		pod, err := getPod(c, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		if pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods/binding"}, b.Name, errors.New("pod is already bound"))
		}
		pod.Spec.NodeName = b.Target.Name
		pod.ResourceVersion = nextVersion(pod.ResourceVersion)
		return true, b, c.Tracker().Update(podsGVR, pod, b.Namespace)
	}
}

// getPod returns a copy of the stored pod.
func getPod(c *fake.Clientset, namespace, name string) (*corev1.Pod, error) {
	obj, err := c.Tracker().Get(podsGVR, namespace, name)
	if err != nil {
		return nil, err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, apierrors.NewInternalError(errors.New("stored pod is not a *v1.Pod"))
	}
	return pod.DeepCopy(), nil
}

// nextVersion returns the resourceVersion after rv; an empty or
// non-numeric rv counts as 0.
func nextVersion(rv string) string {
	n, _ := strconv.Atoi(rv)
	return strconv.Itoa(n + 1)
}
