package deviceplugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

const (
	ckGPU = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
	ckMIG = "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
)

func sampleCheckpoint() deviceplugin.Checkpoint {
	claim := kube.ClaimOf(`[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + ckGPU + `","profile":"1g.5gb","placement":{"start":0,"size":1}}]`)
	return deviceplugin.Checkpoint{
		Pods: []deviceplugin.PodObservation{
			{UID: "a", Observation: kube.Observation{Claim: claim, At: time.Unix(1000, 5).UTC(), Scheduled: true}},
			{UID: "b", Observation: kube.Observation{At: time.Unix(1001, 0).UTC(), Started: true}, Inherited: true,
				InheritedEntries: []reservation.Allocation{inheritedEntry()}},
		},
		Devices: []deviceplugin.HandedDevice{{PodUID: "a", GPUUUID: ckGPU, Profile: "1g.5gb",
			Placement: capability.Placement{Start: 0, Size: 1}, Runtime: reservation.RuntimeIdentity{MIGUUID: ckMIG, GPUInstanceID: 7, ComputeInstanceID: 0}}},
	}
}

// inheritedEntry is an entry, runtime identity included, that an inherited
// pod's record named.
func inheritedEntry() reservation.Allocation {
	a := reservation.Allocation{GPUUUID: ckGPU, Profile: "1g.5gb", Placement: capability.Placement{Start: 2, Size: 1}}
	return a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", GPUInstanceID: 9})
}

func TestCheckpointRoundTrip(t *testing.T) {
	c := sampleCheckpoint()
	path := filepath.Join(t.TempDir(), "ck.json")
	require.NoError(t, deviceplugin.WriteCheckpoint(path, c))
	got, exists, err := deviceplugin.ReadCheckpoint(path)
	require.NoError(t, err)
	assert.True(t, exists)
	assert.Equal(t, c, got)

	_, exists, err = deviceplugin.ReadCheckpoint(filepath.Join(t.TempDir(), "none.json"))
	require.NoError(t, err)
	assert.False(t, exists, "a missing checkpoint is no error")
}

// Every way a checkpoint can be wrong is a typed error naming where.
func TestDecodeCheckpointRefuses(t *testing.T) {
	good, err := deviceplugin.EncodeCheckpoint(sampleCheckpoint())
	require.NoError(t, err)
	replace := func(old, new string) string {
		require.Contains(t, string(good), old)
		return strings.Replace(string(good), old, new, 1)
	}
	tests := []struct {
		name        string
		data        string
		pod, device int
	}{
		{"empty", "", -1, -1},
		{"truncated", string(good[:len(good)/2]), -1, -1},
		{"trailing data", string(good) + "{}", -1, -1},
		{"unknown field", replace(`"version": 1`, `"version": 1, "extra": 0`), -1, -1},
		{"other version", replace(`"version": 1`, `"version": 2`), -1, -1},
		{"empty pod UID", replace(`"uid": "a"`, `"uid": ""`), 0, -1},
		{"repeated pod UID", replace(`"uid": "b"`, `"uid": "a"`), 1, -1},
		{"foreign claim", replace(`"claim": "scheduled:`, `"claim": "x`), 0, -1},
		{"no first observation", replace(`"firstSeen": "1970-01-01T00:16:41Z"`, `"firstSeen": "0001-01-01T00:00:00Z"`), 1, -1},
		{"device without owner", replace(`"podUID": "a"`, `"podUID": ""`), -1, 0},
		{"bad MIG UUID", replace(ckMIG, "MIG-x"), -1, 0},
		{"negative index", replace(`"deviceIndex": 0,
      "gpuUUID"`, `"deviceIndex": -1,
      "gpuUUID"`), -1, 0},
		{"undecodable inherited entries", replace(`"inheritedEntries": "[`, `"inheritedEntries": "[x`), 1, -1},
		{"inherited entries of a pod not inherited", encodeWith(t, func(c *deviceplugin.Checkpoint) { c.Pods[1].Inherited = false }), 1, -1},
		{"inherited entry without identity", encodeWith(t, func(c *deviceplugin.Checkpoint) {
			c.Pods[1].InheritedEntries = []reservation.Allocation{inheritedEntry().Scheduled()}
		}), 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := deviceplugin.DecodeCheckpoint("ck", []byte(tt.data))
			var ce *deviceplugin.CheckpointError
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, deviceplugin.ErrCheckpoint)
			assert.Equal(t, tt.pod, ce.Pod)
			assert.Equal(t, tt.device, ce.Device)
		})
	}

	// Two devices may not name one MIG UUID, one GPU instance or
	// overlapping placements.
	for name, mutate := range map[string]func(*deviceplugin.HandedDevice){
		"same MIG UUID": func(d *deviceplugin.HandedDevice) { d.Placement.Start = 4 },
		"same GPU instance": func(d *deviceplugin.HandedDevice) {
			d.Placement.Start = 4
			d.Runtime.MIGUUID = "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
		},
		"overlap": func(d *deviceplugin.HandedDevice) {
			d.Runtime = reservation.RuntimeIdentity{MIGUUID: "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", GPUInstanceID: 9}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := sampleCheckpoint()
			d := c.Devices[0]
			d.PodUID = "b"
			mutate(&d)
			c.Devices = append(c.Devices, d)
			data, err := deviceplugin.EncodeCheckpoint(c)
			require.NoError(t, err)
			_, err = deviceplugin.DecodeCheckpoint("ck", data)
			var ce *deviceplugin.CheckpointError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, 1, ce.Device)
		})
	}
}

