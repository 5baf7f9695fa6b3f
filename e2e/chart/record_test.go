package chart_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// recordPolicyPath is the chart's checked-in rendering of its sealing
// policy with recordPolicy.writers ["e2e/migration-writer"]
// (deploy/helm/charttest keeps it current).
func recordPolicyPath() string {
	return strings.TrimSuffix(renderedPath("extender"), "rendered.yaml") + "record-policy.yaml"
}

// sealed reports whether err is the sealing policy's refusal: a
// ValidatingAdmissionPolicy's denial by a failed validation (422 Invalid,
// its default reason; a policy that fails to evaluate refuses with 403
// Forbidden instead) whose message names the record's key. The key is the
// constant every component reads, not a copy of the message.
func sealed(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		return false
	}
	return strings.Contains(status.Status().Message, reservation.AnnotationKey)
}

// sealFixture is a control plane with the chart installed (its RBAC, its
// node policy and its sealing policy with one listed writer) and the
// clients of each party.
type sealFixture struct {
	admin, owner, scheduler, plugin, writer kubernetes.Interface
	pluginNode                              string
	n                                       int
}

const sealNS = "e2e"

// twoDevices is a record of two 1g devices of one container, on GPU-A at
// slots 0 and 1, as the scheduler binds it.
var twoDevices = []reservation.Allocation{
	{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f", Profile: "1g.10gb", Placement: capability.Placement{Start: 0, Size: 1}},
	{ContainerIndex: 0, DeviceIndex: 1, GPUUUID: "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f", Profile: "1g.10gb", Placement: capability.Placement{Start: 1, Size: 1}},
}

// realized returns allocs with a complete runtime identity on each entry.
func realized(allocs []reservation.Allocation, gi uint32) []reservation.Allocation {
	out := make([]reservation.Allocation, len(allocs))
	for i, a := range allocs {
		a.MIGUUID = fmt.Sprintf("MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c%02x", int(gi)+i)
		a.GPUInstanceID = reservation.SomeID(gi + uint32(i))
		a.ComputeInstanceID = reservation.SomeID(0)
		out[i] = a
	}
	return out
}

func newSealFixture(t *testing.T, ctx context.Context) *sealFixture {
	t.Helper()
	c := cluster.Start(t, cluster.Options{})
	admin := c.Admin()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "dynmig-system", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The rendering with a listed writer first: install leaves the
	// default rendering's policy of the same name alone.
	if _, err := c.ApplyManifests(ctx, recordPolicyPath()); err != nil {
		t.Fatal(err)
	}
	objs := install(t, ctx, c, "extender")
	var sched appsv1.Deployment
	var ds appsv1.DaemonSet
	find(t, objs, "Deployment", "dynmig-scheduler", &sched)
	find(t, objs, "DaemonSet", "dynmig-device-plugin", &ds)
	for _, name := range []string{"node-a", "node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sealNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := &sealFixture{admin: admin, pluginNode: "node-a"}

	// The device plugin of node-a, with a token bound to its pod there.
	pluginSA := ds.Spec.Template.Spec.ServiceAccountName
	pluginPod, err := admin.CoreV1().Pods("dynmig-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dynmig-device-plugin-node-a"},
		Spec: corev1.PodSpec{NodeName: f.pluginNode, ServiceAccountName: pluginSA,
			Containers: []corev1.Container{{Name: "device-plugin", Image: "device-plugin"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ServiceAccountConfig(ctx, "dynmig-system", pluginSA, cluster.TokenOptions{BoundPod: pluginPod})
	if err != nil {
		t.Fatal(err)
	}
	f.plugin = clientFor(t, cfg)
	if cfg, err = c.ServiceAccountConfig(ctx, "dynmig-system", sched.Spec.Template.Spec.ServiceAccountName, cluster.TokenOptions{}); err != nil {
		t.Fatal(err)
	}
	f.scheduler = clientFor(t, cfg)

	// The pods' owner has the rights on pods that the built-in edit role
	// grants (its rules are aggregated by the controller manager, which
	// this control plane does not run); the migration writer may patch
	// pods.
	for name, verbs := range map[string][]string{
		"pod-owner":  {"get", "list", "watch", "create", "update", "patch", "delete"},
		"patch-pods": {"get", "patch"},
	} {
		if _, err := admin.RbacV1().Roles(sealNS).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: verbs}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.owner = f.account(t, ctx, c, "owner", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-owner"})
	f.writer = f.account(t, ctx, c, "migration-writer", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "patch-pods"})

	// The policy is enforced once the API server has loaded it.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	if err := cluster.WaitFor(wait, 100*time.Millisecond, "the sealing policy in force", func(ctx context.Context) (bool, error) {
		_, last = f.owner.CoreV1().Pods(sealNS).Create(ctx, f.pod(reservation.EncodeString(twoDevices)), metav1.CreateOptions{})
		return sealed(last), nil
	}); err != nil {
		t.Fatalf("%v (last: %v)", err, last)
	}
	return f
}

// account creates the ServiceAccount e2e/name bound to role in e2e and
// returns a client authenticated as it.
func (f *sealFixture) account(t *testing.T, ctx context.Context, c *cluster.Cluster, name string, role rbacv1.RoleRef) kubernetes.Interface {
	t.Helper()
	if _, err := f.admin.CoreV1().ServiceAccounts(sealNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.RbacV1().RoleBindings(sealNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: role,
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sealNS, Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ServiceAccountConfig(ctx, sealNS, name, cluster.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return clientFor(t, cfg)
}

// pod returns a new MIG pod of two devices, named uniquely, carrying
// record when it is not "".
func (f *sealFixture) pod(record string) *corev1.Pod {
	f.n++
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mig-" + strconv.Itoa(f.n), Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec:       corev1.PodSpec{SchedulerName: "dynmig-scheduler", Containers: []corev1.Container{{Name: "cuda", Image: "cuda"}}},
	}
	if record != "" {
		p.Annotations[reservation.AnnotationKey] = record
	}
	return p
}

// bind creates a pod as its owner and binds it to node through client
// with annotations in the Binding, as both scheduler modes do.
func (f *sealFixture) bind(t *testing.T, ctx context.Context, client kubernetes.Interface, node string, annotations map[string]string) (*corev1.Pod, error) {
	t.Helper()
	pod, err := f.owner.CoreV1().Pods(sealNS).Create(ctx, f.pod(""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = client.CoreV1().Pods(sealNS).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: sealNS, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if err != nil {
		return pod, err
	}
	return f.admin.CoreV1().Pods(sealNS).Get(ctx, pod.Name, metav1.GetOptions{})
}

// bound returns a pod the scheduler bound to node with allocs.
func (f *sealFixture) bound(t *testing.T, ctx context.Context, node string, allocs []reservation.Allocation) *corev1.Pod {
	t.Helper()
	pod, err := f.bind(t, ctx, f.scheduler, node, map[string]string{
		reservation.AnnotationKey: reservation.EncodeString(allocs),
		kube.BindTimeAnnotation:   strconv.FormatInt(time.Now().Unix(), 10),
	})
	if err != nil {
		t.Fatalf("the scheduler's binding: %v", err)
	}
	return pod
}

// patch sends a JSON merge patch of pod's annotation key (value nil
// removes it).
func patch(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, key string, value *string) error {
	v := "null"
	if value != nil {
		v = strconv.Quote(*value)
	}
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	_, err := client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	return err
}

func ptr(s string) *string { return &s }

// TestRecordSealed: with the chart's sealing policy installed on a real
// API server, the allocation record arrives only with the dynmig
// scheduler's binding; its owner cannot create a pod with it, strip, move,
// swap or forge it; the device plugin of the pod's node can write runtime
// identities and nothing else; a listed writer can still patch it.
func TestRecordSealed(t *testing.T) {
	ctx := cluster.TestContext(t, 10*time.Minute)
	f := newSealFixture(t, ctx)
	record := reservation.EncodeString(twoDevices)

	t.Run("owner creates a pod with the record", func(t *testing.T) {
		_, err := f.owner.CoreV1().Pods(sealNS).Create(ctx, f.pod(record), metav1.CreateOptions{})
		if !sealed(err) {
			t.Errorf("got %v, want the policy's refusal", err)
		}
	})

	t.Run("scheduler binds with the record", func(t *testing.T) {
		// The binding's annotations reach the pod although the policy
		// refuses every pod UPDATE that adds the record: the API server
		// writes a bound pod without a pod UPDATE admission.
		pod := f.bound(t, ctx, f.pluginNode, twoDevices)
		if pod.Spec.NodeName != f.pluginNode || pod.Annotations[reservation.AnnotationKey] != record {
			t.Errorf("bound pod: node %q, record %q", pod.Spec.NodeName, pod.Annotations[reservation.AnnotationKey])
		}
	})

	t.Run("another account binds with the record", func(t *testing.T) {
		// Admission sees the Binding (pods/binding CREATE) with its
		// annotations: a cluster admin's binding with a record is refused,
		// one without is not.
		if _, err := f.bind(t, ctx, f.admin, f.pluginNode, map[string]string{reservation.AnnotationKey: record}); !sealed(err) {
			t.Errorf("admin's binding with the record: got %v, want the policy's refusal", err)
		}
		if _, err := f.bind(t, ctx, f.admin, f.pluginNode, map[string]string{"example.com/other": "x"}); err != nil {
			t.Errorf("admin's binding without the record: %v", err)
		}
	})

	moved := slicesClone(twoDevices)
	moved[1].Placement.Start = 2
	swapped := slicesClone(twoDevices)
	swapped[0].Placement, swapped[1].Placement = swapped[1].Placement, swapped[0].Placement
	for _, tc := range []struct {
		name  string
		value *string
	}{
		{"strip", nil},
		{"empty", ptr("")},
		{"move", ptr(reservation.EncodeString(moved))},
		{"swap", ptr(reservation.EncodeString(swapped))},
		{"forged runtime identity", ptr(reservation.EncodeString(realized(twoDevices, 7)))},
	} {
		t.Run("owner "+tc.name, func(t *testing.T) {
			pod := f.bound(t, ctx, f.pluginNode, twoDevices)
			if err := patch(ctx, f.owner, pod, reservation.AnnotationKey, tc.value); !sealed(err) {
				t.Errorf("got %v, want the policy's refusal", err)
			}
			// The same owner may still write other annotations.
			if err := patch(ctx, f.owner, pod, "example.com/note", ptr("x")); err != nil {
				t.Errorf("another annotation: %v", err)
			}
		})
	}

	t.Run("owner adds the record to an unbound pod", func(t *testing.T) {
		pod, err := f.owner.CoreV1().Pods(sealNS).Create(ctx, f.pod(""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := patch(ctx, f.owner, pod, reservation.AnnotationKey, &record); !sealed(err) {
			t.Errorf("got %v, want the policy's refusal", err)
		}
	})

	t.Run("status update strips the record", func(t *testing.T) {
		// pods/status keeps the metadata sent, so it is sealed too.
		pod := f.bound(t, ctx, f.pluginNode, twoDevices)
		delete(pod.Annotations, reservation.AnnotationKey)
		if _, err := f.admin.CoreV1().Pods(sealNS).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); !sealed(err) {
			t.Errorf("got %v, want the policy's refusal", err)
		}
	})

	t.Run("device plugin writes runtime identities on its node", func(t *testing.T) {
		pod := f.bound(t, ctx, f.pluginNode, twoDevices)
		w := kube.NewAnnotationWriter(f.plugin, kube.AnnotationWriterOptions{})
		got, err := w.WriteRuntime(ctx, pod, realized(twoDevices, 3))
		if err != nil {
			t.Fatalf("the plugin's runtime patch: %v", err)
		}
		if want := reservation.EncodeString(realized(twoDevices, 3)); got.Annotations[reservation.AnnotationKey] != want {
			t.Errorf("record %s, want %s", got.Annotations[reservation.AnnotationKey], want)
		}
		// A new identity for a re-realized device replaces the old one.
		if _, err := w.WriteRuntime(ctx, got, realized(twoDevices, 5)); err != nil {
			t.Errorf("replacing the identity: %v", err)
		}
	})

	t.Run("device plugin writes anything else", func(t *testing.T) {
		added := append(slicesClone(twoDevices), reservation.Allocation{ContainerIndex: 0, DeviceIndex: 2,
			GPUUUID: twoDevices[0].GPUUUID, Profile: "1g.10gb", Placement: capability.Placement{Start: 2, Size: 1}})
		reordered := []reservation.Allocation{twoDevices[1], twoDevices[0]}
		spaced := strings.ReplaceAll(reservation.EncodeString(realized(twoDevices, 3)), ",", ", ")
		for _, tc := range []struct {
			name  string
			value *string
		}{
			{"strip", nil},
			{"move", ptr(reservation.EncodeString(realized(moved, 3)))},
			{"swap", ptr(reservation.EncodeString(realized(swapped, 3)))},
			{"reorder", ptr(reservation.EncodeString(reordered))},
			{"add an entry", ptr(reservation.EncodeString(added))},
			{"remove an entry", ptr(reservation.EncodeString(realized(twoDevices[:1], 3)))},
			{"non-canonical form", &spaced},
		} {
			pod := f.bound(t, ctx, f.pluginNode, twoDevices)
			if err := patch(ctx, f.plugin, pod, reservation.AnnotationKey, tc.value); !sealed(err) {
				t.Errorf("%s: got %v, want the policy's refusal", tc.name, err)
			}
		}
		// A pod without a record gets none from the plugin.
		pod, err := f.bind(t, ctx, f.scheduler, f.pluginNode, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := patch(ctx, f.plugin, pod, reservation.AnnotationKey, &record); !sealed(err) {
			t.Errorf("adding a record: got %v, want the policy's refusal", err)
		}
	})

	t.Run("listed writer patches", func(t *testing.T) {
		// A HAMi scheduler during a migration patches the record before
		// it binds, and may change it.
		pod, err := f.owner.CoreV1().Pods(sealNS).Create(ctx, f.pod(""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := patch(ctx, f.writer, pod, reservation.AnnotationKey, &record); err != nil {
			t.Errorf("adding the record: %v", err)
		}
		if err := patch(ctx, f.writer, pod, reservation.AnnotationKey, ptr(reservation.EncodeString(moved))); err != nil {
			t.Errorf("changing the record: %v", err)
		}
	})

	// Last: it removes the node policy's binding.
	t.Run("device plugin writes on another node's pod", func(t *testing.T) {
		pod := f.bound(t, ctx, "node-b", twoDevices)
		value := reservation.EncodeString(realized(twoDevices, 3))
		if err := patch(ctx, f.plugin, pod, reservation.AnnotationKey, &value); !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Fatalf("got %v, want refused", err)
		}
		// The node policy refuses it too. Without that policy (the
		// chart's devicePlugin.nodePolicy false) the sealing policy
		// still does.
		if err := f.admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, "dynmig-device-plugin-own-node", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := cluster.WaitFor(ctx, 100*time.Millisecond, "the sealing policy's own refusal", func(ctx context.Context) (bool, error) {
			err := patch(ctx, f.plugin, pod, reservation.AnnotationKey, &value)
			if err == nil {
				return false, errors.New("the plugin wrote a record on another node's pod")
			}
			return sealed(err), nil
		})
		if err != nil {
			t.Error(err)
		}
	})
}

func slicesClone(a []reservation.Allocation) []reservation.Allocation {
	return append([]reservation.Allocation(nil), a...)
}
