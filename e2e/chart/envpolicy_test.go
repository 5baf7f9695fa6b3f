package chart_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
)

// envPolicyName is the chart's policy against device-selecting variables,
// as the default rendering names it.
const envPolicyName = "dynmig-no-device-env"

// envRefusal returns nil when err is the env policy's refusal of the pod
// named pod: 403 with the policy's reason Forbidden, details naming the
// pod, and a cause from that policy (the API server names it) whose
// message names each of want. Otherwise it says what differs.
func envRefusal(err error, pod string, want ...string) error {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return fmt.Errorf("got %v, want the env policy's refusal", err)
	}
	s := status.Status()
	if s.Reason != metav1.StatusReasonForbidden || s.Code != 403 || s.Details == nil || s.Details.Kind != "pods" || s.Details.Name != pod {
		return fmt.Errorf("refusal %s (%d), details %+v; want Forbidden (403) of pods %s", s.Reason, s.Code, s.Details, pod)
	}
	for _, c := range s.Details.Causes {
		if !strings.Contains(c.Message, "ValidatingAdmissionPolicy '"+envPolicyName+"'") {
			continue
		}
		for _, w := range want {
			if !strings.Contains(c.Message, w) {
				return fmt.Errorf("the policy's message %q does not name %s", c.Message, w)
			}
		}
		return nil
	}
	return fmt.Errorf("no cause from policy %s: %+v", envPolicyName, s.Details.Causes)
}

// envFixture is a control plane with the chart installed (its env policy
// among its objects) and a namespace for workloads.
type envFixture struct {
	admin kubernetes.Interface
	n     int
}

func newEnvFixture(t *testing.T, ctx context.Context) *envFixture {
	t.Helper()
	c := cluster.Start(t, cluster.Options{})
	f := &envFixture{admin: c.Admin()}
	for _, ns := range []string{"dynmig-system", sealNS} {
		if _, err := f.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	objs := install(t, ctx, c, "extender")
	var policy admissionv1.ValidatingAdmissionPolicy
	find(t, objs, "ValidatingAdmissionPolicy", envPolicyName, &policy)

	// The policy is enforced once the API server has loaded it.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	if err := cluster.WaitFor(wait, 100*time.Millisecond, "the env policy in force", func(ctx context.Context) (bool, error) {
		p := f.pod(corev1.Container{Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}})
		_, last = f.admin.CoreV1().Pods(sealNS).Create(ctx, p, metav1.CreateOptions{})
		return envRefusal(last, p.Name) == nil, nil
	}); err != nil {
		t.Fatalf("%v (last: %v)", err, last)
	}
	return f
}

// pod returns a new pod, named uniquely, of one container c named cuda.
func (f *envFixture) pod(c corev1.Container) *corev1.Pod {
	f.n++
	c.Name, c.Image = "cuda", "cuda"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + strconv.Itoa(f.n)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
}

// TestEnvPolicyRefuses: with the chart's env policy installed on a real
// API server, a pod that chooses GPUs itself through the NVIDIA container
// toolkit (NVIDIA_VISIBLE_DEVICES or NVIDIA_MIG_CONFIG_DEVICES in a
// container's env, in an init container, in an ephemeral container added
// later, a mount under the toolkit's device-list directory) is refused
// with the policy's message naming the container and what it sets; other
// pods, and the exempt node components' namespace, are admitted; envFrom
// is beyond the policy.
func TestEnvPolicyRefuses(t *testing.T) {
	ctx := cluster.TestContext(t, 10*time.Minute)
	f := newEnvFixture(t, ctx)
	visible := []corev1.EnvVar{{Name: "A", Value: "b"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c00"}}

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []string // what the message names; nil admits
	}{
		{"visible devices", f.pod(corev1.Container{Env: visible}), []string{"containers cuda", "NVIDIA_VISIBLE_DEVICES in env"}},
		{"MIG config devices", f.pod(corev1.Container{Env: []corev1.EnvVar{{Name: "NVIDIA_MIG_CONFIG_DEVICES", Value: "all"}}}),
			[]string{"containers cuda", "NVIDIA_MIG_CONFIG_DEVICES in env"}},
		{"device list mount", withVolume(f.pod(corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/var/run/nvidia-container-devices/all"}}})),
			[]string{"containers cuda", "a mount under /var/run/nvidia-container-devices"}},
		{"init container", initWith(f.pod(corev1.Container{}), visible), []string{"initContainers setup", "NVIDIA_VISIBLE_DEVICES in env"}},
		{"other variables", f.pod(corev1.Container{Env: []corev1.EnvVar{{Name: "CUDA_VISIBLE_DEVICES", Value: "0"}, {Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "compute"}}}), nil},
		{"envFrom is beyond it", f.pod(corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gpus"}}}}}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.admin.CoreV1().Pods(sealNS).Create(ctx, tc.pod, metav1.CreateOptions{})
			if tc.want == nil {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if refusal := envRefusal(err, tc.pod.Name, tc.want...); refusal != nil {
				t.Error(refusal)
				return
			}
			t.Logf("refused: %v", err)
		})
	}

	t.Run("exempt namespace", func(t *testing.T) {
		// The device plugin sets NVIDIA_VISIBLE_DEVICES=all for itself in
		// the release's namespace.
		if _, err := f.admin.CoreV1().Pods("dynmig-system").Create(ctx, f.pod(corev1.Container{Env: visible}), metav1.CreateOptions{}); err != nil {
			t.Errorf("refused in the node components' namespace: %v", err)
		}
	})

	t.Run("ephemeral container", func(t *testing.T) {
		pod, err := f.admin.CoreV1().Pods(sealNS).Create(ctx, f.pod(corev1.Container{}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox", Env: visible, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}}}
		_, err = f.admin.CoreV1().Pods(sealNS).UpdateEphemeralContainers(ctx, pod.Name, pod, metav1.UpdateOptions{})
		if err := envRefusal(err, pod.Name, "ephemeralContainers debug", "NVIDIA_VISIBLE_DEVICES in env"); err != nil {
			t.Error(err)
		}
	})
}

// initWith gives p an init container named setup with env.
func initWith(p *corev1.Pod, env []corev1.EnvVar) *corev1.Pod {
	p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox", Env: env}}
	return p
}

// withVolume gives p an emptyDir volume named v.
func withVolume(p *corev1.Pod) *corev1.Pod {
	p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	return p
}
