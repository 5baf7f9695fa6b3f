package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/internal/leaf/slotmap"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

func statusCommand() command {
	return command{
		name:    "status",
		args:    "--node NODE.json [--pods PODS.json] [--policy NAME]",
		summary: "per-GPU slot maps, reservations and fragmentation of a node",
		help: `Shows a node as the scheduler sees it: every MIG GPU's slot map (one
character per memory slot, one letter per pod, '|' between placements, '.'
free, '!' claimed twice) with its free slots, capacity (how many more
instances fit, summed over the profiles), the largest profile that still fits
and unusable slots (free slots no free published placement covers); an
unhealthy GPU keeps its pods but takes no new ones, and adds nothing to the
node's totals. Then each reservation of the active pods and whether the
device plugin has realized it (runtime identity in the annotation); the MIG
pods still pending and whether they would fit now (with --policy); notes
(profiles a GPU publishes without any placement); and every problem found
(malformed or conflicting records, registration entries left out).

Exit 0, or 1 when a record is malformed or conflicting.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			node := fs.String("node", "", "Node JSON (or NodeList/List, or a bare registration value)")
			nodeName := fs.String("node-name", "", "the node to use when NODE.json holds several")
			pods := fs.String("pods", "", "PodList/List/Pod JSON (kubectl get pods -A -o json)")
			pol := fs.String("policy", "", "policy used to try the pending pods: first-fit, v2.10 or frag-aware (default)")
			return func(e *env, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				p, err := parsePolicy(*pol)
				if err != nil {
					return err
				}
				nv, err := loadNode(e, *node, *nodeName, *pods)
				if err != nil {
					return err
				}
				return status(e, nv, p)
			}
		},
	}
}

// reservationRow is one entry of an active pod, as status lists it.
type reservationRow struct {
	pod   string
	alloc reservation.Allocation
}

func status(e *env, nv *nodeView, pol placement.Policy) error {
	ledger, warnings, err := nv.ledger(pol, "")
	if err != nil {
		return err
	}
	gpus, _ := ledger.Node(nv.name)
	regProblems, notes := nv.registrationNotes()
	rows, problems := nv.reservations()
	problems = append(append(regProblems, problems...), warnings...)

	realized := 0
	podSet := map[string]bool{}
	for _, r := range rows {
		podSet[r.pod] = true
		if _, ok := r.alloc.Runtime(); ok {
			realized++
		}
	}
	holds := "hold"
	if len(podSet) == 1 {
		holds = "holds"
	}
	fmt.Fprintf(e.stdout, "node %s: %s (%s%s), %s %s %s (%d realized, %d not yet), %s\n\n",
		nv.name, plural(len(gpus), "MIG GPU", "MIG GPUs"), models(gpus), unhealthyCount(gpus), plural(len(podSet), "active pod", "active pods"), holds,
		plural(len(rows), "reservation", "reservations"), realized, len(rows)-realized, plural(len(nv.pending), "pending MIG pod", "pending MIG pods"))

	legend := slotmap.NewLegend()
	for _, r := range rows {
		legend.Mark(r.pod)
	}
	writeMaps(e.stdout, legend, gpus, rows)
	writeReservations(e.stdout, legend, gpus, rows)
	if err := writePending(e, nv, gpus, pol); err != nil {
		return err
	}
	if len(notes) > 0 {
		fmt.Fprintf(e.stdout, "\nnotes:\n")
		for _, n := range notes {
			fmt.Fprintf(e.stdout, "  %s\n", n)
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(e.stdout, "\nproblems:\n")
		for _, p := range problems {
			fmt.Fprintf(e.stdout, "  %s\n", p)
		}
		return errFindings
	}
	return nil
}

// unhealthyCount is ", N unhealthy" when some GPUs are unhealthy, else "".
func unhealthyCount(gpus []placement.GPUState) string {
	n := 0
	for _, g := range gpus {
		if !g.Grid.Healthy() {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d unhealthy", n)
}

// models summarises the GPU models, e.g. "NVIDIA A100-SXM4-40GB x8".
func models(gpus []placement.GPUState) string {
	var names []string
	count := map[string]int{}
	for _, g := range gpus {
		if count[g.Grid.Name()] == 0 {
			names = append(names, g.Grid.Name())
		}
		count[g.Grid.Name()]++
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s x%d", n, count[n]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// reservations decodes the records of the node's active pods, in pod
// order, and lists what is wrong with them (the device plugin's view:
// reservation.Desired).
func (nv *nodeView) reservations() ([]reservationRow, []string) {
	var rows []reservationRow
	var problems []string
	for _, p := range nv.pods {
		v := podView(p)
		if !v.Active() {
			continue
		}
		value, ok := v.Annotations[reservation.AnnotationKey]
		if !ok {
			if kube.WantsMIG(p) {
				problems = append(problems, fmt.Sprintf("pod %s: bound to the node but has no %s", podKey(v), reservation.AnnotationKey))
			}
			continue
		}
		allocs, err := reservation.DecodeString(value)
		if err != nil {
			continue // reported by Desired below
		}
		allocs, untrusted := kube.TrustedEntries(allocs, v.DeviceRequests)
		problems = append(problems, untrustedProblems(v, untrusted)...)
		for _, a := range allocs {
			rows = append(rows, reservationRow{pod: podKey(v), alloc: a})
		}
	}
	for _, r := range reservation.Desired(nv.snapshot()).Reasons {
		var pe *reservation.PodError
		var ce *reservation.ConflictError
		switch {
		case errors.As(r, &pe):
			problems = append(problems, describe(fmt.Sprintf("pod %s/%s: ", pe.Pod.Namespace, pe.Pod.Name), pe.Err)...)
		case errors.As(r, &ce):
			problems = append(problems, fmt.Sprintf("pods %s and %s: entry %d and entry %d: %s",
				podName(ce.First), podName(ce.Second), ce.First.Index, ce.Second.Index, conflictDetail(ce)))
		default:
			problems = append(problems, r.Error())
		}
	}
	return rows, problems
}

func writeMaps(w io.Writer, legend *slotmap.Legend, gpus []placement.GPUState, rows []reservationRow) {
	spans := map[string][]slotmap.Span{}
	for _, r := range rows {
		spans[r.alloc.GPUUUID] = append(spans[r.alloc.GPUUUID], slotmap.Span{Placement: r.alloc.Placement, Owner: r.pod})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var free, slots, unusable, capacity int
	var largest *capability.Profile
	for _, g := range gpus {
		f := slotmap.Measure(g)
		row := legend.Slots(slotmap.Row{Width: g.Grid.Width(), Spans: spans[g.Grid.UUID()]})
		if !g.Grid.Healthy() {
			// Its pods keep their slots, but nothing new goes on it, so
			// it adds nothing to the node's free slots or capacity.
			fmt.Fprintf(tw, "GPU%d\t%s\tunhealthy, no new pods (%s)\t%s\n", g.Grid.Index(), row, f, g.Grid.UUID())
			continue
		}
		free, slots, unusable, capacity = free+f.FreeSlots, slots+f.Slots, unusable+f.Unusable, capacity+f.Capacity
		if p := g.Grid.Profile(f.LargestFit); p != nil && (largest == nil || capability.CompareProfiles(p, largest) > 0) {
			largest = p
		}
		fmt.Fprintf(tw, "GPU%d\t%s\t%s\t%s\n", g.Grid.Index(), row, f, g.Grid.UUID())
	}
	tw.Flush()
	fit := "none"
	if largest != nil {
		fit = largest.Name
	}
	fmt.Fprintf(w, "node: free %d/%d slots, capacity %d, largest fit %s, %d unusable\n", free, slots, capacity, fit, unusable)
}

func writeReservations(w io.Writer, legend *slotmap.Legend, gpus []placement.GPUState, rows []reservationRow) {
	if len(rows) == 0 {
		return
	}
	index := map[string]string{}
	for _, g := range gpus {
		index[g.Grid.UUID()] = fmt.Sprintf("GPU%d", g.Grid.Index())
	}
	fmt.Fprintf(w, "\nreservations:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		a := r.alloc
		gpu, ok := index[a.GPUUUID]
		if !ok {
			gpu = a.GPUUUID + " (not on this node)"
		}
		state := "reserved, not realized yet"
		if id, ok := a.Runtime(); ok {
			state = "realized " + id.String()
		}
		fmt.Fprintf(tw, "  %c\t%s\tc%d/d%d\t%s\t%s\t%s\t%s\n", legend.Mark(r.pod), r.pod, a.ContainerIndex, a.DeviceIndex,
			gpu, a.Profile, a.Placement, state)
	}
	tw.Flush()
}

// writePending tries each pending MIG pod on the node as it is now.
func writePending(e *env, nv *nodeView, gpus []placement.GPUState, pol placement.Policy) error {
	if len(nv.pending) == 0 {
		return nil
	}
	fmt.Fprintf(e.stdout, "\npending MIG pods (policy %s):\n", pol)
	sel := placement.NewSelector(placement.SelectorOptions{Policy: pol})
	for _, p := range nv.pending {
		name := podKey(podView(p))
		req, err := kube.ParseRequest(p)
		if err != nil {
			fmt.Fprintf(e.stdout, "  %s: invalid request: %v\n", name, err)
			continue
		}
		as, err := sel.Select(gpus, &req, nil)
		var ue *placement.UnschedulableError
		if errors.As(err, &ue) {
			fmt.Fprintf(e.stdout, "  %s: does not fit: %s\n", name, unschedulable(ue))
			continue
		}
		if err != nil {
			fmt.Fprintf(e.stdout, "  %s: invalid request: %v\n", name, err)
			continue
		}
		var where []string
		for _, a := range as {
			where = append(where, fmt.Sprintf("c%d/d%d GPU%d %s %s", a.ContainerIndex, a.DeviceIndex, gpus[a.GPU].Grid.Index(), a.Profile, a.Placement))
		}
		fmt.Fprintf(e.stdout, "  %s: fits now: %s\n", name, strings.Join(where, ", "))
	}
	return nil
}
