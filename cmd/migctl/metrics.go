package main

import (
	"flag"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/dynmig/dynmig/reservation"
)

func metricsCommand() command {
	return command{
		name:    "metrics",
		args:    "--node NODE.json [--pods PODS.json] [--legacy]",
		summary: "the exposition text the scheduler would serve for a node",
		help: `Prints the Prometheus text exposition the scheduler's extender serves on
its -metrics-addr (:9395; the Helm chart's NodePort Service also offers it
on <node-ip>:31993/metrics) for this node: one
hami_node_gpu_mig_instance_info series per reservation of an active pod that
carries a complete runtime identity, labelled with the GPU's index in the node
registration. Records the device plugin would not trust (malformed,
conflicting) produce no series: two pods holding the same reservation export
neither (the deployed scheduler fails the whole scrape instead). GPUs marked
unhealthy still export their pods' series; registration entries the
scheduler would leave out are reported on standard error. With --legacy it also prints the
compatibility series nodeGPUMigInstance (legacyMetrics: true).`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			node := fs.String("node", "", "Node JSON (or NodeList/List, or a bare registration value)")
			nodeName := fs.String("node-name", "", "the node to use when NODE.json holds several")
			pods := fs.String("pods", "", "PodList/List/Pod JSON (kubectl get pods -A -o json)")
			legacy := fs.Bool("legacy", false, "also export the legacy nodeGPUMigInstance series")
			return func(e *env, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				nv, err := loadNode(e, *node, *nodeName, *pods)
				if err != nil {
					return err
				}
				nv.warnRegistration(e)
				return metrics(e, nv, *legacy)
			}
		},
	}
}

func metrics(e *env, nv *nodeView, legacy bool) error {
	source := func() []reservation.NodeReservations {
		nr := reservation.NodeReservations{Node: nv.name, DeviceIndex: map[string]int{}}
		for _, d := range nv.devs {
			nr.DeviceIndex[d.ID] = d.Index
		}
		for _, entry := range reservation.Desired(nv.snapshot()).Active {
			nr.Allocations = append(nr.Allocations, entry.Allocation)
		}
		return []reservation.NodeReservations{nr}
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(reservation.NewCollector(source, reservation.CollectorOptions{LegacyMetrics: legacy})); err != nil {
		return err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(e.stdout, mf); err != nil {
			return err
		}
	}
	return nil
}
