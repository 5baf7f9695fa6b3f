package placementtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// Allocator is the adapter a scheduler implements to run the suite: given
// a node and a pod, choose a profile and a free published placement for
// every device of the pod, or refuse.
//
// On success it returns one assignment per device in (container, device)
// order, GPU being the GPU's position in node.GPUs. On refusal it returns
// an error matching placement.ErrUnschedulable and one reason sentinel
// (placement.ErrExcluded, ErrNoProfile, ErrCapacity, ErrFragmented or
// ErrSearchLimit) with errors.Is; a *placement.UnschedulableError also
// gets its Container and Device checked. It must not change node or req.
type Allocator interface {
	Allocate(node *Node, req *placement.Request) ([]placement.Assignment, error)
}

// AllocatorFunc adapts a function to [Allocator].
type AllocatorFunc func(node *Node, req *placement.Request) ([]placement.Assignment, error)

// Allocate calls f.
func (f AllocatorFunc) Allocate(node *Node, req *placement.Request) ([]placement.Assignment, error) {
	return f(node, req)
}

// Options tunes the suite. The zero value uses the defaults.
type Options struct {
	// MaxGPUs and MaxDevices bound the generated nodes and pods; 0 means 3
	// GPUs and 4 devices, which keeps the oracle's search small.
	MaxGPUs, MaxDevices int
	// SearchLimitAllowed lets the allocator refuse a pod of more than one
	// device with placement.ErrSearchLimit although the oracle finds a
	// fit, as a bounded search may. False (the default) holds the
	// allocator to the oracle on every generated pod: the placement
	// package's bound is far above what these small pods need.
	SearchLimitAllowed bool
	// OracleSteps bounds the oracle; 0 means [DefaultOracleSteps]. A case
	// the oracle cannot decide is skipped.
	OracleSteps int
	// Tables are the real GPU models' profile tables the generated nodes
	// draw from besides arbitrary legal grids; nil draws grids only.
	// fakehal.Tables gives every built-in model at every driver
	// generation.
	Tables []capability.ModelTable
}

func (o Options) withDefaults() Options {
	if o.MaxGPUs <= 0 {
		o.MaxGPUs = 3
	}
	if o.MaxDevices <= 0 {
		o.MaxDevices = 4
	}
	if o.OracleSteps <= 0 {
		o.OracleSteps = DefaultOracleSteps
	}
	return o
}

// reasons are the refusal reasons an allocator may give.
var reasons = []error{placement.ErrExcluded, placement.ErrNoProfile, placement.ErrCapacity, placement.ErrFragmented, placement.ErrSearchLimit}

func reasonOf(err error) error {
	for _, r := range reasons {
		if errors.Is(err, r) {
			return r
		}
	}
	return nil
}

// ErrUndecided is returned by [CheckCase] when the oracle could not decide
// the case within its search bound; the case proves nothing either way.
var ErrUndecided = errors.New("placementtest: the oracle did not decide the case within its bound")

// CheckCase asks a for c twice (on deep copies) and checks its answer
// against the [Oracle]:
//
//   - no mutation: the node and the request are unchanged after the call;
//   - determinism: both calls give equal assignments, or the same reason;
//   - a success has one assignment per device, in (container, device)
//     order, each on an allowed healthy GPU (GPU position and UUID
//     agreeing), with a profile the GPU publishes covering the device's
//     demand (or the named profile), at one of that profile's published
//     placements, overlapping neither the held instances nor the pod's
//     other devices;
//   - a pod of one device gets the smallest fitting profile by the
//     placement rules (preference, then memory, slice count and name);
//   - a refusal matches placement.ErrUnschedulable; the oracle found no
//     fit (or, with Options.SearchLimitAllowed, the pod has several
//     devices and the reason is ErrSearchLimit); the reason is the
//     oracle's (ErrSearchLimit may stand for ErrFragmented on a pod of
//     several devices) and a per-device reason names the oracle's device.
//
// It returns nil when every property holds, [ErrUndecided] when the oracle
// gave up, or an error describing the first broken property with the case.
func CheckCase(a Allocator, c Case, opts Options) error {
	opts = opts.withDefaults()
	v := OracleWithin(&c.Node, &c.Request, opts.OracleSteps)
	if v.Unknown {
		return ErrUndecided
	}
	if err := checkCase(a, &c, &v, opts); err != nil {
		return fmt.Errorf("%w\n%s", err, c)
	}
	return nil
}

