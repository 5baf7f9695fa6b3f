package reservation

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names and help texts, as the deployed scheduler exports them.
const (
	MetricInstanceInfo     = "hami_node_gpu_mig_instance_info"
	metricInstanceInfoHelp = "Realized MIG instance identity and scheduler placement"

	MetricLegacyInstance     = "nodeGPUMigInstance"
	metricLegacyInstanceHelp = "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps"
)

// NodeReservations is what the [Collector] exports for one node: the
// reservations of its active pods and the node registration's device
// indexes.
type NodeReservations struct {
	// Node is the node name, the "node" label.
	Node string
	// DeviceIndex maps a GPU UUID to the GPU's index in the node
	// registration (hami.io/node-nvidia-register), the "device_index"
	// label. Reservations on a GPU missing here produce no series.
	DeviceIndex map[string]int
	// Allocations are the node's reservations. Only entries with a
	// complete runtime identity produce series. Take them from
	// [Desired]'s Active entries, so that a deleting pod keeps its series
	// until it is released ([Pod.Released]) and its instance reclaimed, as
	// the deployed scheduler exports terminating pods.
	Allocations []Allocation
}

// CollectorOptions tunes [NewCollector]. The zero value exports only the
// current metric.
type CollectorOptions struct {
	// LegacyMetrics also exports the compatibility series
	// nodeGPUMigInstance{nodeid, deviceuuid, deviceidx, migname} with
	// migname "<profile>-<gpuInstanceID>", as legacyMetrics: true does in
	// the deployed chart.
	LegacyMetrics bool
	// Logger receives a debug record for each skipped reservation; nil
	// discards.
	Logger *slog.Logger
}

// Collector is a prometheus.Collector exporting realized MIG instances:
//
//	hami_node_gpu_mig_instance_info{compute_instance_id, device_index,
//	  device_uuid, gpu_instance_id, mig_uuid, node, placement_size,
//	  placement_start, profile} 1
//
// for every reservation with a complete runtime identity on a GPU the
// node registration lists. Identical series (the same reservation listed
// twice) are exported once. A reservation whose labels are not valid
// UTF-8 (Prometheus refuses them) is skipped with a debug record, never a
// panic. It is a described (not unchecked) collector and safe for
// concurrent collection.
type Collector struct {
	source  func() []NodeReservations
	opts    CollectorOptions
	logger  *slog.Logger
	info    *prometheus.Desc
	legacy  *prometheus.Desc
	enabled []*prometheus.Desc
}

// NewCollector returns a collector that calls source once per collection.
// A registry may collect concurrently, so source must be safe for
// concurrent use; it should return a snapshot, not block on the API.
func NewCollector(source func() []NodeReservations, opts CollectorOptions) *Collector {
	c := &Collector{
		source: source,
		opts:   opts,
		logger: opts.Logger,
		info: prometheus.NewDesc(MetricInstanceInfo, metricInstanceInfoHelp, []string{
			"compute_instance_id", "device_index", "device_uuid", "gpu_instance_id", "mig_uuid",
			"node", "placement_size", "placement_start", "profile",
		}, nil),
		legacy: prometheus.NewDesc(MetricLegacyInstance, metricLegacyInstanceHelp,
			[]string{"nodeid", "deviceuuid", "deviceidx", "migname"}, nil),
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.enabled = []*prometheus.Desc{c.info}
	if opts.LegacyMetrics {
		c.enabled = append(c.enabled, c.legacy)
	}
	return c
}

var _ prometheus.Collector = (*Collector)(nil)

// Describe sends the descriptors of the enabled metrics.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.enabled {
		ch <- d
	}
}

// Collect sends one series per realized reservation.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	seen := make(map[[9]string]bool)
	seenLegacy := make(map[[4]string]bool)
	for _, node := range c.source() {
		for i := range node.Allocations {
			a := &node.Allocations[i]
			id, ok := a.Runtime()
			if !ok {
				continue
			}
			index, ok := node.DeviceIndex[a.GPUUUID]
			if !ok {
				c.logger.LogAttrs(context.Background(), slog.LevelDebug, "reservation: GPU not in node registration, no metric",
					slog.String("node", node.Node), slog.String("gpu", a.GPUUUID), slog.String("mig", id.MIGUUID))
				continue
			}
			idx := strconv.Itoa(index)
			gi := strconv.FormatUint(uint64(id.GPUInstanceID), 10)
			labels := [9]string{
				strconv.FormatUint(uint64(id.ComputeInstanceID), 10), idx, a.GPUUUID, gi, id.MIGUUID,
				node.Node, strconv.FormatUint(uint64(a.Placement.Size), 10),
				strconv.FormatUint(uint64(a.Placement.Start), 10), a.Profile,
			}
			if !seen[labels] {
				seen[labels] = true
				c.send(ch, c.info, node.Node, labels[:])
			}
			if !c.opts.LegacyMetrics {
				continue
			}
			legacy := [4]string{node.Node, a.GPUUUID, idx, a.Profile + "-" + gi}
			if !seenLegacy[legacy] {
				seenLegacy[legacy] = true
				c.send(ch, c.legacy, node.Node, legacy[:])
			}
		}
	}
}

// send emits one series, or logs why it cannot (label values that are not
// valid UTF-8 come only from records that bypassed Decode).
func (c *Collector) send(ch chan<- prometheus.Metric, desc *prometheus.Desc, node string, labels []string) {
	m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, 1, labels...)
	if err != nil {
		c.logger.LogAttrs(context.Background(), slog.LevelDebug, "reservation: unexportable labels, no metric",
			slog.String("node", node), slog.String("error", err.Error()))
		return
	}
	ch <- m
}
