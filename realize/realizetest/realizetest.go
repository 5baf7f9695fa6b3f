package realizetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// Backend is what the suite exercises: a Realizer and, optionally, a way
// to run processes on it.
type Backend struct {
	// Realizer is the backend under test. Required.
	Realizer realize.Realizer
	// StartProcess runs (or simulates) a compute process on the MIG device
	// migUUID of GPU gpu and returns a function that stops it. Nil skips the
	// checks that need processes.
	StartProcess func(ctx context.Context, gpu int, migUUID string) (stop func() error, err error)
}

// ErrSkipped is matched by a check's error when the backend lacks what the
// check needs. [TestRealizer] reports it with t.Skip, [Run] ignores it.
var ErrSkipped = errors.New("realizetest: check skipped")

// Check is one named conformance check.
type Check struct {
	// Name is a short CamelCase name, used as the subtest name.
	Name string
	// Doc says what the check verifies and what it needs from the backend.
	Doc string
	// Run runs the check on b and returns every failure joined, nil when
	// the backend conforms, or an error matching ErrSkipped.
	Run func(ctx context.Context, b Backend) error
}

// CheckError is one failed check, as [Run] reports it.
type CheckError struct {
	Check string
	Err   error
}

func (e *CheckError) Error() string { return "realizetest: " + e.Check + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *CheckError) Unwrap() error { return e.Err }

// Checks returns the suite's checks, in the order they run.
func Checks() []Check {
	return []Check{
		{Name: "Discovery", Run: checkDiscovery, Doc: "Devices lists GPUs 0..n-1 with distinct GPU- UUIDs and a known MIG mode; GIProfiles of the GPU under test lists distinct supported indexes with non-zero slices and counts and valid placements of one size per profile; both are stable between calls; an unknown GPU is ErrNotFound."},
		{Name: "CreateEveryPlacement", Run: checkCreateEveryPlacement, Doc: "On the idle GPU, every published placement of every profile can be created, comes back exactly as asked with one compute instance spanning the GI, is listed identically by Instances, and can be destroyed CI first."},
		{Name: "ExactPlacement", Run: checkExactPlacement, Doc: "Instances of the smallest profile created at disjoint placements from the last to the first land exactly where asked (a backend that lets the driver pick fails), with distinct GI IDs."},
		{Name: "Overlap", Run: checkOverlap, Doc: "With one instance live, creating any profile at any placement that overlaps it is ErrOccupied and changes nothing; so is creating the same placement twice."},
		{Name: "DisjointPairs", Run: checkDisjointPairs, Doc: "For every pair of profiles at disjoint placements, the second create fails with ErrOccupied when the two need more compute slices than the largest profile has, succeeds for plain (variant-less) profiles within the instance count, and otherwise either succeeds or is ErrOccupied."},
		{Name: "MediaEngines", Run: checkMediaEngines, Doc: "Creating an instance next to one that holds the media engines it needs (on an A30 1g.6gb+me and 2g.12gb+me, on an RTX PRO 6000 +me.all and any engine-bearing profile), at disjoint placements within the compute slices and instance counts, is ErrOccupied and changes nothing; the clashing pairs are derived with package placement's rules from the profile names, so the backend refuses exactly what the scheduler never reserves. Skipped when no two profiles contend for media engines."},
		{Name: "InstanceCount", Run: checkInstanceCount, Doc: "A profile with fewer allowed instances than disjoint placements (such as 1g.5gb+me) refuses one more with ErrOccupied. Skipped when no profile has such a limit."},
		{Name: "UnpublishedPlacement", Run: checkUnpublished, Doc: "Every unpublished start of a profile's size inside the grid, a published start with the wrong size, a placement past the grid and the empty placement are ErrInvalidPlacement, and nothing is created."},
		{Name: "UnsupportedProfile", Run: checkUnsupportedProfile, Doc: "A profile index below GIProfileCount that GIProfiles leaves out is ErrNotSupported. Skipped when the GPU supports every index."},
		{Name: "DestroyInUse", Run: checkDestroyInUse, Doc: "Destroying a GI that has a compute instance is ErrInUse and leaves it intact; after its CI is destroyed Instances lists the GI without compute instances; then the GI can be destroyed."},
		{Name: "NotFound", Run: checkNotFound, Doc: "Destroying a destroyed CI or GI, an unknown CI of a live GI or an unknown GI ID is ErrNotFound; every call on an unknown or negative GPU index is ErrNotFound."},
		{Name: "MIGUUIDs", Run: checkMIGUUIDs, Doc: "Instances filling the GPU have distinct MIG- UUIDs and GI IDs that stay the same across listings and when a neighbour is destroyed and recreated."},
		{Name: "Processes", Run: checkProcesses, Doc: "An idle GPU reports no processes. With StartProcess: a process on a MIG device is counted in Total and under its GI only, makes destroying its CI and GI ErrInUse, and once stopped no longer counts."},
		{Name: "Concurrency", Run: checkConcurrency, Doc: "Creates at disjoint placements from parallel goroutines all succeed with distinct GI IDs; parallel creates of one placement have exactly one winner, the rest ErrOccupied; parallel destroys succeed."},
		{Name: "CanceledContext", Run: checkCanceled, Doc: "CreateInstance and Instances with a done context fail with the context's error and create nothing."},
		{Name: "MIGDisabled", Run: checkMIGDisabled, Doc: "On a GPU listed with MIG disabled, CreateInstance is ErrMIGDisabled and Instances is ErrMIGDisabled, as NVML's GetGpuInstances answers NOT_SUPPORTED. Skipped when no GPU has MIG disabled."},
	}
}