func checkCase(a Allocator, c *Case, v *Verdict, opts Options) error {
	node, req := c.Node.Clone(), cloneRequest(c.Request)
	as, err := a.Allocate(&node, &req)
	if !equalNode(&node, &c.Node) {
		return errors.New("the allocator changed the node")
	}
	if !equalRequest(&req, &c.Request) {
		return errors.New("the allocator changed the request")
	}
	node2, req2 := c.Node.Clone(), cloneRequest(c.Request)
	as2, err2 := a.Allocate(&node2, &req2)
	if !slices.Equal(as, as2) || (err == nil) != (err2 == nil) || reasonOf(err) != reasonOf(err2) {
		return fmt.Errorf("not deterministic: %v, %v then %v, %v", as, err, as2, err2)
	}
	if err != nil {
		return checkRefusal(err, c, v, opts)
	}
	return checkAssignments(as, c, v)
}

func checkRefusal(err error, c *Case, v *Verdict, opts Options) error {
	if !errors.Is(err, placement.ErrUnschedulable) {
		return fmt.Errorf("refusal %v does not match placement.ErrUnschedulable", err)
	}
	reason := reasonOf(err)
	multi := c.Request.DeviceCount() > 1
	if v.Fits {
		if reason == placement.ErrSearchLimit && multi && opts.SearchLimitAllowed {
			return nil
		}
		return fmt.Errorf("refused (%v), but the oracle places it: %v", err, v.Witness)
	}
	switch {
	case reason == v.Reason:
	case reason == placement.ErrSearchLimit && v.Reason == placement.ErrFragmented && multi && v.Container < 0:
	default:
		return fmt.Errorf("refused with reason %v, the oracle says %v (container %d device %d)", reason, v.Reason, v.Container, v.Device)
	}
	var ue *placement.UnschedulableError
	if errors.As(err, &ue) && (ue.Container != v.Container || ue.Device != v.Device) {
		return fmt.Errorf("refusal names container %d device %d, the oracle's first unplaceable device is container %d device %d",
			ue.Container, ue.Device, v.Container, v.Device)
	}
	return nil
}

func checkAssignments(as []placement.Assignment, c *Case, v *Verdict) error {
	n := &c.Node
	if !v.Fits {
		return fmt.Errorf("placed %v, but the oracle finds no fit (%v)", as, v.Reason)
	}
	var want []placement.Assignment
	for ci, cr := range c.Request.Containers {
		for d := range cr.Devices {
			want = append(want, placement.Assignment{ContainerIndex: ci, DeviceIndex: d})
		}
	}
	if len(as) != len(want) {
		return fmt.Errorf("%d assignments for %d devices: %v", len(as), len(want), as)
	}
	taken := make([]placement.Occupancy, len(n.GPUs))
	for i := range n.GPUs {
		taken[i] = n.Used(i)
	}
	for i, a := range as {
		if a.ContainerIndex != want[i].ContainerIndex || a.DeviceIndex != want[i].DeviceIndex {
			return fmt.Errorf("assignment %d is container %d device %d, want container %d device %d",
				i, a.ContainerIndex, a.DeviceIndex, want[i].ContainerIndex, want[i].DeviceIndex)
		}
		if a.GPU < 0 || a.GPU >= len(n.GPUs) || n.GPUs[a.GPU].UUID != a.GPUUUID {
			return fmt.Errorf("assignment %v: GPU position %d does not hold %s", a, a.GPU, a.GPUUUID)
		}
		g := &n.GPUs[a.GPU]
		if !allows(&c.Request, g) {
			return fmt.Errorf("assignment %v: GPU %s is unhealthy or excluded by the constraints", a, g.UUID)
		}
		p := g.Profile(a.Profile)
		switch {
		case p == nil:
			return fmt.Errorf("assignment %v: %s publishes no profile %q", a, g.UUID, a.Profile)
		case !p.HasPlacement(a.Placement):
			return fmt.Errorf("assignment %v: %v is not a published placement of %s", a, a.Placement, a.Profile)
		case !taken[a.GPU].Fits(a.Placement):
			return fmt.Errorf("assignment %v overlaps slots already taken %v", a, taken[a.GPU])
		case !covers(c.Request.Containers[a.ContainerIndex], g, p):
			return fmt.Errorf("assignment %v: %s (%d MiB) does not cover the demand %d MiB", a, p.Name, p.MemoryMB,
				Demand(c.Request.Containers[a.ContainerIndex].Memory, g))
		}
		taken[a.GPU] = taken[a.GPU].Take(a.Placement)
	}
	if len(as) == 1 && v.Smallest != nil {
		p := n.GPUs[as[0].GPU].Profile(as[0].Profile)
		if preferenceRank(c.Request.Preference, p.Name) != preferenceRank(c.Request.Preference, v.Smallest.Name) ||
			capability.CompareProfiles(p, v.Smallest) != 0 {
			return fmt.Errorf("chose %s (%d MiB), the rules pick %s (%d MiB)", p.Name, p.MemoryMB, v.Smallest.Name, v.Smallest.MemoryMB)
		}
	}
	return nil
}

