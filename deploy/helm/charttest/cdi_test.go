package charttest_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// TestDevicePluginCDI: a cdi-* strategy passes -cdi-dir and mounts that
// host directory; envvar mounts nothing.
func TestDevicePluginCDI(t *testing.T) {
	for _, tt := range []struct {
		strategy string
		mounted  bool
	}{{"cdi-cri", true}, {"cdi-annotations", true}, {"envvar", false}, {"volume-mounts", false}} {
		objs := objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: map[string]any{"devicePlugin": map[string]any{"deviceListStrategy": tt.strategy}, "hostPaths": map[string]any{"cdiDir": "/run/cdi"}}})
		ds := named[*appsv1.DaemonSet](t, objs, "dynmig-device-plugin")
		dp := container(t, &ds.Spec.Template.Spec, "device-plugin")
		if s, _ := argValue(dp.Args, "device-list-strategy"); s != tt.strategy {
			t.Errorf("%s: -device-list-strategy=%q", tt.strategy, s)
		}
		dir, hasFlag := argValue(dp.Args, "cdi-dir")
		mounted := slices.ContainsFunc(dp.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/run/cdi" })
		hostPath := slices.ContainsFunc(ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == "/run/cdi" })
		if hasFlag != tt.mounted || mounted != tt.mounted || hostPath != tt.mounted || (hasFlag && dir != "/run/cdi") {
			t.Errorf("%s: -cdi-dir=%q (%v), mounted %v, host path %v; want all %v", tt.strategy, dir, hasFlag, mounted, hostPath, tt.mounted)
		}
	}
	objs := objects(t, charttest.Options{KubeVersion: "v1.37.2"})
	dp := container(t, &named[*appsv1.DaemonSet](t, objs, "dynmig-device-plugin").Spec.Template.Spec, "device-plugin")
	if s, _ := argValue(dp.Args, "device-list-strategy"); s != "cdi-cri" {
		t.Errorf("default -device-list-strategy=%q, want cdi-cri", s)
	}
}
