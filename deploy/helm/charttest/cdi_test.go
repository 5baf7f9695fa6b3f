package charttest_test

import (
	"slices"
	"strings"
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

// TestDriverRoot: devicePlugin.driverRoot and draDriver.driverRoot render
// as -driver-root; "/" (the default) mounts nothing more, another path is
// the host's directory mounted read-only at that path, so that the specs
// name host paths; the schema refuses a relative path.
func TestDriverRoot(t *testing.T) {
	both := func(root string) map[string]any {
		vals := map[string]any{
			"devicePlugin": map[string]any{"nodeSelector": map[string]any{"dynmig.io/dra": "false"}},
			"draDriver":    map[string]any{"enabled": true, "nodeSelector": map[string]any{"dynmig.io/dra": "true"}},
		}
		if root != "" {
			vals["devicePlugin"].(map[string]any)["driverRoot"] = root
			vals["draDriver"].(map[string]any)["driverRoot"] = root
		}
		return vals
	}
	for _, tt := range []struct{ value, want string }{{"", "/"}, {"/run/nvidia/driver", "/run/nvidia/driver"}} {
		objs := objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: both(tt.value)})
		for _, w := range []struct{ ds, container string }{{"dynmig-device-plugin", "device-plugin"}, {"dynmig-dra-driver", "driver"}} {
			spec := &named[*appsv1.DaemonSet](t, objs, w.ds).Spec.Template.Spec
			c := container(t, spec, w.container)
			if root, _ := argValue(c.Args, "driver-root"); root != tt.want {
				t.Errorf("%s: -driver-root=%q, want %q", w.ds, root, tt.want)
			}
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "driver-root" && m.MountPath == tt.want && m.ReadOnly &&
					m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationHostToContainer
			})
			hostPath := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
				return v.Name == "driver-root" && v.HostPath != nil && v.HostPath.Path == tt.want &&
					v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectory
			})
			if want := tt.want != "/"; mounted != want || hostPath != want {
				t.Errorf("%s: driver root %s mounted %v, host path %v; want %v", w.ds, tt.want, mounted, hostPath, want)
			}
		}
	}
	for _, comp := range []string{"devicePlugin", "draDriver"} {
		err := renderErr("v1.37.2", nil, map[string]any{comp: map[string]any{"driverRoot": "run/nvidia/driver"}})
		if err == nil || !strings.Contains(err.Error(), "/"+comp+"/driverRoot") {
			t.Errorf("%s.driverRoot: run/nvidia/driver: %v; want a schema error naming it", comp, err)
		}
	}
}
