package deviceplugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// specUUIDs lists the MIG UUIDs whose spec files the plugin keeps in dir.
func specUUIDs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if u, ok := strings.CutPrefix(e.Name(), "dynmig.io-mig_"); ok {
			out = append(out, strings.TrimSuffix(u, ".json"))
		}
	}
	return out
}

// managedUUIDs lists the MIG UUIDs of the plugin's managed instances.
func managedUUIDs(r *running) []string {
	var out []string
	for _, m := range r.p.Manager().Managed() {
		out = append(out, m.Runtime.MIGUUID)
	}
	return out
}

// resolveCDI injects the named CDI devices into an empty OCI spec as a
// container runtime does, reading the specs in dir.
func resolveCDI(t *testing.T, dir string, names ...string) error {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	require.NoError(t, err)
	_, err = cache.InjectDevices(&oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}, names...)
	return err
}

func cdiOptions(dir string, gen deviceplugin.CDIGenerator) func(*deviceplugin.Config) {
	return func(c *deviceplugin.Config) {
		c.DeviceListStrategy = deviceplugin.DeviceListCDICRI
		c.CDIDir = dir
		c.CDIGenerator = gen
	}
}

func onePod(t *testing.T, hw *fakehal.Node) (*fake.Clientset, *corev1.Pod) {
	t.Helper()
	a := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	pod := boundPod("p", a)
	return kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, pod), pod
}

// TestCDISpecLifecycle: a spec per instance from its Allocate until its
// pod is gone; a stale spec of ours is removed at start, another vendor's
// kept.
func TestCDISpecLifecycle(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "dynmig.io-mig_MIG-00000000-0000-0000-0000-000000000000.json")
	foreign := filepath.Join(dir, "nvidia.com-gpu.yaml")
	require.NoError(t, os.WriteFile(stale, []byte("{}"), 0o644))
	require.NoError(t, os.WriteFile(foreign, []byte("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"), 0o644))
	hw := fakehal.MustNew(fakehal.Options{})
	client, _ := onePod(t, hw)
	r := start(t, client, hw, cdiOptions(dir, deviceplugin.NewFakeCDI()))
	assert.NoFileExists(t, stale, "the spec of an instance that is gone")
	assert.FileExists(t, foreign)

	ctx := context.Background()
	resp, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	mig := migUUIDs(t, getPod(t, client, "p"))
	require.Len(t, mig, 1)
	assert.Equal(t, mig, specUUIDs(t, dir), "written before the kubelet got the name")
	require.Len(t, resp.ContainerResponses[0].CdiDevices, 1)
	require.NoError(t, resolveCDI(t, dir, resp.ContainerResponses[0].CdiDevices[0].Name), "the name resolves to the spec")

	raw, err := cdi.ReadSpec(filepath.Join(dir, "dynmig.io-mig_"+mig[0]+".json"), 0)
	require.NoError(t, err)
	dev := raw.GetDevice(mig[0])
	require.NotNil(t, dev)
	var paths []string
	for _, n := range dev.ContainerEdits.DeviceNodes {
		paths = append(paths, n.Path)
	}
	assert.Equal(t, "/dev/nvidia0", paths[0], "the parent GPU")
	assert.Len(t, paths, 3, "the GPU and its GI and CI capability nodes")
	assert.Contains(t, dev.ContainerEdits.Env, "NVIDIA_VISIBLE_DEVICES="+mig[0])

	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return len(hw.Snapshot()) == 0 && len(specUUIDs(t, dir)) == 0 }, eventually, time.Millisecond,
		"the spec goes with its instance")
	assert.FileExists(t, foreign)
}

// TestCDISpecWrittenAtStart: instances adopted at start get their specs
// before the plugin serves (here: realized under envvar, then the plugin
// restarts with cdi-cri).
func TestCDISpecWrittenAtStart(t *testing.T) {
	dir := t.TempDir()
	socketDir := t.TempDir() // the checkpoint survives the restart
	hw := fakehal.MustNew(fakehal.Options{})
	client, _ := onePod(t, hw)
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.SocketDir = socketDir })
	_, err := allocate(context.Background(), r.client, "id")
	require.NoError(t, err)
	require.NoError(t, r.stop())
	assert.Empty(t, specUUIDs(t, dir))

	r = start(t, client, hw, func(c *deviceplugin.Config) { c.SocketDir = socketDir }, cdiOptions(dir, deviceplugin.NewFakeCDI()))
	mig := migUUIDs(t, getPod(t, client, "p"))
	assert.Equal(t, mig, managedUUIDs(r), "adopted")
	assert.Equal(t, mig, specUUIDs(t, dir), "no instance without its spec")
}