// Run runs every check, each on a fresh backend from newBackend, and
// returns the failures as [*CheckError] values joined (nil when the backend
// conforms). Skipped checks are not failures.
func Run(ctx context.Context, newBackend func() (Backend, error)) error {
	var errs []error
	for _, c := range Checks() {
		b, err := newBackend()
		if err == nil {
			err = c.Run(ctx, b)
		}
		if err != nil && !isSkip(err) {
			errs = append(errs, &CheckError{Check: c.Name, Err: err})
		}
	}
	return errors.Join(errs...)
}

// TestRealizer runs every check as a subtest of t, each on a fresh backend
// from newBackend, reporting each failure with t.Error.
func TestRealizer(t *testing.T, newBackend func(t *testing.T) Backend) {
	t.Helper()
	for _, c := range Checks() {
		t.Run(c.Name, func(t *testing.T) {
			err := c.Run(t.Context(), newBackend(t))
			if isSkip(err) {
				t.Skip(err)
			}
			for _, e := range unjoin(err) {
				t.Error(e)
			}
		})
	}
}

// isSkip reports whether err is only a skip, with no failure joined to it.
func isSkip(err error) bool {
	return err != nil && len(unjoin(err)) == 1 && errors.Is(err, ErrSkipped)
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func skip(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSkipped}, args...)...)
}

// env is one check's view of the GPU under test and its findings.
type env struct {
	b        Backend
	r        realize.Realizer
	devs     []capability.DeviceInfo
	gpu      int
	profiles []capability.GIProfileInfo
	width    uint32
	budget   uint32 // compute slices: the largest profile's SliceCount
	errs     []error
	created  map[uint32]bool // GI IDs this check created
}

