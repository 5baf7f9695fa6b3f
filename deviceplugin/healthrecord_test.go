package deviceplugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube/kubetest"
)

func TestDecodeHealthRecord(t *testing.T) {
	const uuid = "GPU-8f6a2b1c-0000-4000-8000-000000000001"
	tests := []struct {
		name      string
		value     string
		wantGPUs  int
		wantEntry int // of the *HealthRecordError; -2: no error
		wantField string
	}{
		{name: "empty", value: `{"gpus":[]}`, wantEntry: -2},
		{name: "one xid", value: `{"bootID":"b1","gpus":[{"uuid":"` + uuid + `","cause":"xid","xid":79,"since":"2026-01-02T03:04:05Z"}]}`, wantGPUs: 1, wantEntry: -2},
		{name: "unknown keys are read", value: `{"gpus":[{"uuid":"` + uuid + `","cause":"double-bit-ecc","since":"2026-01-02T03:04:05Z","new":1}],"more":true}`, wantGPUs: 1, wantEntry: -2},
		{name: "not json", value: `{`, wantEntry: -1},
		{name: "bad uuid", value: `{"gpus":[{"uuid":"MIG-1","cause":"xid","xid":79,"since":"2026-01-02T03:04:05Z"}]}`, wantEntry: 0, wantField: "uuid"},
		{name: "twice", value: `{"gpus":[{"uuid":"` + uuid + `","cause":"unavailable","since":"2026-01-02T03:04:05Z"},{"uuid":"` + uuid + `","cause":"unavailable","since":"2026-01-02T03:04:05Z"}]}`, wantEntry: 1, wantField: "uuid"},
		{name: "not a failure", value: `{"gpus":[{"uuid":"` + uuid + `","cause":"recovered","since":"2026-01-02T03:04:05Z"}]}`, wantEntry: 0, wantField: "cause"},
		{name: "xid without number", value: `{"gpus":[{"uuid":"` + uuid + `","cause":"xid","since":"2026-01-02T03:04:05Z"}]}`, wantEntry: 0, wantField: "xid"},
		{name: "no time", value: `{"gpus":[{"uuid":"` + uuid + `","cause":"xid","xid":48}]}`, wantEntry: 0, wantField: "since"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := deviceplugin.DecodeHealthRecord(tt.value)
			if tt.wantEntry == -2 {
				require.NoError(t, err)
				assert.Len(t, rec.GPUs, tt.wantGPUs)
				again, err := deviceplugin.DecodeHealthRecord(rec.Encode())
				require.NoError(t, err)
				assert.Equal(t, rec.Encode(), again.Encode())
				return
			}
			var he *deviceplugin.HealthRecordError
			require.ErrorAs(t, err, &he)
			assert.ErrorIs(t, err, deviceplugin.ErrHealthRecord)
			assert.Equal(t, tt.wantEntry, he.Entry)
			assert.Equal(t, tt.wantField, he.Field)
		})
	}
}

