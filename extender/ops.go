package extender

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// Ready reports whether the extender decides: nil once [Extender.Run] runs
// and the informers applied their first listings, [ErrNotSynced] before.
// It is the readiness probe's check.
func (e *Extender) Ready() error {
	if !e.running.Load() || !e.view.HasSynced() {
		return ErrNotSynced
	}
	return nil
}

// InstanceCollector returns the HAMi-compatible realized-instance metric
// (hami_node_gpu_mig_instance_info, see [reservation.Collector]) over the
// extender's informers: for each node with a registration, the active
// reservations of its pods as the device plugin would keep them
// ([reservation.Desired]), labelled with the GPU indexes of the node's
// registration. Until the informers synced it exports nothing.
func (e *Extender) InstanceCollector(opts reservation.CollectorOptions) *reservation.Collector {
	if opts.Logger == nil {
		opts.Logger = e.log
	}
	return reservation.NewCollector(e.nodeReservations, opts)
}

func (e *Extender) nodeReservations() []reservation.NodeReservations {
	if e.Ready() != nil {
		return nil
	}
	nodes, err := e.factory.Core().V1().Nodes().Lister().List(labels.Everything())
	if err != nil {
		return nil
	}
	pods, err := e.factory.Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		return nil
	}
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	now := e.opts.Clock.Now()
	var out []reservation.NodeReservations
	for _, n := range nodes {
		gpus, err := kube.NodeGPUs(n)
		if err != nil {
			e.log.Debug("node registration partly unusable; its metrics may be incomplete", "node", n.Name, "err", err)
		}
		if len(gpus) == 0 || len(byNode[n.Name]) == 0 {
			continue
		}
		nr := reservation.NodeReservations{Node: n.Name, DeviceIndex: make(map[string]int, len(gpus))}
		for _, g := range gpus {
			nr.DeviceIndex[g.UUID] = g.Index
		}
		for _, entry := range reservation.Desired(kube.SnapshotFor(byNode[n.Name], true, now, e.opts.Resource)).Active {
			nr.Allocations = append(nr.Allocations, entry.Allocation)
		}
		out = append(out, nr)
	}
	return out
}