// setup finds the idle MIG-enabled GPU the check runs on.
func setup(ctx context.Context, b Backend) (*env, error) {
	if b.Realizer == nil {
		return nil, errors.New("nil Realizer in the Backend")
	}
	e := &env{b: b, r: b.Realizer, gpu: -1, created: map[uint32]bool{}}
	devs, err := e.r.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("calling Devices: %w", err)
	}
	e.devs = devs
	for _, d := range devs {
		if d.MIGMode != capability.MIGEnabled {
			continue
		}
		insts, err := e.r.Instances(ctx, d.Index)
		if err != nil {
			return nil, fmt.Errorf("Instances(%d): %w", d.Index, err)
		}
		procs, err := e.r.Processes(ctx, d.Index)
		if err != nil {
			return nil, fmt.Errorf("Processes(%d): %w", d.Index, err)
		}
		if len(insts) == 0 && !procs.Busy() {
			e.gpu = d.Index
			break
		}
	}
	if e.gpu < 0 {
		return nil, errors.New("the backend has no idle MIG-enabled GPU (no instances, no processes)")
	}
	if e.profiles, err = e.r.GIProfiles(ctx, e.gpu); err != nil {
		return nil, fmt.Errorf("GIProfiles(%d): %w", e.gpu, err)
	}
	if len(e.profiles) == 0 {
		return nil, fmt.Errorf("GIProfiles(%d) lists no profiles", e.gpu)
	}
	for _, p := range e.profiles {
		e.budget = max(e.budget, p.SliceCount)
		for _, pl := range p.Placements {
			e.width = max(e.width, pl.End())
		}
	}
	return e, nil
}

// checkFunc adapts a check body to Check.Run: setup, body, cleanup, and a
// final check that the GPU is idle again.
func checkFunc(body func(ctx context.Context, e *env) error) func(context.Context, Backend) error {
	return func(ctx context.Context, b Backend) error {
		e, err := setup(ctx, b)
		if err != nil {
			return err
		}
		if err := body(ctx, e); isSkip(err) {
			e.cleanup(ctx)
			return err
		} else if err != nil {
			e.errs = append(e.errs, err)
		}
		e.cleanup(ctx)
		return errors.Join(e.errs...)
	}
}

func (e *env) failf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Errorf(format, args...))
}

// create creates an instance and checks its shape when it succeeds.
func (e *env) create(ctx context.Context, p capability.GIProfileInfo, at capability.Placement) (realize.Instance, error) {
	inst, err := e.r.CreateInstance(ctx, e.gpu, p.Index, at)
	if err != nil {
		return inst, err
	}
	e.created[inst.GIID] = true
	what := fmt.Sprintf("CreateInstance(GPU %d, %s index %d, %v)", e.gpu, p.Name, p.Index, at)
	if inst.GPU != e.gpu || inst.Profile != p.Index || inst.Placement != at {
		e.failf("%s returned GPU %d profile %d at %v: not exactly what was asked", what, inst.GPU, inst.Profile, inst.Placement)
	}
	if len(inst.ComputeInstances) != 1 {
		e.failf("%s returned %d compute instances, want 1", what, len(inst.ComputeInstances))
		return inst, nil
	}
	ci := inst.ComputeInstances[0]
	wantCI, _ := capability.FullCIProfileIndex(p.SliceCount)
	if ci.SliceCount != p.SliceCount || ci.Profile != wantCI {
		e.failf("%s: CI spans %d slices with CI profile %d, want %d slices, profile %d", what, ci.SliceCount, ci.Profile, p.SliceCount, wantCI)
	}
	if !strings.HasPrefix(ci.MIGUUID, "MIG-") {
		e.failf("%s: MIG UUID %q, want MIG-...", what, ci.MIGUUID)
	}
	return inst, nil
}

// mustCreate is create that records an unexpected failure.
func (e *env) mustCreate(ctx context.Context, p capability.GIProfileInfo, at capability.Placement) (realize.Instance, bool) {
	inst, err := e.create(ctx, p, at)
	if err != nil {
		e.failf("CreateInstance(GPU %d, %s index %d, %v) on a free range: %v", e.gpu, p.Name, p.Index, at, err)
		return inst, false
	}
	return inst, true
}

// destroy destroys an instance's compute instances, then its GI, and
// stops tracking it.
func (e *env) destroy(ctx context.Context, inst realize.Instance) error {
	if err := e.destroyConcurrently(ctx, inst); err != nil {
		return err
	}
	delete(e.created, inst.GIID)
	return nil
}

func (e *env) mustDestroy(ctx context.Context, inst realize.Instance) {
	if err := e.destroy(ctx, inst); err != nil {
		e.failf("%v", err)
	}
}

