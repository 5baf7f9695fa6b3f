package deviceplugin_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// newPlugin builds, without running, a plugin whose checkpoint is ckpt.
func newPlugin(t *testing.T, client *fake.Clientset, hw *fakehal.Node, ckpt string) (*deviceplugin.Plugin, error) {
	t.Helper()
	return deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: t.TempDir(), Checkpoint: ckpt})
}

// A second plugin process on the node (a rolling update with surge, a
// stray copy) fails fast instead of overwriting the first one's hand-outs,
// and leaves the checkpoint as it is; once the first one stops or is
// closed, the next one starts.
func TestSecondPluginOnOneCheckpointFails(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	slot0 := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("a", slot0))
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	refused := func() {
		t.Helper()
		before, err := os.ReadFile(ckpt)
		require.NoError(t, err)
		p, err := newPlugin(t, client, hw, ckpt)
		assert.Nil(t, p)
		require.ErrorIs(t, err, deviceplugin.ErrCheckpointInUse)
		var ce *deviceplugin.CheckpointError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, ckpt, ce.Path)
		after, err := os.ReadFile(ckpt)
		require.NoError(t, err)
		assert.Equal(t, before, after, "the refused plugin wrote nothing")
	}

	r := start(t, client, hw, func(c *deviceplugin.Config) { c.Checkpoint = ckpt })
	admit(t, r)
	checkpointHas(t, ckpt, "uid-a")
	refused()
	require.NoError(t, r.stop())

	p, err := newPlugin(t, client, hw, ckpt)
	require.NoError(t, err, "the stopped plugin released the lock")
	refused()
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close is idempotent")
	p, err = newPlugin(t, client, hw, ckpt)
	require.NoError(t, err, "the closed plugin released the lock")
	require.NoError(t, p.Close())
	require.ErrorIs(t, p.Run(t.Context()), deviceplugin.ErrClosed)
}

// Temporary files an interrupted checkpoint write left are removed at
// start; other files of the directory are not, and neither are a running
// plugin's.
func TestStaleCheckpointTempFilesRemovedAtStart(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "checkpoint.json")
	stale := []string{filepath.Join(dir, ".checkpoint.json.tmp-123"), filepath.Join(dir, ".checkpoint.json.tmp-")}
	other := filepath.Join(dir, "other.json.tmp-1")
	for _, f := range append(slices.Clone(stale), other) {
		require.NoError(t, os.WriteFile(f, []byte("{"), 0o600))
	}

	first, err := newPlugin(t, client, hw, ckpt)
	require.NoError(t, err)
	for _, f := range stale {
		assert.NoFileExists(t, f)
	}
	assert.FileExists(t, other)

	inFlight := filepath.Join(dir, ".checkpoint.json.tmp-456")
	require.NoError(t, os.WriteFile(inFlight, []byte("{"), 0o600))
	_, err = newPlugin(t, client, hw, ckpt)
	require.ErrorIs(t, err, deviceplugin.ErrCheckpointInUse)
	assert.FileExists(t, inFlight, "a refused plugin removes nothing of the lock holder's")
	require.NoError(t, first.Close())
}

// bootIs makes the plugin see boot as the node's boot ID.
func bootIs(boot string) func(*deviceplugin.Config) {
	return func(c *deviceplugin.Config) {
		c.BootID = func() (string, error) { return boot + "\n", nil }
	}
}

