package reservation_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// specExposition is the exposition text from the spec's "Metrics and
// observability" section.
const specExposition = `# HELP hami_node_gpu_mig_instance_info Realized MIG instance identity and scheduler placement
# TYPE hami_node_gpu_mig_instance_info gauge
hami_node_gpu_mig_instance_info{compute_instance_id="0",device_index="0",device_uuid="GPU-xxxxxxxx",gpu_instance_id="4",mig_uuid="MIG-xxxxxxxx",node="MIG-NODE-A",placement_size="2",placement_start="2",profile="2g.10gb"} 1
`

// specNode is the spec's example node: one realized reservation, one that
// is only scheduled (no series), and one on a GPU the registration does not
// list (no series).
func specNode() []reservation.NodeReservations {
	realized := reservation.Allocation{GPUUUID: "GPU-xxxxxxxx", Profile: "2g.10gb",
		Placement: capability.Placement{Start: 2, Size: 2}, MIGUUID: "MIG-xxxxxxxx",
		GPUInstanceID: reservation.SomeID(4), ComputeInstanceID: reservation.SomeID(0)}
	scheduled := reservation.Allocation{ContainerIndex: 1, GPUUUID: "GPU-xxxxxxxx", Profile: "1g.5gb",
		Placement: capability.Placement{Start: 0, Size: 1}}
	partial := scheduled
	partial.DeviceIndex, partial.MIGUUID = 1, "MIG-partial"
	elsewhere := realized
	elsewhere.GPUUUID, elsewhere.MIGUUID = "GPU-unregistered", "MIG-yyyyyyyy"
	return []reservation.NodeReservations{{
		Node:        "MIG-NODE-A",
		DeviceIndex: map[string]int{"GPU-xxxxxxxx": 0},
		Allocations: []reservation.Allocation{realized, scheduled, partial, elsewhere, realized},
	}}
}

func TestCollectorMatchesSpec(t *testing.T) {
	c := reservation.NewCollector(specNode, reservation.CollectorOptions{})
	if err := testutil.CollectAndCompare(c, strings.NewReader(specExposition)); err != nil {
		t.Fatal(err)
	}
	if got, want := testutil.CollectAndCount(c), 1; got != want {
		t.Fatalf("series = %d, want %d", got, want)
	}
}

func TestCollectorLegacyMetrics(t *testing.T) {
	c := reservation.NewCollector(specNode, reservation.CollectorOptions{LegacyMetrics: true})
	want := specExposition + `# HELP nodeGPUMigInstance GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps
# TYPE nodeGPUMigInstance gauge
nodeGPUMigInstance{deviceidx="0",deviceuuid="GPU-xxxxxxxx",migname="2g.10gb-4",nodeid="MIG-NODE-A"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorRegistersAndLints(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := reservation.NewCollector(specNode, reservation.CollectorOptions{LegacyMetrics: true})
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
}

func TestCollectorEmpty(t *testing.T) {
	c := reservation.NewCollector(func() []reservation.NodeReservations { return nil }, reservation.CollectorOptions{})
	if got := testutil.CollectAndCount(c); got != 0 {
		t.Fatalf("series = %d, want 0", got)
	}
}

// Labels Prometheus refuses (invalid UTF-8, possible only for records that
// bypassed Decode) drop that series instead of panicking the scrape.
func TestCollectorSkipsInvalidLabels(t *testing.T) {
	source := func() []reservation.NodeReservations {
		nodes := specNode()
		bad := nodes[0].Allocations[0]
		bad.GPUUUID, bad.MIGUUID = "GPU-\xff", "MIG-\xfe"
		nodes[0].DeviceIndex[bad.GPUUUID] = 1
		nodes[0].Allocations = append(nodes[0].Allocations, bad)
		return nodes
	}
	for _, legacy := range []bool{false, true} {
		c := reservation.NewCollector(source, reservation.CollectorOptions{LegacyMetrics: legacy})
		want := 1
		if legacy {
			want = 2
		}
		if got := testutil.CollectAndCount(c); got != want {
			t.Errorf("legacy %v: series = %d, want %d (the valid reservation only)", legacy, got, want)
		}
	}
}
