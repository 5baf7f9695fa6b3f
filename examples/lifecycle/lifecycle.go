package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/slotmap"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// config is what the flags choose.
type config struct {
	Model string // fakehal preset name or alias
	GPUs  int
	Seed  uint64 // fakehal UUID seed
}

func defaultConfig() config { return config{Model: "A100-SXM4-40GB", GPUs: 8, Seed: 1} }

// nodeName is the Kubernetes node the fake GPUs live on.
const nodeName = "mig-node-a"

// demo is the state the steps share: the hardware, the device plugin's
// manager, the scheduler's ledger and the pods the "API server" holds.
type demo struct {
	w      io.Writer
	ctx    context.Context
	cfg    config
	node   *fakehal.Node     // the hardware; survives plugin restarts
	mgr    *realize.Manager  // the device plugin's manager
	ledger *placement.Ledger // the scheduler's occupancy
	devIdx map[string]int    // GPU UUID -> index in the node registration
	ladder []capability.Profile
	pods   []*pod // every pod ever created, in creation order
	legend *slotmap.Legend
	procs  map[string]uint32 // MIG UUID -> simulated process ID
	step   int
}

// pod is one workload pod: the view reservation and realize work on, plus
// the request the scheduler reads from its resources.
type pod struct {
	reservation.Pod
	demand  string // the request as a person writes it
	req     placement.Request
	pending error // why the scheduler could not place it, or nil
}

func run(ctx context.Context, w io.Writer, cfg config) error {
	if cfg.GPUs < 1 || cfg.GPUs > 64 {
		return fmt.Errorf("-gpus %d: want 1..64", cfg.GPUs)
	}
	node, err := fakehal.New(fakehal.Options{GPUs: fakehal.Repeat(cfg.GPUs, cfg.Model), Seed: cfg.Seed})
	if err != nil {
		return err
	}
	d := &demo{w: w, ctx: ctx, cfg: cfg, node: node, ledger: placement.NewLedger(placement.LedgerOptions{}),
		legend: slotmap.NewLegend(), procs: map[string]uint32{}}
	dev, _ := node.Device(0)
	d.printf("dynmig lifecycle on fake node %s: %d x %s (no GPU needed)\n", nodeName, cfg.GPUs, dev.Name)
	for _, step := range []func() error{
		d.discover, d.startPlugin, d.schedule, d.realize, d.metrics,
		d.finish, d.restartPlugin, d.fragmentation,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.w, format, args...) }

func (d *demo) heading(title string) {
	d.step++
	d.printf("\n== %d. %s ==\n\n", d.step, title)
}

// discover is the device plugin reading NVML (here the fake node) under the
// built-in allowlist, publishing hami.io/node-nvidia-register, and the
// scheduler decoding that annotation into its ledger.
func (d *demo) discover() error {
	d.heading("Discover: the device plugin publishes capability, the scheduler reads it")
	gpus, report, err := capability.Discover(d.ctx, d.node, capability.DefaultAllowlist())
	if err != nil {
		return fmt.Errorf("discover: %w", err)
	}
	devs := make([]capability.NodeDevice, 0, len(gpus))
	for _, g := range gpus {
		nd, err := capability.NewMIGNodeDevice(g, true)
		if err != nil {
			return fmt.Errorf("register GPU %d: %w", g.Index, err)
		}
		devs = append(devs, nd)
	}
	value, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		return err
	}
	if err := d.printRegistration(value, devs); err != nil {
		return err
	}
	for _, f := range report.Findings {
		d.printf("discovery finding: %s\n", f)
	}

	// The scheduler side: decode the annotation, never the device plugin's
	// in-memory structures.
	decoded, err := capability.DecodeNodeRegistration(value)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	sched := make([]capability.GPU, 0, len(decoded))
	d.devIdx = map[string]int{}
	for _, nd := range decoded {
		g, err := nd.GPU()
		if err != nil {
			return err
		}
		sched = append(sched, g)
		d.devIdx[nd.ID] = nd.Index
	}
	if err := d.ledger.SetNode(nodeName, sched); err != nil {
		return err
	}
	d.ladder = ladder(sched[0].Profiles)
	var names []string
	for _, p := range d.ladder {
		slots := "slots"
		if p.Placements[0].Size == 1 {
			slots = "slot"
		}
		names = append(names, fmt.Sprintf("%s (%d MiB, %d %s)", p.Name, p.MemoryMB, p.Placements[0].Size, slots))
	}
	d.printf("\nThe scheduler decoded %d GPUs; profiles it may place: %s.\n", len(sched), strings.Join(names, ", "))
	return nil
}

// printRegistration prints the annotation value's first device as it is
// on the wire and one summary line per device.
func (d *demo) printRegistration(value []byte, devs []capability.NodeDevice) error {
	var elems []json.RawMessage
	if err := json.Unmarshal(value, &elems); err != nil {
		return err
	}
	d.printf("%s on node %s is a JSON array of %d devices (%d bytes); the first one:\n  %s\n\n",
		capability.NodeRegisterAnnotation, nodeName, len(elems), len(value), elems[0])
	for _, nd := range devs {
		var profiles []string
		for _, p := range nd.MIGProfiles {
			profiles = append(profiles, fmt.Sprintf("%s x%d", p.Name, len(p.Placements)))
		}
		d.printf("  GPU%d %s %s %d MiB: %s\n", nd.Index, nd.ID, nd.Type, nd.Devmem, strings.Join(profiles, ", "))
	}
	return nil
}

// ladder returns one profile per distinct slot size, the smallest by
// memory first: the rungs the workload's demands are drawn from.
func ladder(ps []capability.Profile) []capability.Profile {
	var out []capability.Profile
	for _, p := range ps {
		if len(p.Placements) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Placements[0].Size >= p.Placements[0].Size {
			continue
		}
		out = append(out, p)
	}
	return out
}

// startPlugin is the device plugin's startup: a manager over the hardware
// adopts what active pods own and prepares idle GPUs.
func (d *demo) startPlugin() error {
	d.heading("Device plugin starts: adopt and prepare idle GPUs")
	d.mgr = realize.NewManager(d.node, realize.Options{})
	rep, err := d.mgr.Adopt(d.ctx, d.snapshot())
	if err != nil {
		return fmt.Errorf("adopt: %w", err)
	}
	d.printAdoption(rep)
	return d.drawMaps()
}

func (d *demo) printAdoption(rep realize.AdoptReport) {
	busy, cleaned := 0, 0
	for _, g := range rep.GPUs {
		if g.Busy {
			busy++
		}
		cleaned += g.Cleaned
	}
	d.printf("adoption authorised: %t; GPUs busy %d of %d, leftover instances cleaned %d\n",
		rep.Authorized, busy, len(rep.GPUs), cleaned)
	d.printf("adopted %d, pending %d, rejected %d, leaks %d\n", len(rep.Adopted), len(rep.Pending), len(rep.Rejected), len(rep.Leaks))
	for _, a := range rep.Adopted {
		d.printf("  adopted  %-14s %-26s %s\n", d.podName(a.Owner.PodUID), a.Key, a.Runtime)
	}
	for _, e := range rep.Pending {
		d.printf("  pending  %-14s c%d/d%d %s %s: no runtime identity yet, left for Allocate\n",
			e.Name, e.ContainerIndex, e.DeviceIndex, e.Profile, e.Placement)
	}
	for _, r := range rep.Rejected {
		d.printf("  rejected %s: %v\n", r.Entry, r.Err)
	}
	for _, l := range rep.Leaks {
		d.printf("  leak     %s\n", l)
	}
}