// Property returns the suite as a rapid property: it draws a [Case] with
// [CaseGen] and fails with [CheckCase]'s error. Cases the oracle cannot
// decide are skipped.
func Property(a Allocator, opts Options) func(*rapid.T) {
	gen := CaseGen(opts)
	return func(t *rapid.T) {
		c := gen.Draw(t, "case")
		if err := CheckCase(a, c, opts); err != nil {
			if errors.Is(err, ErrUndecided) {
				t.Skip(err)
			}
			t.Fatal(err)
		}
	}
}

// Check runs [Property] with rapid.Check: the number of cases follows
// -rapid.checks.
func Check(t *testing.T, a Allocator, opts Options) {
	t.Helper()
	rapid.Check(t, Property(a, opts))
}

// Selector adapts a [placement.Selector] with opts: it compiles the node
// with [Node.States] and calls Select on a fresh selector.
func Selector(opts placement.SelectorOptions) Allocator {
	return AllocatorFunc(func(node *Node, req *placement.Request) ([]placement.Assignment, error) {
		st, err := node.States()
		if err != nil {
			return nil, err
		}
		return placement.NewSelector(opts).Select(st, req, nil)
	})
}

// Ledger adapts a [placement.Ledger] with opts: a fresh ledger learns the
// node with SetNode, every held instance as an observed pod of its own
// (AddPod), and places the pod with Reserve. It first asks Evaluate (a
// scheduler's Filter) and returns an error that fails the suite when the
// two disagree on whether, or why not, the pod fits.
func Ledger(opts placement.LedgerOptions) Allocator {
	return AllocatorFunc(func(node *Node, req *placement.Request) ([]placement.Assignment, error) {
		l := placement.NewLedger(opts)
		if err := l.SetNode("node", node.GPUs); err != nil {
			return nil, err
		}
		for gi := range node.GPUs {
			for k, in := range node.HeldOn(gi) {
				uid := fmt.Sprintf("held-%d-%d", gi, k)
				r := placement.Reservation{PodUID: uid, GPUUUID: node.GPUs[gi].UUID, Profile: in.Profile, Placement: in.Placement}
				if err := l.AddPod("node", uid, []placement.Reservation{r}); err != nil {
					return nil, err
				}
			}
		}
		_, evalErr := l.Evaluate("node", req)
		as, err := l.Reserve("node", "pod", req)
		if (evalErr == nil) != (err == nil) || reasonOf(evalErr) != reasonOf(err) {
			return nil, fmt.Errorf("the ledger disagrees with itself: Evaluate says %v, Reserve %v, %v", evalErr, as, err)
		}
		return as, err
	})
}
