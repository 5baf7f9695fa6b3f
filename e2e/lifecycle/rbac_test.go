package lifecycle_test

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/reservation"
)

// access is one request a component's ServiceAccount may or may not make.
type access struct {
	verb, group, resource, subresource, namespace string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.group != "" {
		s += "." + a.group
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	}
	return s
}

// TestRBAC checks the deployed RBAC and admission policy (deploy/rbac)
// against the API server's real authorizer and admission chain: each
// component's ServiceAccount may do what the component needs and nothing it
// must never do. Authorization is asked with SelfSubjectAccessReviews and
// the important denials are also attempted (403 Forbidden expected); the
// device plugin's own-node policy is checked by attempting writes.
func TestRBAC(t *testing.T) {
	ctx := cluster.TestContext(t, 10*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	schedulerSA, pluginSA := deployManifests(t, ctx, c)
	admin := c.Admin()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret, err := admin.CoreV1().Secrets(testNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "credentials"}, StringData: map[string]string{"password": "hunter2"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node-a", "node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	workload := func(name, node string) *corev1.Pod {
		p, err := admin.CoreV1().Pods(testNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	onA, onB := workload("on-node-a", "node-a"), workload("on-node-b", "node-b")

	// The device plugin of node-a, with its token bound to its pod there.
	pluginPod := createDaemonPod(t, ctx, admin, pluginSA, "node-a")
	pluginCfg, err := c.ServiceAccountConfig(ctx, pluginSA.Namespace, pluginSA.Name, cluster.TokenOptions{BoundPod: pluginPod})
	if err != nil {
		t.Fatal(err)
	}
	schedulerCfg, err := c.ServiceAccountConfig(ctx, schedulerSA.Namespace, schedulerSA.Name, cluster.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}

	components := []struct {
		name    string
		sa      saRef
		client  kubernetes.Interface
		allowed []access
		denied  []access
	}{
		{
			// kube-scheduler and the extender sidecar share this account.
			name:   "scheduler and extender",
			sa:     schedulerSA,
			client: clientFor(t, schedulerCfg),
			allowed: []access{
				{verb: "list", resource: "nodes"},
				{verb: "watch", resource: "nodes"},
				{verb: "list", resource: "pods"},
				{verb: "watch", resource: "pods"},
				{verb: "get", resource: "pods", namespace: testNamespace},
				{verb: "create", resource: "pods", subresource: "binding", namespace: testNamespace},
				{verb: "create", group: "events.k8s.io", resource: "events", namespace: testNamespace},
				{verb: "patch", group: "events.k8s.io", resource: "events", namespace: testNamespace},
			},
			// Not denied: deleting pods and updating pods/status, which
			// system:kube-scheduler grants for preemption and the
			// PodScheduled condition; the extender shares the account.
			// Not patch or update on pods: both scheduler modes write the
			// allocation record only in the binding.
			denied: []access{
				{verb: "get", resource: "secrets", namespace: testNamespace},
				{verb: "list", resource: "secrets"},
				{verb: "create", resource: "pods", namespace: testNamespace},
				{verb: "patch", resource: "pods", namespace: testNamespace},
				{verb: "update", resource: "pods", namespace: testNamespace},
				{verb: "patch", resource: "nodes"},
				{verb: "update", resource: "nodes"},
				{verb: "delete", resource: "nodes"},
				{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
				{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: metav1.NamespaceDefault},
			},
		},
		{
			name:   "device plugin",
			sa:     pluginSA,
			client: clientFor(t, pluginCfg),
			allowed: []access{
				{verb: "get", resource: "nodes"},
				{verb: "patch", resource: "nodes"},
				{verb: "list", resource: "pods"},
				{verb: "watch", resource: "pods"},
				{verb: "get", resource: "pods", namespace: testNamespace},
				{verb: "patch", resource: "pods", namespace: testNamespace},
				{verb: "create", group: "events.k8s.io", resource: "events", namespace: metav1.NamespaceDefault},
				{verb: "patch", group: "events.k8s.io", resource: "events", namespace: metav1.NamespaceDefault},
			},
			denied: []access{
				{verb: "get", resource: "secrets", namespace: testNamespace},
				{verb: "list", resource: "secrets"},
				{verb: "delete", resource: "pods", namespace: testNamespace},
				{verb: "create", resource: "pods", namespace: testNamespace},
				{verb: "create", resource: "pods", subresource: "binding", namespace: testNamespace},
				{verb: "update", resource: "pods", subresource: "status", namespace: testNamespace},
				{verb: "delete", resource: "nodes"},
				{verb: "create", resource: "events", namespace: metav1.NamespaceDefault},
				{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
			},
		},
	}
	for _, comp := range components {
		t.Run(comp.name, func(t *testing.T) {
			for _, a := range comp.allowed {
				if !can(t, comp.client, a) {
					t.Errorf("%s (%s) may not %s: want allowed", comp.name, comp.sa, a)
				}
			}
			for _, a := range comp.denied {
				if can(t, comp.client, a) {
					t.Errorf("%s (%s) may %s: want denied", comp.name, comp.sa, a)
				}
			}
			// The same denials, attempted.
			if _, err := comp.client.CoreV1().Secrets(testNamespace).Get(ctx, secret.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("%s reading a secret: got %v, want Forbidden", comp.name, err)
			}
			if _, err := comp.client.CoreV1().Pods(testNamespace).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("%s creating a pod: got %v, want Forbidden", comp.name, err)
			}
		})
	}

	t.Run("device plugin cannot delete pods", func(t *testing.T) {
		client := clientFor(t, pluginCfg)
		if err := client.CoreV1().Pods(testNamespace).Delete(ctx, onA.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("deleting a pod on its own node: got %v, want Forbidden", err)
		}
		if _, err := admin.CoreV1().Pods(testNamespace).Get(ctx, onA.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s: %v", onA.Name, err)
		}
	})

	t.Run("device plugin writes only to its own node", func(t *testing.T) {
		client := clientFor(t, pluginCfg)
		annotate := func(key, value string) []byte {
			return []byte(`{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}`)
		}
		patchPod := func(pod *corev1.Pod, body []byte) error {
			_, err := client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
			return err
		}
		patchNode := func(node string, body []byte) error {
			_, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
			return err
		}
		allocKey := reservation.AnnotationKey
		// The policy is enforced once the API server has loaded it: wait,
		// with a bound of its own, until a write to another node's pod is
		// refused (that write is harmless while it is not).
		err := cluster.WaitFor(ctx, 200*time.Millisecond, "the own-node admission policy", func(context.Context) (bool, error) {
			err := patchPod(onB, annotate(allocKey, "[]"))
			return refused(err), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name   string
			write  func() error
			refuse bool
		}{
			{name: "its annotation on a pod of its node", write: func() error { return patchPod(onA, annotate(allocKey, "[]")) }},
			{name: "its annotation on a pod of another node", write: func() error { return patchPod(onB, annotate(allocKey, "[]")) }, refuse: true},
			{name: "another annotation on a pod of its node", write: func() error { return patchPod(onA, annotate("example.com/other", "x")) }, refuse: true},
			{name: "a label on a pod of its node", write: func() error {
				return patchPod(onA, []byte(`{"metadata":{"labels":{"evil":"yes"}}}`))
			}, refuse: true},
			{name: "its registration on its node", write: func() error { return patchNode("node-a", annotate(capability.NodeRegisterAnnotation, "[]")) }},
			{name: "its registration on another node", write: func() error { return patchNode("node-b", annotate(capability.NodeRegisterAnnotation, "[]")) }, refuse: true},
			{name: "a taint on its node", write: func() error {
				return patchNode("node-a", []byte(`{"spec":{"taints":[{"key":"evil","effect":"NoSchedule"}]}}`))
			}, refuse: true},
		}
		for _, tc := range cases {
			err := tc.write()
			t.Logf("%s: %v", tc.name, err)
			if got := refused(err); got != tc.refuse {
				t.Errorf("%s: got %v, want refused %v", tc.name, err, tc.refuse)
			}
			if err != nil && !refused(err) {
				t.Errorf("%s: unexpected error %v", tc.name, err)
			}
		}

		// A token bound to no pod names no node: the plugin's account
		// then writes nothing at all.
		unbound, err := c.ServiceAccountConfig(ctx, pluginSA.Namespace, pluginSA.Name, cluster.TokenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := clientFor(t, unbound).CoreV1().Pods(testNamespace).Patch(ctx, onA.Name, types.MergePatchType, annotate(allocKey, "[]"), metav1.PatchOptions{}); !refused(err) {
			t.Errorf("a write with a token bound to no pod: got %v, want refused", err)
		}
	})
}

// refused reports whether the API server refused a request by
// authorization (403 Forbidden) or by an admission policy (a
// ValidatingAdmissionPolicy's Deny, 422 Invalid by default).
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

// can asks the API server's authorizer, as the client's own identity,
// whether it may make the request.
func can(t *testing.T, client kubernetes.Interface, a access) bool {
	t.Helper()
	rev, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("access review for %s: %v", a, err)
	}
	return rev.Status.Allowed
}