func FuzzDecodeHealthRecord(f *testing.F) {
	f.Add(`{"bootID":"b","gpus":[{"uuid":"GPU-1","cause":"xid","xid":79,"since":"2026-01-02T03:04:05Z"}]}`)
	f.Add(`{"gpus":[]}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, v string) {
		rec, err := deviceplugin.DecodeHealthRecord(v)
		if err != nil {
			if !errors.Is(err, deviceplugin.ErrHealthRecord) {
				t.Fatalf("error %v is not ErrHealthRecord", err)
			}
			return
		}
		again, err := deviceplugin.DecodeHealthRecord(rec.Encode())
		if err != nil {
			t.Fatalf("re-reading %s: %v", rec.Encode(), err)
		}
		if again.Encode() != rec.Encode() {
			t.Fatalf("not stable: %s vs %s", again.Encode(), rec.Encode())
		}
	})
}

// nodeRecord reads the plugin's health record from node n1.
func nodeRecord(t *testing.T, client *fake.Clientset) (deviceplugin.HealthRecord, bool) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	v, ok := n.Annotations[deviceplugin.HealthRecordAnnotation]
	if !ok {
		return deviceplugin.HealthRecord{}, false
	}
	rec, err := deviceplugin.DecodeHealthRecord(v)
	require.NoError(t, err)
	return rec, true
}

func bootedNode(boot string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: boot}}}
}

// firstList returns the first ListAndWatch response of a freshly started plugin.
func firstList(t *testing.T, r *running) *v1beta1.ListAndWatchResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	list, err := stream.Recv()
	require.NoError(t, err)
	return list
}

// A GPU that failed stays out of service across a plugin restart, with
// its first cause, from the first ListAndWatch and registration on, until
// a recovery event clears it (issue 29 point 2).
func TestPluginHealthSurvivesRestart(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpu1 := gpuOf(t, hw, 1).UUID
	client := kubetest.NewClientset(bootedNode("boot-1"))
	first := start(t, client, hw)
	require.NoError(t, hw.InjectXid(1, "", 79))
	require.NoError(t, hw.InjectXid(1, "", 48)) // not the cause
	require.Eventually(t, func() bool { rec, ok := nodeRecord(t, client); return ok && len(rec.GPUs) == 1 }, eventually, time.Millisecond)
	rec, _ := nodeRecord(t, client)
	assert.Equal(t, "boot-1", rec.BootID)
	assert.Equal(t, gpu1, rec.GPUs[0].UUID)
	assert.Equal(t, "xid", rec.GPUs[0].Cause)
	assert.Equal(t, uint64(79), rec.GPUs[0].Xid)
	require.NoError(t, first.stop())

	second := start(t, client, hw)
	assert.Equal(t, map[string]int{gpu1: 7}, unhealthyIDs(firstList(t, second)), "unhealthy from the first list on")
	assert.Equal(t, map[int]bool{0: false, 1: true}, registeredHealth(t, client))
	why, healthy := second.p.GPUHealth(1)
	assert.False(t, healthy)
	assert.Equal(t, uint64(79), why.Xid)

	// The GPU recovers: healthy again, and the record is removed.
	require.NoError(t, hw.Recover(1))
	require.Eventually(t, func() bool { _, ok := nodeRecord(t, client); return !ok }, eventually, time.Millisecond)
	require.Eventually(t, func() bool { return !registeredHealth(t, client)[1] }, eventually, time.Millisecond)
}

// A record from an earlier boot is dropped: a reboot resets the GPUs.
func TestPluginHealthRecordFromEarlierBoot(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	gpu0 := gpuOf(t, hw, 0).UUID
	node := bootedNode("boot-2")
	node.Annotations = map[string]string{deviceplugin.HealthRecordAnnotation: deviceplugin.HealthRecord{BootID: "boot-1",
		GPUs: []deviceplugin.GPUHealthRecord{{UUID: gpu0, Cause: "xid", Xid: 79, Since: time.Unix(1e9, 0)}}}.Encode()}
	client := kubetest.NewClientset(node)
	r := start(t, client, hw)
	assert.Empty(t, unhealthyIDs(firstList(t, r)))
	_, ok := nodeRecord(t, client)
	assert.False(t, ok, "the stale record is removed")
}

// An operator clears a recorded failure by removing the GPU's entry (or
// the annotation): the plugin sees it, makes the GPU healthy and says so
// in an Event.
func TestPluginHealthClearedByOperator(t *testing.T) {
	t.Cleanup(deviceplugin.SetRecordInterval(time.Millisecond))
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpu0, gpu1 := gpuOf(t, hw, 0).UUID, gpuOf(t, hw, 1).UUID
	node := bootedNode("boot-1")
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	node.Annotations = map[string]string{deviceplugin.HealthRecordAnnotation: deviceplugin.HealthRecord{BootID: "boot-1",
		GPUs: []deviceplugin.GPUHealthRecord{{UUID: gpu0, Cause: "double-bit-ecc", Since: since}, {UUID: gpu1, Cause: "xid", Xid: 79, Since: since}}}.Encode()}
	client := kubetest.NewClientset(node)
	r := start(t, client, hw)
	assert.Equal(t, map[string]int{gpu0: 7, gpu1: 7}, unhealthyIDs(firstList(t, r)))

	// The operator keeps GPU 1's entry only.
	keep := deviceplugin.HealthRecord{BootID: "boot-1", GPUs: []deviceplugin.GPUHealthRecord{{UUID: gpu1, Cause: "xid", Xid: 79, Since: since}}}.Encode()
	patch := `{"metadata":{"annotations":{"` + deviceplugin.HealthRecordAnnotation + `":` + strconvQuote(keep) + `}}}`
	_, err := client.CoreV1().Nodes().Patch(context.Background(), "n1", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := r.p.GPUHealth(0); return ok }, eventually, time.Millisecond)
	_, ok := r.p.GPUHealth(1)
	assert.False(t, ok, "GPU 1 stays recorded")
	require.Eventually(t, func() bool { return !registeredHealth(t, client)[0] }, eventually, time.Millisecond)
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(nodeEventMessages(t, client), func(m string) bool { return strings.Contains(m, "GPU 0 healthy (cleared)") })
	}, eventually, time.Millisecond, "the clearing is recorded in an Event (the recorder writes asynchronously)")
	rec, _ := nodeRecord(t, client)
	assert.Len(t, rec.GPUs, 1)
	assert.Equal(t, since, rec.GPUs[0].Since, "the time of the failure is kept")
}

func nodeEventMessages(t *testing.T, client *fake.Clientset) []string {
	t.Helper()
	list, err := client.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Note)
	}
	return out
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
