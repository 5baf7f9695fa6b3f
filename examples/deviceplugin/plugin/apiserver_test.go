package plugin_test

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

// newClient is a fake API server that, like the real one, bumps the
// resourceVersion of every patched pod and enforces the resourceVersion
// precondition a merge patch carries; the plain fake clientset does
// neither, so a patch computed from a stale cached pod would silently
// overwrite a newer annotation.
func newClient(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.MergePatchType {
			return false, nil, nil
		}
		obj, err := c.Tracker().Get(podsGVR, pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod)
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
	})
	return c
}

func nextVersion(rv string) string {
	n, _ := strconv.Atoi(rv)
	return strconv.Itoa(n + 1)
}