// encodeWith encodes the sample checkpoint as edit changes it.
func encodeWith(t *testing.T, edit func(*deviceplugin.Checkpoint)) string {
	t.Helper()
	c := sampleCheckpoint()
	edit(&c)
	data, err := deviceplugin.EncodeCheckpoint(c)
	require.NoError(t, err)
	return string(data)
}

func FuzzDecodeCheckpoint(f *testing.F) {
	good, err := deviceplugin.EncodeCheckpoint(sampleCheckpoint())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"version":1,"pods":[],"devices":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := deviceplugin.DecodeCheckpoint("fuzz", data)
		if err != nil {
			if !errors.Is(err, deviceplugin.ErrCheckpoint) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// What decodes encodes to what decodes the same.
		again, err := deviceplugin.EncodeCheckpoint(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := deviceplugin.DecodeCheckpoint("fuzz", again)
		if err != nil {
			t.Fatalf("re-encoded checkpoint refused: %v", err)
		}
		if len(c2.Pods) != len(c.Pods) || len(c2.Devices) != len(c.Devices) {
			t.Fatalf("round trip changed the checkpoint")
		}
	})
}

// A checkpoint that cannot be read or trusted stops the plugin before it
// touches anything.
func TestCorruptCheckpointRefusesToStart(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	path := filepath.Join(t.TempDir(), "ck.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"version":1,"pods":[`), 0o600))
	_, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: t.TempDir(), Checkpoint: path})
	var ce *deviceplugin.CheckpointError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, deviceplugin.ErrCheckpoint)
	assert.Equal(t, path, ce.Path)
	data, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	assert.Equal(t, `{"version":1,"pods":[`, string(data), "the checkpoint is left as it is")
}

// The default checkpoint lives in a directory under the socket directory:
// a starting kubelet removes every plain file there but its own.
func TestDefaultCheckpointPath(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	dir := t.TempDir()
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("a",
		reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}))
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.SocketDir = dir })
	admit(t, r)
	c, exists, err := deviceplugin.ReadCheckpoint(filepath.Join(dir, deviceplugin.CheckpointDir, deviceplugin.CheckpointFile))
	require.NoError(t, err)
	require.True(t, exists)
	require.Len(t, c.Devices, 1)
	assert.Equal(t, "uid-a", c.Devices[0].PodUID)
}

// checkpointHas waits until the checkpoint at path records pod uid.
func checkpointHas(t *testing.T, path, uid string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, _, err := deviceplugin.ReadCheckpoint(path)
		return err == nil && slices.ContainsFunc(c.Pods, func(p deviceplugin.PodObservation) bool { return p.UID == uid })
	}, eventually, time.Millisecond)
}