// cleanup destroys whatever the check created and is still listed, then
// requires the GPU to be empty again.
func (e *env) cleanup(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	insts, err := e.r.Instances(ctx, e.gpu)
	if err != nil {
		e.failf("cleanup: Instances(%d): %v", e.gpu, err)
		return
	}
	for _, inst := range insts {
		if !e.created[inst.GIID] {
			continue
		}
		if err := e.destroy(ctx, inst); err != nil {
			e.failf("cleanup: %v", err)
		}
	}
	if left, err := e.r.Instances(ctx, e.gpu); err != nil || len(left) != 0 {
		e.failf("after cleanup GPU %d still lists %d instances (err %v): destroys must really destroy", e.gpu, len(left), err)
	}
}

// list returns the GPU's instances, recording a failure.
func (e *env) list(ctx context.Context) []realize.Instance {
	insts, err := e.r.Instances(ctx, e.gpu)
	if err != nil {
		e.failf("Instances(%d): %v", e.gpu, err)
	}
	return insts
}

// expectListed requires Instances to list inst exactly.
func (e *env) expectListed(ctx context.Context, inst realize.Instance) {
	for _, got := range e.list(ctx) {
		if got.GIID == inst.GIID {
			if !sameInstance(got, inst) {
				e.failf("Instances lists GI %d as %+v, want %+v", inst.GIID, got, inst)
			}
			return
		}
	}
	e.failf("Instances does not list GI %d (%v)", inst.GIID, inst.Placement)
}

func sameInstance(a, b realize.Instance) bool {
	return a.GPU == b.GPU && a.Profile == b.Profile && a.Placement == b.Placement && a.GIID == b.GIID &&
		slices.Equal(a.ComputeInstances, b.ComputeInstances)
}

// expectKind requires err to be a *realize.HardwareError for gpu whose
// Kind is kind.
func (e *env) expectKind(what string, err error, gpu int, kind error) {
	if err == nil {
		e.failf("%s succeeded, want %v", what, kind)
		return
	}
	var he *realize.HardwareError
	switch {
	case !errors.Is(err, kind):
		e.failf("%s: got %v, want %v", what, err, kind)
	case !errors.As(err, &he):
		e.failf("%s: %v (%T) is not a *realize.HardwareError", what, err, err)
	case he.Kind != kind:
		e.failf("%s: HardwareError.Kind = %v, want %v", what, he.Kind, kind)
	case he.GPU != gpu:
		e.failf("%s: HardwareError.GPU = %d, want %d", what, he.GPU, gpu)
	case he.Op == "":
		e.failf("%s: HardwareError.Op is empty", what)
	}
}

// expectUnchanged requires the listing to equal before.
func (e *env) expectUnchanged(ctx context.Context, what string, before []realize.Instance) {
	after := e.list(ctx)
	if !slices.EqualFunc(before, after, sameInstance) {
		e.failf("%s changed the hardware: %d instances before, %d after", what, len(before), len(after))
	}
}

// smallest returns the profile with the smallest placements (then fewest
// slices, then lowest index): the one that packs the most instances.
func (e *env) smallest() capability.GIProfileInfo {
	return slices.MinFunc(e.profiles, func(a, b capability.GIProfileInfo) int {
		if c := compareUint(a.Placements[0].Size, b.Placements[0].Size); c != 0 {
			return c
		}
		if c := compareUint(a.SliceCount, b.SliceCount); c != 0 {
			return c
		}
		return int(a.Index) - int(b.Index)
	})
}

func compareUint(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// disjoint returns the profile's placements, in order, that do not overlap
// an earlier one, within its instance count and the compute budget.
func (e *env) disjoint(p capability.GIProfileInfo) []capability.Placement {
	var out []capability.Placement
	for _, at := range p.Placements {
		if uint32(len(out)) >= p.InstanceCount || uint32(len(out)+1)*p.SliceCount > e.budget {
			break
		}
		if !slices.ContainsFunc(out, at.Overlaps) {
			out = append(out, at)
		}
	}
	return out
}
