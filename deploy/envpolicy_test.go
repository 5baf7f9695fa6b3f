package deploy_test

import (
	"encoding/json"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// envPolicy returns admission/env-policy.yaml's policy and binding.
func envPolicy(t *testing.T) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	var p *admissionv1.ValidatingAdmissionPolicy
	var b *admissionv1.ValidatingAdmissionPolicyBinding
	for _, o := range loadManifests(t) {
		if o.file != "admission/env-policy.yaml" {
			continue
		}
		switch v := o.obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			p = v
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			b = v
		}
	}
	if p == nil || b == nil {
		t.Fatal("admission/env-policy.yaml: want a ValidatingAdmissionPolicy and its binding")
	}
	return p, b
}

// admit evaluates the policy on pod as the API server would (variables
// first, then every validation; Kubernetes' CEL has the strings
// extension) and returns the messages of the validations that fail.
func admit(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, pod *corev1.Pod) []string {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("variables", cel.DynType), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var object map[string]any
	if err := json.Unmarshal(data, &object); err != nil {
		t.Fatal(err)
	}
	eval := func(expr string, vars map[string]any) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%q: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"object": object, "variables": vars})
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		return out.Value()
	}
	vars := map[string]any{}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = eval(v.Expression, vars)
	}
	var denied []string
	for _, v := range p.Spec.Validations {
		if ok, _ := eval(v.Expression, vars).(bool); !ok {
			msg := v.Message
			if v.MessageExpression != "" {
				msg, _ = eval(v.MessageExpression, vars).(string)
			}
			denied = append(denied, msg)
		}
	}
	return denied
}

// TestEnvPolicy: a pod whose containers of any kind set a device-selecting
// variable in env, or mount under the toolkit's device-list directory, is
// refused with a message naming the containers and what each list of them
// sets or mounts; other pods pass. envFrom
// is beyond it (the toolkit's settings close that).
func TestEnvPolicy(t *testing.T) {
	p, b := envPolicy(t)
	if got := b.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values; len(got) != 1 || got[0] != namespace {
		t.Errorf("exempt namespaces %v, want the node components' %s", got, namespace)
	}
	env := func(name string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "A", Value: "b"}, {Name: name, Value: "all"}}
	}
	mount := []corev1.VolumeMount{{Name: "v", MountPath: "/var/run/nvidia-container-devices/all"}}
	const advice = "; request them from the device plugin instead"
	tests := []struct {
		name string
		pod  corev1.PodSpec
		want string // the message; "" admits
	}{
		{"clean", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: env("CUDA_VISIBLE_DEVICES")}}}, ""},
		{"no env", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, ""},
		{"envFrom is not seen", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{}}}}}}, ""},
		{"visible devices", corev1.PodSpec{Containers: []corev1.Container{{Name: "ok"}, {Name: "c", Env: env("NVIDIA_VISIBLE_DEVICES")}}},
			"containers c choose GPUs themselves (NVIDIA_VISIBLE_DEVICES in env)" + advice},
		{"mig config", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: env("NVIDIA_MIG_CONFIG_DEVICES")}}}, "containers c choose GPUs themselves (NVIDIA_MIG_CONFIG_DEVICES in env)" + advice},
		{"mig monitor", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: env("NVIDIA_MIG_MONITOR_DEVICES")}}}, "containers c choose GPUs themselves (NVIDIA_MIG_MONITOR_DEVICES in env)" + advice},
		{"imex", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: env("NVIDIA_IMEX_CHANNELS")}}}, "containers c choose GPUs themselves (NVIDIA_IMEX_CHANNELS in env)" + advice},
		{"several", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Env: env("NVIDIA_IMEX_CHANNELS")}, {Name: "b", Env: env("NVIDIA_VISIBLE_DEVICES"), VolumeMounts: mount}}},
			"containers a, b choose GPUs themselves (NVIDIA_VISIBLE_DEVICES in env, NVIDIA_IMEX_CHANNELS in env, a mount under /var/run/nvidia-container-devices)" + advice},
		{"init container", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}, InitContainers: []corev1.Container{{Name: "i", Env: env("NVIDIA_VISIBLE_DEVICES")}}},
			"initContainers i choose GPUs themselves (NVIDIA_VISIBLE_DEVICES in env)" + advice},
		{"ephemeral container", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Env: env("NVIDIA_VISIBLE_DEVICES")}}}},
			"ephemeralContainers debug choose GPUs themselves (NVIDIA_VISIBLE_DEVICES in env)" + advice},
		{"volume mount", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", VolumeMounts: mount}}}, "containers c choose GPUs themselves (a mount under /var/run/nvidia-container-devices)" + advice},
		{"volume mount under /run", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/run/nvidia-container-devices"}}}}},
			"containers c choose GPUs themselves (a mount under /var/run/nvidia-container-devices)" + advice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			denied := admit(t, p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}, Spec: tt.pod})
			switch {
			case tt.want == "" && len(denied) > 0:
				t.Errorf("refused: %v", denied)
			case tt.want != "" && len(denied) != 1:
				t.Errorf("refusals %v, want one", denied)
			case tt.want != "" && denied[0] != tt.want:
				t.Errorf("message %q, want %q", denied[0], tt.want)
			}
		})
	}
}
