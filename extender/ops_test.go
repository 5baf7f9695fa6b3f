package extender_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

func TestReady(t *testing.T) {
	ext := extender.New(cluster(t), extender.Options{})
	require.ErrorIs(t, ext.Ready(), extender.ErrNotSynced, "before Run")
	started := start(t, cluster(t), extender.Options{})
	require.NoError(t, started.Ready())
}

// TestInstanceCollector: a realized pod exports its HAMi-compatible
// series, labelled with the GPU index of the node registration; an
// unrealized one exports none.
func TestInstanceCollector(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	c := ext.InstanceCollector(reservation.CollectorOptions{})
	pod := create(t, client, migPod("a", "9000"))
	require.NoError(t, ext.Bind(ctx, bindArgs(pod, "n1")))
	catchUp(t, ext)
	assert.Zero(t, testutil.CollectAndCount(c), "bound, not realized")

	bound := get(t, client, "a")
	allocs, err := kube.PodAllocations(bound)
	require.NoError(t, err)
	realized := allocs[0].WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 3})
	_, err = kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(ctx, bound, []reservation.Allocation{realized})
	require.NoError(t, err)
	catchUp(t, ext)
	want := `# HELP hami_node_gpu_mig_instance_info Realized MIG instance identity and scheduler placement
# TYPE hami_node_gpu_mig_instance_info gauge
hami_node_gpu_mig_instance_info{compute_instance_id="0",device_index="0",device_uuid="` + allocs[0].GPUUUID +
		`",gpu_instance_id="3",mig_uuid="MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",node="n1",placement_size="` +
		itoa(allocs[0].Placement.Size) + `",placement_start="` + itoa(allocs[0].Placement.Start) + `",profile="2g.10gb"} 1
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), reservation.MetricInstanceInfo))
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