// setStatus writes status as the kubelet does.
func setStatus(t *testing.T, client *fake.Clientset, name string, edit func(*corev1.PodStatus)) {
	t.Helper()
	pod := getPod(t, client, name)
	edit(&pod.Status)
	_, err := client.CoreV1().Pods("default").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// After a restart, the plugin resolves conflicts and identity claims from
// its checkpoint exactly as before: a copy of a scheduled pod's record
// (created with spec.nodeName preset, first seen without the binding,
// later marked scheduled by its kubelet) and a copy of its MIG UUID stay
// withheld and do not stop reclamation. With the checkpoint lost, the
// first listing cannot tell them apart and reclamation waits (the
// documented residual of a lost checkpoint).
func TestRestartResolvesFromTheCheckpoint(t *testing.T) {
	for _, forgery := range []string{"placement copy", "MIG UUID copy"} {
		for _, kept := range []bool{true, false} {
			name := forgery + map[bool]string{true: ", checkpoint kept", false: ", checkpoint lost"}[kept]
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				hw := fakehal.MustNew(fakehal.Options{})
				gpu := gpuOf(t, hw, 0).UUID
				at := func(start uint32) reservation.Allocation {
					return reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}
				}
				scheduled := func(p *corev1.Pod) *corev1.Pod {
					p.Spec.SchedulerName = deviceplugin.DefaultSchedulerName
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
					return p
				}
				client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
					scheduled(boundPod("e", at(2))), scheduled(boundPod("a", at(0))))
				ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
				withCheckpoint := func(c *deviceplugin.Config) { c.Checkpoint = ckpt }
				r := start(t, client, hw, withCheckpoint)
				migE := admit(t, r)
				runningStatus(t, client, "e")
				migA := admit(t, r)
				runningStatus(t, client, "a")

				// The forger's pod: created later, bound by itself.
				b := boundPod("b", at(0))
				if forgery == "MIG UUID copy" {
					allocs, err := kube.PodAllocations(getPod(t, client, "a"))
					require.NoError(t, err)
					id, _ := allocs[0].Runtime()
					b = boundPod("b", at(1).WithRuntime(id))
				}
				b.Spec.SchedulerName = deviceplugin.DefaultSchedulerName
				_, err := client.CoreV1().Pods("default").Create(ctx, b, metav1.CreateOptions{})
				require.NoError(t, err)
				checkpointHas(t, ckpt, "uid-b")
				// Its kubelet marks it scheduled when it writes its status.
				setStatus(t, client, "b", func(st *corev1.PodStatus) {
					st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
				})

				require.NoError(t, r.stop())
				if !kept {
					require.NoError(t, os.Remove(ckpt))
				}
				r = start(t, client, hw, withCheckpoint)
				before := r.p.Reconciles()

				// e ends: its instance is reclaimed only if the node's
				// records can be trusted.
				setStatus(t, client, "e", func(st *corev1.PodStatus) { st.Phase = corev1.PodSucceeded })
				if kept {
					require.Eventually(t, func() bool { return !slices.Contains(liveMIGs(hw), migE) }, eventually, time.Millisecond,
						"the ended pod's instance is reclaimed after the restart")
				} else {
					require.Eventually(t, func() bool { return r.p.Reconciles() > before }, eventually, time.Millisecond)
					assert.Contains(t, liveMIGs(hw), migE, "without the checkpoint the two records cannot be told apart")
				}
				assert.Contains(t, liveMIGs(hw), migA, "the scheduled pod's instance is kept")
				require.NoError(t, hw.Check())
			})
		}
	}
}

// With the checkpoint lost, a running pod whose record no configured
// scheduler's binding brought (f, created with spec.nodeName preset) keeps
// its device against an overlapping record that arrived with a binding
// (s: its owner may have replaced it after the binding, which the first
// listing cannot show), even when f's owner stripped the runtime identity
// from its record. Neither is decided, nothing is destroyed, and s is
// handed nothing.
func TestLostCheckpointKeepsARunningPodsDeviceAgainstABoundRecord(t *testing.T) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	slot0 := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("f", slot0))
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	withCheckpoint := func(c *deviceplugin.Config) { c.Checkpoint = ckpt }
	r := start(t, client, hw, withCheckpoint)
	migF := admit(t, r)
	runningStatus(t, client, "f")
	stripRuntime(t, client, "f") // nothing then names f's instance
	require.NoError(t, r.stop())
	require.NoError(t, os.Remove(ckpt))

	s := boundPod("s", slot0)
	s.Spec.NodeName, s.Spec.SchedulerName = "", deviceplugin.DefaultSchedulerName
	delete(s.Annotations, reservation.AnnotationKey)
	_, err := client.CoreV1().Pods("default").Create(ctx, s, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, client.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s", UID: s.UID,
			Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{slot0})}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}))

	r = start(t, client, hw, withCheckpoint, func(c *deviceplugin.Config) { c.ReconcileInterval = 20 * time.Millisecond })
	_, err = allocate(ctx, r.client, "id")
	assert.Error(t, err, "s is handed nothing")
	before := r.p.Reconciles()
	require.Eventually(t, func() bool { return r.p.Reconciles() > before+1 }, eventually, time.Millisecond)
	assert.Equal(t, []string{migF}, liveMIGs(hw), "f's instance is untouched")
	require.NoError(t, hw.Check())
}