// flakyCDI fails while failing is set.
type flakyCDI struct {
	deviceplugin.CDIGenerator
	failing atomic.Bool
}

var errInjected = errors.New("injected")

func (f *flakyCDI) DeviceEdits(in deviceplugin.CDIInstance) (cdispec.ContainerEdits, error) {
	if f.failing.Load() {
		return cdispec.ContainerEdits{}, errInjected
	}
	return f.CDIGenerator.DeviceEdits(in)
}

// TestCDISpecCrashBeforeWrite: the instance is created but its spec is
// not written (the plugin stops there, as after a crash). After the
// restart, specs and managed instances agree, and the kubelet's retry
// gets the one instance, with its spec.
func TestCDISpecCrashBeforeWrite(t *testing.T) {
	dir := t.TempDir()
	socketDir := t.TempDir()
	hw := fakehal.MustNew(fakehal.Options{})
	client, _ := onePod(t, hw)
	gen := &flakyCDI{CDIGenerator: deviceplugin.NewFakeCDI()}
	gen.failing.Store(true)
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.SocketDir = socketDir }, cdiOptions(dir, gen))
	_, err := allocate(context.Background(), r.client, "id")
	require.Error(t, err, "no name without its spec")
	require.Len(t, hw.Snapshot(), 1, "the instance was created")
	assert.Empty(t, specUUIDs(t, dir))
	require.NoError(t, r.stop())

	gen.failing.Store(false)
	r = start(t, client, hw, func(c *deviceplugin.Config) { c.SocketDir = socketDir }, cdiOptions(dir, gen))
	assert.ElementsMatch(t, managedUUIDs(r), specUUIDs(t, dir), "after the restart")
	resp, err := allocate(context.Background(), r.client, "id")
	require.NoError(t, err, "the kubelet's retry")
	mig := migUUIDs(t, getPod(t, client, "p"))
	require.Len(t, mig, 1)
	assert.Equal(t, deviceplugin.CDIName(mig[0]), resp.ContainerResponses[0].CdiDevices[0].Name)
	assert.True(t, slices.Contains(specUUIDs(t, dir), mig[0]))
	require.NoError(t, resolveCDI(t, dir, deviceplugin.CDIName(mig[0])))
	require.Eventually(t, func() bool { return len(hw.Snapshot()) == 1 }, eventually, time.Millisecond, "one instance in the end")
	require.NoError(t, hw.Check())
}

// TestCDISpecRetryInPlace: a failed spec write fails the Allocate and
// keeps the container a candidate; the retry writes it for the same
// instance.
func TestCDISpecRetryInPlace(t *testing.T) {
	dir := t.TempDir()
	hw := fakehal.MustNew(fakehal.Options{})
	client, _ := onePod(t, hw)
	gen := &flakyCDI{CDIGenerator: deviceplugin.NewFakeCDI()}
	gen.failing.Store(true)
	r := start(t, client, hw, cdiOptions(dir, gen))
	_, err := allocate(context.Background(), r.client, "id")
	require.Error(t, err)
	gen.failing.Store(false)
	_, err = allocate(context.Background(), r.client, "id")
	require.NoError(t, err)
	mig := migUUIDs(t, getPod(t, client, "p"))
	assert.Equal(t, mig, specUUIDs(t, dir))
	assert.Len(t, hw.Snapshot(), 1, "the same instance")
}

func TestCDIStrategyNeedsGenerator(t *testing.T) {
	for _, d := range []deviceplugin.DeviceListStrategy{deviceplugin.DeviceListCDICRI, deviceplugin.DeviceListCDIAnnotations} {
		_, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: kubetest.NewClientset(), Hardware: fakehal.MustNew(fakehal.Options{}),
			SocketDir: t.TempDir(), DeviceListStrategy: d})
		assert.ErrorIs(t, err, deviceplugin.ErrNoCDIGenerator, d)
	}
}
