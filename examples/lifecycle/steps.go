package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/internal/leaf/slotmap"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// schedule places the mixed workload, one pod at a time, through the
// ledger: Reserve assumes the placement before the pod is bound, the
// allocation annotation is written, and the informer's AddPod confirms it.
func (d *demo) schedule() error {
	d.heading("Schedule: the scheduler reserves an exact profile and placement per device")
	gpus, _ := d.ledger.Node(nodeName)
	var slots uint32
	for _, g := range gpus {
		slots += g.Grid.Width()
	}
	for _, p := range workload(d.ladder, slots) {
		if err := d.place(p); err != nil {
			return err
		}
	}
	d.printf("\nThe scheduler wrote %s on %s (logical reservation, no runtime identity yet):\n  %s\n",
		reservation.AnnotationKey, d.example().Name, d.example().Annotations[reservation.AnnotationKey])
	return d.drawMaps()
}

// place schedules one pod and prints the decision.
func (d *demo) place(p *pod) error {
	d.pods = append(d.pods, p)
	as, err := d.ledger.Reserve(nodeName, p.UID, &p.req)
	if errors.Is(err, placement.ErrUnschedulable) {
		p.pending = err
		d.printf("  -  %-12s %-34s Pending: %v\n", p.Name, p.demand, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("schedule %s: %w", p.Name, err)
	}
	var where []string
	for _, a := range as {
		where = append(where, fmt.Sprintf("c%d/d%d GPU%d %s %s", a.ContainerIndex, a.DeviceIndex, a.GPU, a.Profile, a.Placement))
	}
	p.Annotations[reservation.AnnotationKey] = reservation.EncodeString(schedule.Allocations(as))
	p.Phase = reservation.PodRunning // bound and started
	if err := d.ledger.AddPod(nodeName, p.UID, placement.Reservations(p.UID, as)); err != nil {
		return fmt.Errorf("confirm %s: %w", p.Name, err)
	}
	d.printf("  %c  %-12s %-34s %s\n", d.legend.Mark(p.Name), p.Name, p.demand, strings.Join(where, ", "))
	return nil
}

// example is the pod whose annotation the steps show: the first one with
// more than one device, else the first scheduled one.
func (d *demo) example() *pod {
	var first *pod
	for _, p := range d.pods {
		if p.pending != nil {
			continue
		}
		if first == nil {
			first = p
		}
		if p.req.DeviceCount() > 1 {
			return p
		}
	}
	return first
}

// realize is the device plugin's kubelet Allocate for every container of
// every scheduled pod: the manager creates the GI and CI at exactly the
// reserved placement and returns the annotation patch, which is applied to
// the pod. Each realized device then runs a (simulated) process.
func (d *demo) realize() error {
	d.heading("Realize: the device plugin creates each GI/CI and patches runtime identity")
	for _, p := range d.pods {
		if err := d.allocate(p); err != nil {
			return err
		}
	}
	d.printf("\nThe device plugin patched %s on %s:\n  %s\n",
		reservation.AnnotationKey, d.example().Name, d.example().Annotations[reservation.AnnotationKey])
	return d.drawMaps()
}

func (d *demo) allocate(p *pod) error {
	if p.pending != nil || !p.Active() {
		return nil
	}
	for ci := range p.req.Containers {
		if p.req.Containers[ci].Devices == 0 {
			continue
		}
		res, err := d.mgr.Allocate(d.ctx, realize.AllocateRequest{Pod: p.Pod, ContainerIndex: ci, Snapshot: d.snapshot()})
		if err != nil {
			return fmt.Errorf("allocate %s container %d: %w", p.Name, ci, err)
		}
		if res.Patch != nil {
			p.Annotations[reservation.AnnotationKey] = res.Annotation
		}
		for _, dev := range res.Devices {
			pid, err := d.node.StartProcess(dev.Key.GPU, dev.Runtime.MIGUUID)
			if err != nil {
				return fmt.Errorf("start %s: %w", p.Name, err)
			}
			d.procs[dev.Runtime.MIGUUID] = pid
			d.printf("  %c  %-12s c%d/d%d %-26s %s (%s)\n", d.legend.Mark(p.Name), p.Name,
				dev.Entry.ContainerIndex, dev.Entry.DeviceIndex, dev.Key, dev.Runtime, dev.Origin)
		}
	}
	return nil
}

// metrics is the scheduler's /metrics: one series per realized instance.
func (d *demo) metrics() error {
	d.heading("Metrics: what the extender serves on :9395/metrics (the chart's NodePort: 31993)")
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(reservation.NewCollector(d.nodeReservations, reservation.CollectorOptions{})); err != nil {
		return err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(d.w, mf); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) nodeReservations() []reservation.NodeReservations {
	nr := reservation.NodeReservations{Node: nodeName, DeviceIndex: d.devIdx}
	desired := reservation.Desired(d.snapshot())
	for _, e := range desired.Active {
		nr.Allocations = append(nr.Allocations, e.Allocation)
	}
	return []reservation.NodeReservations{nr}
}

// finishes reports whether a pod completes in the finish step: the
// inference pods and the first development pod, whose slots lie scattered
// between pods that keep running.
func finishes(name string) bool {
	return strings.HasPrefix(name, "infer-") || name == "dev-b-0"
}

// finish ends some pods: their processes exit, the pods reach Succeeded,
// the scheduler's informer drops their reservations and the device
// plugin's reconcile pass destroys exactly their CI and GI.
func (d *demo) finish() error {
	d.heading("Finish: some pods complete; reconcile reclaims exactly their instances")
	var ended []string
	for _, p := range d.pods {
		if !finishes(p.Name) || p.pending != nil {
			continue
		}
		if err := d.stopProcesses(p); err != nil {
			return err
		}
		p.Phase = reservation.PodSucceeded
		d.ledger.DeletePod(p.UID)
		ended = append(ended, fmt.Sprintf("%c %s", d.legend.Mark(p.Name), p.Name))
	}
	if len(ended) == 0 {
		ended = append(ended, "none (no inference pod runs on this node)")
	}
	d.printf("succeeded: %s\n", strings.Join(ended, ", "))
	rep, err := d.mgr.Reconcile(d.ctx, d.snapshot())
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	d.printf("reconcile: %s\n", rep)
	for _, m := range rep.Released {
		d.printf("  released %-12s %-26s %s\n", d.podName(m.Owner.PodUID), m.Key, m.Runtime.MIGUUID)
	}
	return d.drawMaps()
}

// stopProcesses ends the simulated processes on the pod's MIG devices.
func (d *demo) stopProcesses(p *pod) error {
	allocs, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
	if err != nil {
		return err
	}
	for _, a := range allocs {
		if id, ok := a.Runtime(); ok {
			pid, ok := d.procs[id.MIGUUID]
			if !ok {
				continue
			}
			if err := d.node.StopProcess(pid); err != nil {
				return fmt.Errorf("stop %s: %w", p.Name, err)
			}
			delete(d.procs, id.MIGUUID)
		}
	}
	return nil
}

// restartPlugin schedules one more pod, then restarts the device plugin
// before it is realized: the new manager adopts every live instance whose
// runtime identity the annotations prove, leaves the new reservation
// pending, and realizes it on the next Allocate.
func (d *demo) restartPlugin() error {
	d.heading("Restart: a new device plugin adopts running instances")
	late := demandPod("late-0", mid.profile(d.ladder))
	if err := d.place(late); err != nil {
		return err
	}
	if late.pending == nil {
		d.printf("%s is reserved but not yet realized when the device plugin restarts.\n", late.Name)
	}
	d.printf("\n")
	d.mgr = realize.NewManager(d.node, realize.Options{})
	rep, err := d.mgr.Adopt(d.ctx, d.snapshot())
	if err != nil {
		return fmt.Errorf("adopt: %w", err)
	}
	d.printAdoption(rep)
	d.printf("\nkubelet calls Allocate for %s on the new device plugin:\n", late.Name)
	if err := d.allocate(late); err != nil {
		return err
	}
	return d.drawMaps()
}

// fragmentation submits a pod whose demand has enough free slots on some
// GPU but no free legal placement: it stays Pending, with the reason.
func (d *demo) fragmentation() error {
	d.heading("Fragmentation: free slots, but no legal placement")
	p, pr := d.fragmentedPod()
	if p == nil {
		d.printf("No demand is pending for fragmentation on this node: every profile that has the free slots also has a free placement.\n")
		return nil
	}
	if err := d.place(p); err != nil {
		return err
	}
	var legal []string
	for _, pl := range pr.Placements {
		legal = append(legal, pl.String())
	}
	d.printf("\n%s needs %s (the smallest profile with %d MiB), whose published placements are %s.\n", p.Name, pr.Name, pr.MemoryMB, strings.Join(legal, " "))
	gpus, _ := d.ledger.Node(nodeName)
	for _, g := range gpus {
		free := g.Grid.Full() &^ g.Used
		if f := slotmap.Measure(g); f.FreeSlots >= int(pr.Placements[0].Size) {
			d.printf("GPU%d has %d free slots, %s, but none of those placements is free.\n", g.Grid.Index(), f.FreeSlots, free)
		}
	}
	d.printf("The scheduler never moves a running instance: %s stays Pending until a neighbour is released.\n", p.Name)
	if err := d.drawMaps(); err != nil {
		return err
	}
	st := d.mgr.Stats()
	d.printf("\nstats of the restarted device plugin's manager: creates %d, destroys %d, adoptions %d, conflicts %d, rollbacks %d, managed %d\n",
		st.Creates, st.Destroys, st.Adoptions, st.Conflicts, st.Rollbacks, st.Managed)
	return nil
}

// fragmentedPod returns a pod asking for the memory of the largest profile
// that is unschedulable for fragmentation right now, and that profile, or
// nil.
func (d *demo) fragmentedPod() (*pod, capability.Profile) {
	for i := len(d.ladder) - 1; i >= 0; i-- {
		p := demandPod("late-1", d.ladder[i])
		if _, err := d.ledger.Evaluate(nodeName, &p.req); errors.Is(err, placement.ErrFragmented) {
			return p, d.ladder[i]
		}
	}
	return nil, capability.Profile{}
}

// drawMaps draws every GPU twice, side by side: the scheduler's
// reservations (from the pod annotations, as its informer sees them) and
// the GPU instances on the hardware (owners from the device plugin's
// manager; '?' for an instance it does not manage).
func (d *demo) drawMaps() error {
	gpus, ok := d.ledger.Node(nodeName)
	if !ok {
		return fmt.Errorf("ledger lost node %s", nodeName)
	}
	reserved := d.reservedSpans()
	live := d.liveSpans()
	width := 0
	rows := make([][3]string, len(gpus))
	for i, g := range gpus {
		uuid, idx := g.Grid.UUID(), g.Grid.Index()
		rows[i] = [3]string{
			fmt.Sprintf("GPU%d", idx),
			d.legend.Slots(slotmap.Row{Width: g.Grid.Width(), Spans: reserved[uuid]}),
			d.legend.Slots(slotmap.Row{Width: g.Grid.Width(), Spans: live[idx]}),
		}
		width = max(width, len(rows[i][1]), len("reserved"))
	}
	d.printf("\n  %-6s %-*s  %-*s  %s\n", "", width, "reserved", width, "on GPU", "scheduler figures")
	for i, r := range rows {
		d.printf("  %-6s %-*s  %-*s  %s\n", r[0], width, r[1], width, r[2], slotmap.Measure(gpus[i]))
	}
	d.printLegend()
	return nil
}

// printLegend lists the marks of the pods active now.
func (d *demo) printLegend() {
	var parts []string
	for _, name := range d.legend.Owners() {
		if p := d.pod(name); p != nil && p.Active() && p.pending == nil {
			parts = append(parts, fmt.Sprintf("%c=%s", d.legend.Mark(name), name))
		}
	}
	d.printf("  legend: %s; '.' free\n", wrap(strings.Join(parts, " "), 90, "          "))
}

// wrap breaks s at spaces into lines of at most n bytes, continuing lines
// with indent.
func wrap(s string, n int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if line+1+len(word) > n {
				b.WriteString("\n" + indent)
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// reservedSpans decodes the annotations of active pods, per GPU UUID.
func (d *demo) reservedSpans() map[string][]slotmap.Span {
	out := map[string][]slotmap.Span{}
	for _, p := range d.pods {
		if !p.Active() {
			continue
		}
		allocs, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
		if err != nil {
			continue // the scheduler would not count it either
		}
		for _, a := range allocs {
			out[a.GPUUUID] = append(out[a.GPUUUID], slotmap.Span{Placement: a.Placement, Owner: p.Name})
		}
	}
	return out
}

// liveSpans lists the GPU instances on the hardware per GPU index, owned by
// the pod the manager manages them for.
func (d *demo) liveSpans() map[int][]slotmap.Span {
	type where struct {
		gpu int
		at  capability.Placement
	}
	owner := map[where]string{}
	for _, m := range d.mgr.Managed() {
		owner[where{m.Key.GPU, m.Key.Placement}] = d.podName(m.Owner.PodUID)
	}
	out := map[int][]slotmap.Span{}
	for _, in := range d.node.Snapshot() {
		out[in.GPU] = append(out[in.GPU], slotmap.Span{Placement: in.Placement, Owner: owner[where{in.GPU, in.Placement}]})
	}
	return out
}

func (d *demo) snapshot() reservation.Snapshot {
	s := reservation.Snapshot{Complete: true}
	for _, p := range d.pods {
		s.Pods = append(s.Pods, p.Pod)
	}
	return s
}

func (d *demo) pod(name string) *pod {
	for _, p := range d.pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func (d *demo) podName(uid string) string {
	for _, p := range d.pods {
		if p.UID == uid {
			return p.Name
		}
	}
	return uid
}