// After a reboot (another boot ID) the devices the checkpoint recorded are
// claims, not live instances: pod A keeps its placement (a pod bound there
// later is refused, and an instance found there, such as one a tool
// re-created, is neither adopted by A's old identity nor destroyed while A
// runs), and the pods' first observations are kept. A restart within the
// same boot decides the same. Once A ends, V gets a new instance there.
func TestRebootKeepsClaimsNotInstances(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	slot0 := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("a", slot0))
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	options := func(c *deviceplugin.Config) {
		c.Checkpoint = ckpt
		c.ReconcileInterval = 10 * time.Millisecond
		c.Manager.LeakInterval = time.Nanosecond
	}
	r := start(t, client, hw, options, bootIs("boot-1"))
	migA := admit(t, r)
	runningStatus(t, client, "a")
	require.NoError(t, r.stop())
	c, _, err := deviceplugin.ReadCheckpoint(ckpt)
	require.NoError(t, err)
	assert.Equal(t, "boot-1", c.BootID)
	observed := c.Pods

	// The reboot: the GPU is reset; a tool re-creates an instance at
	// A's placement.
	require.NoError(t, hw.ResetGPU(0))
	found, err := hw.AddInstance(0, capability.GIProfile1Slice, slot0.Placement)
	require.NoError(t, err)
	require.NotEqual(t, migA, found.ComputeInstances[0].MIGUUID)
	live := []string{found.ComputeInstances[0].MIGUUID}

	createVictim(t, client, "v", slot0, true)
	for _, restart := range []string{"after the reboot", "within the same boot"} {
		r = start(t, client, hw, options, bootIs("boot-2"))
		passes(t, r, 2)
		assert.Equal(t, live, liveMIGs(hw), "%s: the instance at A's placement is kept", restart)
		assert.Empty(t, r.p.Manager().Managed(), "%s: nothing is adopted by a previous boot's identity", restart)
		_, err = allocate(t.Context(), r.client, "id")
		assert.Error(t, err, "%s: V is refused A's placement", restart)
		c, _, err = deviceplugin.ReadCheckpoint(ckpt)
		require.NoError(t, err)
		assert.Equal(t, "boot-2", c.BootID)
		require.Len(t, c.Devices, 1)
		assert.True(t, c.Devices[0].PreviousBoot, "%s: A's device is a previous boot's", restart)
		assert.Equal(t, "uid-a", c.Devices[0].PodUID)
		for _, o := range observed {
			assert.Contains(t, c.Pods, o, "%s: first observations are kept", restart)
		}
		require.NoError(t, r.stop())
	}

	r = start(t, client, hw, options, bootIs("boot-2"))
	setStatus(t, client, "a", func(st *corev1.PodStatus) { st.Phase = corev1.PodSucceeded })
	var migV string
	require.Eventually(t, func() bool {
		resp, err := allocate(t.Context(), r.client, "id")
		if err == nil {
			migV = resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
		}
		return err == nil
	}, eventually, time.Millisecond, "A ended: V gets its placement")
	assert.Equal(t, []string{migV}, liveMIGs(hw), "V's own instance, not the one found")
	assert.NotEqual(t, live[0], migV)
	require.NoError(t, hw.Check())
}

// A checkpoint without a boot ID, as an earlier plugin wrote it, loads and
// counts as written in the current boot: its devices' instances are
// adopted as before, and it names the boot from then on.
func TestCheckpointWithoutBootIDLoads(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	slot0 := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("a", slot0))
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.Checkpoint = ckpt }, bootIs("boot-1"))
	migA := admit(t, r)
	runningStatus(t, client, "a")
	require.NoError(t, r.stop())
	c, _, err := deviceplugin.ReadCheckpoint(ckpt)
	require.NoError(t, err)
	c.BootID = ""
	require.NoError(t, deviceplugin.WriteCheckpoint(ckpt, c))
	data, err := os.ReadFile(ckpt)
	require.NoError(t, err)
	assert.NotContains(t, string(data), "bootID", "the earlier plugin's format")

	r = start(t, client, hw, func(c *deviceplugin.Config) { c.Checkpoint = ckpt }, bootIs("boot-1"))
	managed := r.p.Manager().Managed()
	require.Len(t, managed, 1)
	assert.Equal(t, migA, managed[0].Runtime.MIGUUID, "adopted as recorded")
	c, _, err = deviceplugin.ReadCheckpoint(ckpt)
	require.NoError(t, err)
	assert.Equal(t, "boot-1", c.BootID)
}

// A boot ID that cannot be read stops the plugin before it touches the
// checkpoint.
func TestUnreadableBootIDFailsNew(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	for _, read := range []func() (string, error){
		func() (string, error) { return "", os.ErrNotExist },
		func() (string, error) { return " \n", nil },
	} {
		p, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: t.TempDir(), BootID: read})
		assert.Nil(t, p)
		require.ErrorIs(t, err, deviceplugin.ErrBootID)
	}
}

// The boot ID and the previous-boot mark round-trip. A previous boot's
// device may repeat a MIG UUID or GPU instance of this boot's devices
// (the driver reuses IDs after a reset) but not overlap one's placement.
func TestCheckpointPreviousBoot(t *testing.T) {
	c := sampleCheckpoint()
	c.BootID = "boot-2"
	old := c.Devices[0]
	old.PodUID, old.PreviousBoot, old.Placement.Start = "b", true, 4
	c.Devices = append(c.Devices, old)
	data, err := deviceplugin.EncodeCheckpoint(c)
	require.NoError(t, err)
	got, err := deviceplugin.DecodeCheckpoint("ck", data)
	require.NoError(t, err)
	assert.Equal(t, c, got)

	c.Devices[1].Placement.Start = 0
	data, err = deviceplugin.EncodeCheckpoint(c)
	require.NoError(t, err)
	_, err = deviceplugin.DecodeCheckpoint("ck", data)
	var ce *deviceplugin.CheckpointError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 1, ce.Device)
}
