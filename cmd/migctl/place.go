package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/dynmig/dynmig/internal/leaf/slotmap"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// policyAliases maps spellings people type to the names the policies'
// String methods give (the names the simulator prints).
var policyAliases = map[string]string{
	"firstfit": "first-fit", "v210": "v2.10", "default": "frag-aware",
	"fragmentation-aware": "frag-aware", "fragmentationaware": "frag-aware",
}

// parsePolicy returns the placement policy called name ("" is the default).
func parsePolicy(name string) (placement.Policy, error) {
	if name == "" {
		return placement.DefaultPolicy, nil
	}
	want := strings.ToLower(name)
	if a, ok := policyAliases[want]; ok {
		want = a
	}
	var names []string
	for _, p := range sim.Policies() {
		if p.String() == want {
			return p, nil
		}
		names = append(names, p.String())
	}
	return nil, usageErr("unknown policy %q (policies: %s)", name, strings.Join(names, ", "))
}

func placeCommand() command {
	return command{
		name:    "place",
		args:    "--node NODE.json [--pods PODS.json] --pod POD.json [--policy NAME]",
		summary: "the allocation the scheduler would write for a pod on a node",
		help: `Rebuilds the scheduler's occupancy of the node from the registration in
NODE.json and the reservations of the active pods in PODS.json (pods bound to
the node, or reserving its GPUs), reads POD's MIG request (nvidia.com/gpu,
nvidia.com/gpumem or gpumem-percentage, nvidia.com/use-gpuuuid and the other
constraint annotations, nvidia.com/mig-profile-preference), and prints the
hami.io/vgpu-mig-allocations value the scheduler would write. A summary of
each device goes to standard error.

If POD is among the active pods, its current reservation is ignored (it is
placed again). The annotation is the internal protocol between scheduler and
device plugin: this is for inspection and what-if questions, never write the
output to a pod yourself.

Unhealthy GPUs (registration "health" false or absent) are never chosen; the
pods already on them keep their slots. Registration entries the scheduler
would leave out are reported on standard error.

Exit 2 with the reason when the pod is unschedulable on the node (not enough
free slots, free slots but no legal placement, no profile large enough, every
GPU excluded by constraints or unhealthy).`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			node := fs.String("node", "", "Node JSON (or NodeList/List, or a bare registration value)")
			nodeName := fs.String("node-name", "", "the node to use when NODE.json holds several")
			pods := fs.String("pods", "", "PodList/List/Pod JSON of the pods that hold reservations (optional)")
			pod := fs.String("pod", "", "Pod JSON of the pod to place")
			pol := fs.String("policy", "", "placement policy: first-fit, v2.10 or frag-aware (default)")
			return func(e *env, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if *pod == "" {
					return usageErr("--pod is required")
				}
				return place(e, *node, *nodeName, *pods, *pod, *pol)
			}
		},
	}
}

func place(e *env, nodeFile, nodeName, podsFile, podFile, polName string) error {
	pol, err := parsePolicy(polName)
	if err != nil {
		return err
	}
	if podFile == "-" && (nodeFile == "-" || podsFile == "-") {
		return usageErr("only one input can be standard input")
	}
	nv, err := loadNode(e, nodeFile, nodeName, podsFile)
	if err != nil {
		return err
	}
	nv.warnRegistration(e)
	data, err := e.readInput(podFile)
	if err != nil {
		return err
	}
	pods, err := decodePods(data)
	if err != nil {
		return fmt.Errorf("%s: %w", displayName(podFile), err)
	}
	if len(pods) != 1 {
		return fmt.Errorf("%s: %d pods, want exactly one", displayName(podFile), len(pods))
	}
	target := podView(pods[0])
	req, err := kube.ParseRequest(pods[0])
	if errors.Is(err, kube.ErrNotMIG) {
		return fmt.Errorf("pod %s does not opt in to MIG (annotation nvidia.com/vgpu-mode: \"mig\")", podKey(target))
	}
	if err != nil {
		return fmt.Errorf("pod %s: %w", podKey(target), err)
	}
	ledger, warnings, err := nv.ledger(pol, podKey(target))
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	for _, c := range ledger.Conflicts() {
		fmt.Fprintf(e.stderr, "warning: pods %s and %s overlap on %s (%s and %s); both hold the slots\n",
			nv.podName(c.PodUID), nv.podName(c.Other), c.GPUUUID, c.Placement, c.OtherPlacement)
	}
	as, err := ledger.Reserve(nv.name, target.UID, &req)
	var ue *placement.UnschedulableError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "pod %s is unschedulable on node %s: %s\n", podKey(target), nv.name, unschedulable(ue))
		gpus, _ := ledger.Node(nv.name)
		for _, g := range gpus {
			fmt.Fprintf(e.stderr, "  GPU%d %s\n", g.Grid.Index(), slotmap.Measure(g))
		}
		return &exitError{code: exitUnschedulable, err: errors.New("")}
	}
	if err != nil {
		return fmt.Errorf("pod %s: %w", podKey(target), err)
	}
	gpus, _ := ledger.Node(nv.name)
	for _, a := range as {
		fmt.Fprintf(e.stderr, "c%d/d%d -> GPU%d %s %s %s\n", a.ContainerIndex, a.DeviceIndex,
			gpus[a.GPU].Grid.Index(), a.GPUUUID, a.Profile, a.Placement)
	}
	_, err = fmt.Fprintln(e.stdout, reservation.EncodeString(schedule.Allocations(as)))
	return err
}

// reasonLabels name placement's unschedulable reasons in migctl's output.
var reasonLabels = []struct {
	err   error
	label string
}{
	{placement.ErrFragmented, "fragmented: free slots, but no free legal placement"},
	{placement.ErrCapacity, "not enough free slots"},
	{placement.ErrNoProfile, "no profile large enough"},
	{placement.ErrExcluded, "every GPU excluded by the pod's constraints or unhealthy"},
	{placement.ErrSearchLimit, "search bound reached (a placement may exist)"},
}

// unschedulable describes why a pod does not fit: the reason, the device
// that does not fit alone (if any) and the closest GPU's free slots.
func unschedulable(ue *placement.UnschedulableError) string {
	label := "unschedulable"
	for _, r := range reasonLabels {
		if errors.Is(ue.Reason, r.err) {
			label = r.label
			break
		}
	}
	who := "the pod's devices together"
	if ue.Container >= 0 {
		who = fmt.Sprintf("container %d device %d", ue.Container, ue.Device)
		if ue.DemandMiB > 0 {
			who += fmt.Sprintf(" (%d MiB)", ue.DemandMiB)
		}
	}
	if ue.NeededSlots == 0 {
		return fmt.Sprintf("%s: %s", label, who)
	}
	return fmt.Sprintf("%s: %s needs %s, the closest GPU has %d free", label, who, plural(ue.NeededSlots, "slot", "slots"), ue.FreeSlots)
}
