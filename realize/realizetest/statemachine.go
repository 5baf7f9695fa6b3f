package realizetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/realize"
)

// MachineProperty returns a rapid state machine over the backends
// newBackend returns (a fresh one per test case): random sequences of
// CreateInstance at published and unpublished placements,
// DestroyComputeInstance and DestroyGPUInstance of live and unknown IDs,
// and (with Backend.StartProcess) processes started and stopped on MIG
// devices, on the GPU the fixed checks use. A reference [Model] of the
// NVML rules predicts every answer, and after every step Instances and
// Processes must equal the model's state.
//
// The model's rules: a GPU instance is created only at a placement its
// profile publishes (else ErrInvalidPlacement), and exactly there; not
// over a live instance's slots, beyond the profile's instance count, over
// the compute-slice budget (the largest profile's slice count) or when
// its media engines are taken (each ErrOccupied); it gets one compute
// instance spanning its slices with a MIG UUID no live device has, and a
// GPU instance ID no live instance has. Destroying a GPU instance with a
// compute instance, or a compute instance with processes, is ErrInUse;
// unknown IDs are ErrNotFound. Every error is a *realize.HardwareError
// with the sentinel as Kind. Media engines are not on the Realizer's
// profile info, so the model takes them from the placement package's
// rules ([placement.Grid.EnginesFit]) over the names the GPU reports.
//
// The run ends by stopping every process and destroying every instance,
// which must leave the GPU empty.
func MachineProperty(newBackend func() (Backend, error)) func(*rapid.T) {
	return func(t *rapid.T) {
		ctx := context.Background()
		b, err := newBackend()
		if err != nil {
			t.Fatalf("new backend: %v", err)
		}
		e, err := setup(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewModel(e.devs[e.gpu], e.profiles)
		if err != nil {
			t.Fatal(err)
		}
		sm := &machine{ctx: ctx, e: e, m: m, stops: map[uint32]func() error{}}
		defer sm.teardown(t)
		t.Repeat(map[string]func(*rapid.T){
			"create":             sm.create,
			"createUnpublished":  sm.createUnpublished,
			"destroyGI":          sm.destroyGI,
			"destroyCI":          sm.destroyCI,
			"destroyUnknown":     sm.destroyUnknown,
			"destroyComputeThen": sm.destroyComputeThenGI,
			"startProcess":       sm.startProcess,
			"stopProcess":        sm.stopProcess,
			"":                   sm.check,
		})
	}
}

// TestStateMachine runs [MachineProperty] with rapid.Check; the number of
// runs and steps follow -rapid.checks and -rapid.steps.
func TestStateMachine(t *testing.T, newBackend func() (Backend, error)) {
	t.Helper()
	rapid.Check(t, MachineProperty(newBackend))
}

// Model is a reference model of one GPU's MIG state under the NVML rules
// listed at [MachineProperty]: what a backend must answer to each call,
// computed from the GPU's profile table alone. It is a plain value, not
// safe for concurrent use.
type Model struct {
	gpu      int
	profiles []capability.GIProfileInfo
	budget   uint32
	grid     *placement.Grid
	names    map[capability.GIProfileIndex]string
	// live GPU instances by GI ID.
	live map[uint32]*modelGI
}

type modelGI struct {
	inst  realize.Instance
	procs map[uint32]int // processes per CI ID
}

// NewModel returns the model of an empty GPU dev with the profile table
// profiles (from GIProfiles).
func NewModel(dev capability.DeviceInfo, profiles []capability.GIProfileInfo) (*Model, error) {
	m := &Model{gpu: dev.Index, profiles: profiles, live: map[uint32]*modelGI{}, names: map[capability.GIProfileIndex]string{}}
	for _, p := range profiles {
		m.budget = max(m.budget, p.SliceCount)
	}
	gpu, errs := capability.GPUFromDevice(dev, profiles)
	if len(errs) > 0 {
		return nil, fmt.Errorf("GPU %d's profiles do not compile: %v", dev.Index, errs[0])
	}
	for _, p := range gpu.Profiles {
		m.names[p.GIProfileIndex] = p.Name
	}
	g, err := placement.NewGrid(&gpu)
	if err != nil {
		return nil, err
	}
	m.grid = g
	return m, nil
}

func (m *Model) profile(idx capability.GIProfileIndex) (capability.GIProfileInfo, bool) {
	for _, p := range m.profiles {
		if p.Index == idx {
			return p, true
		}
	}
	return capability.GIProfileInfo{}, false
}

// CreateOutcome is the sentinel CreateInstance must return for profile at
// placement at, or nil when it must succeed.
func (m *Model) CreateOutcome(idx capability.GIProfileIndex, at capability.Placement) error {
	p, ok := m.profile(idx)
	if !ok {
		return realize.ErrNotSupported
	}
	if !slices.Contains(p.Placements, at) {
		return realize.ErrInvalidPlacement
	}
	var slicesUsed uint32
	count := uint32(0)
	var eng placement.Engines
	for _, gi := range m.live {
		if gi.inst.Placement.Overlaps(at) {
			return realize.ErrOccupied
		}
		q, _ := m.profile(gi.inst.Profile)
		slicesUsed += q.SliceCount
		if gi.inst.Profile == idx {
			count++
		}
		eng = eng.Add(m.grid.EnginesOf(m.names[gi.inst.Profile]))
	}
	if p.InstanceCount > 0 && count >= p.InstanceCount {
		return realize.ErrOccupied
	}
	if slicesUsed+p.SliceCount > m.budget {
		return realize.ErrOccupied
	}
	if !m.grid.EnginesFit(eng, m.names[idx]) {
		return realize.ErrOccupied
	}
	return nil
}

// Created checks a successful CreateInstance's result against the model
// and records it.
func (m *Model) Created(idx capability.GIProfileIndex, at capability.Placement, inst realize.Instance) error {
	p, _ := m.profile(idx)
	switch {
	case inst.GPU != m.gpu || inst.Profile != idx || inst.Placement != at:
		return fmt.Errorf("created %+v, asked for profile %d at %v on GPU %d", inst, idx, at, m.gpu)
	case m.live[inst.GIID] != nil:
		return fmt.Errorf("GPU instance ID %d given twice (live: %+v)", inst.GIID, m.live[inst.GIID].inst)
	case len(inst.ComputeInstances) != 1 || inst.ComputeInstances[0].SliceCount != p.SliceCount:
		return fmt.Errorf("created %+v: want one compute instance of %d slices", inst, p.SliceCount)
	case !strings.HasPrefix(inst.ComputeInstances[0].MIGUUID, "MIG-") || m.hasMIG(inst.ComputeInstances[0].MIGUUID):
		return fmt.Errorf("created %+v: MIG UUID missing or already live", inst)
	}
	inst.ComputeInstances = slices.Clone(inst.ComputeInstances)
	m.live[inst.GIID] = &modelGI{inst: inst, procs: map[uint32]int{}}
	return nil
}

func (m *Model) hasMIG(uuid string) bool {
	for _, gi := range m.live {
		for _, ci := range gi.inst.ComputeInstances {
			if ci.MIGUUID == uuid {
				return true
			}
		}
	}
	return false
}

// DestroyGIOutcome is the sentinel DestroyGPUInstance(gi) must return, or
// nil when it must succeed (the model then forgets gi).
func (m *Model) DestroyGIOutcome(gi uint32) error {
	g := m.live[gi]
	switch {
	case g == nil:
		return realize.ErrNotFound
	case len(g.inst.ComputeInstances) > 0:
		return realize.ErrInUse
	}
	delete(m.live, gi)
	return nil
}

// DestroyCIOutcome is the sentinel DestroyComputeInstance(gi, ci) must
// return, or nil when it must succeed (the model then forgets ci).
func (m *Model) DestroyCIOutcome(gi, ci uint32) error {
	g := m.live[gi]
	if g == nil {
		return realize.ErrNotFound
	}
	k := slices.IndexFunc(g.inst.ComputeInstances, func(c realize.ComputeInstance) bool { return c.ID == ci })
	switch {
	case k < 0:
		return realize.ErrNotFound
	case g.procs[ci] > 0:
		return realize.ErrInUse
	}
	g.inst.ComputeInstances = slices.Delete(g.inst.ComputeInstances, k, k+1)
	delete(g.procs, ci)
	return nil
}

// Instances returns the model's live instances ordered by placement start,
// as a backend's Instances must list them (compared ignoring order).
func (m *Model) Instances() []realize.Instance {
	out := make([]realize.Instance, 0, len(m.live))
	for _, g := range m.live {
		out = append(out, g.inst)
	}
	slices.SortFunc(out, func(a, b realize.Instance) int { return int(a.Placement.Start) - int(b.Placement.Start) })
	return out
}

// Compare reports how got (a backend's Instances) differs from the model.
func (m *Model) Compare(got []realize.Instance) error {
	want := m.Instances()
	got = slices.Clone(got)
	slices.SortFunc(got, func(a, b realize.Instance) int { return int(a.Placement.Start) - int(b.Placement.Start) })
	if len(got) != len(want) {
		return fmt.Errorf("Instances lists %d GPU instances, the model %d:\n got %s\nwant %s", len(got), len(want), listString(got), listString(want))
	}
	for i := range got {
		if !sameInstance(got[i], want[i]) || !slices.Equal(got[i].ComputeInstances, want[i].ComputeInstances) {
			return fmt.Errorf("Instances differs from the model:\n got %s\nwant %s", listString(got), listString(want))
		}
	}
	return nil
}

// ProcessCounts returns the processes the model runs per GPU instance.
func (m *Model) ProcessCounts() (total int, byGI map[uint32]int) {
	for id, g := range m.live {
		for _, n := range g.procs {
			if n > 0 {
				if byGI == nil {
					byGI = map[uint32]int{}
				}
				byGI[id] += n
				total += n
			}
		}
	}
	return total, byGI
}

func listString(l []realize.Instance) string {
	parts := make([]string, len(l))
	for i, in := range l {
		cis := make([]string, len(in.ComputeInstances))
		for k, c := range in.ComputeInstances {
			cis[k] = fmt.Sprintf("ci%d/%d %s", c.ID, c.SliceCount, c.MIGUUID)
		}
		parts[i] = fmt.Sprintf("gi%d p%d %v [%s]", in.GIID, in.Profile, in.Placement, strings.Join(cis, " "))
	}
	return "{" + strings.Join(parts, "; ") + "}"
}

type machine struct {
	ctx   context.Context
	e     *env
	m     *Model
	stops map[uint32]func() error // by a process number of ours
	procs []machineProc
	next  uint32
}

type machineProc struct {
	id     uint32
	gi, ci uint32
}

func (s *machine) r() realize.Realizer { return s.e.r }

// expect checks err against the sentinel want (nil: success).
func (s *machine) expect(t *rapid.T, what string, err, want error) {
	if want == nil {
		if err != nil {
			t.Fatalf("%s: %v, the model expects success; state %s", what, err, listString(s.m.Instances()))
		}
		return
	}
	var he *realize.HardwareError
	switch {
	case err == nil:
		t.Fatalf("%s succeeded, the model expects %v; state %s", what, want, listString(s.m.Instances()))
	case !errors.Is(err, want):
		t.Fatalf("%s: %v, the model expects %v; state %s", what, err, want, listString(s.m.Instances()))
	case !errors.As(err, &he):
		t.Fatalf("%s: %v is not a *realize.HardwareError", what, err)
	}
}

// profile draws one of the GPU's profiles by name and index, so that rapid
// logs those rather than the whole profile info.
func (s *machine) profile(t *rapid.T) capability.GIProfileInfo {
	names := make([]string, len(s.m.profiles))
	for i, p := range s.m.profiles {
		names[i] = fmt.Sprintf("%s (index %d)", p.Name, p.Index)
	}
	return s.m.profiles[slices.Index(names, rapid.SampledFrom(names).Draw(t, "profile"))]
}

func (s *machine) create(t *rapid.T) {
	p := s.profile(t)
	if len(p.Placements) == 0 {
		t.Skip("profile without placements")
	}
	at := rapid.SampledFrom(p.Placements).Draw(t, "placement")
	s.doCreate(t, p, at)
}

func (s *machine) createUnpublished(t *rapid.T) {
	p := s.profile(t)
	if len(p.Placements) == 0 {
		t.Skip("profile without placements")
	}
	at := rapid.SampledFrom(p.Placements).Draw(t, "near placement")
	at.Start += uint32(rapid.IntRange(1, 3).Draw(t, "shift"))
	if slices.Contains(p.Placements, at) {
		t.Skip("shift lands on a published placement")
	}
	s.doCreate(t, p, at)
}

func (s *machine) doCreate(t *rapid.T, p capability.GIProfileInfo, at capability.Placement) {
	want := s.m.CreateOutcome(p.Index, at)
	inst, err := s.r().CreateInstance(s.ctx, s.e.gpu, p.Index, at)
	what := fmt.Sprintf("CreateInstance(%s at %v)", p.Name, at)
	s.expect(t, what, err, want)
	if err == nil {
		if err := s.m.Created(p.Index, at, inst); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func (s *machine) pickGI(t *rapid.T) (uint32, bool) {
	ids := make([]uint32, 0, len(s.m.live))
	for id := range s.m.live {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return 0, false
	}
	slices.Sort(ids)
	return rapid.SampledFrom(ids).Draw(t, "gpu instance"), true
}

func (s *machine) destroyGI(t *rapid.T) {
	gi, ok := s.pickGI(t)
	if !ok {
		t.Skip("no GPU instance")
	}
	want := s.m.DestroyGIOutcome(gi)
	s.expect(t, fmt.Sprintf("DestroyGPUInstance(%d)", gi), s.r().DestroyGPUInstance(s.ctx, s.e.gpu, gi), want)
}

func (s *machine) destroyCI(t *rapid.T) {
	gi, ok := s.pickGI(t)
	if !ok || len(s.m.live[gi].inst.ComputeInstances) == 0 {
		t.Skip("no compute instance")
	}
	ci := s.m.live[gi].inst.ComputeInstances[0].ID
	want := s.m.DestroyCIOutcome(gi, ci)
	s.expect(t, fmt.Sprintf("DestroyComputeInstance(%d, %d)", gi, ci), s.r().DestroyComputeInstance(s.ctx, s.e.gpu, gi, ci), want)
}

// destroyComputeThenGI is the manager's release sequence.
func (s *machine) destroyComputeThenGI(t *rapid.T) {
	gi, ok := s.pickGI(t)
	if !ok {
		t.Skip("no GPU instance")
	}
	for _, ci := range slices.Clone(s.m.live[gi].inst.ComputeInstances) {
		want := s.m.DestroyCIOutcome(gi, ci.ID)
		s.expect(t, fmt.Sprintf("DestroyComputeInstance(%d, %d)", gi, ci.ID), s.r().DestroyComputeInstance(s.ctx, s.e.gpu, gi, ci.ID), want)
	}
	want := s.m.DestroyGIOutcome(gi)
	s.expect(t, fmt.Sprintf("DestroyGPUInstance(%d)", gi), s.r().DestroyGPUInstance(s.ctx, s.e.gpu, gi), want)
}

func (s *machine) destroyUnknown(t *rapid.T) {
	gi := uint32(rapid.IntRange(0, 40).Draw(t, "gpu instance id"))
	if s.m.live[gi] != nil {
		ci := uint32(rapid.IntRange(1, 8).Draw(t, "unknown ci"))
		if slices.ContainsFunc(s.m.live[gi].inst.ComputeInstances, func(c realize.ComputeInstance) bool { return c.ID == ci }) {
			t.Skip("live compute instance")
		}
		s.expect(t, fmt.Sprintf("DestroyComputeInstance(%d, %d)", gi, ci), s.r().DestroyComputeInstance(s.ctx, s.e.gpu, gi, ci), realize.ErrNotFound)
		return
	}
	want := s.m.DestroyGIOutcome(gi)
	s.expect(t, fmt.Sprintf("DestroyGPUInstance(%d)", gi), s.r().DestroyGPUInstance(s.ctx, s.e.gpu, gi), want)
}

func (s *machine) startProcess(t *rapid.T) {
	if s.e.b.StartProcess == nil {
		t.Skip("no StartProcess")
	}
	gi, ok := s.pickGI(t)
	if !ok || len(s.m.live[gi].inst.ComputeInstances) == 0 {
		t.Skip("no MIG device")
	}
	ci := s.m.live[gi].inst.ComputeInstances[0]
	stop, err := s.e.b.StartProcess(s.ctx, s.e.gpu, ci.MIGUUID)
	if err != nil {
		t.Fatalf("StartProcess on %s: %v", ci.MIGUUID, err)
	}
	s.next++
	s.stops[s.next] = stop
	s.procs = append(s.procs, machineProc{id: s.next, gi: gi, ci: ci.ID})
	s.m.live[gi].procs[ci.ID]++
}

func (s *machine) stopProcess(t *rapid.T) {
	if len(s.procs) == 0 {
		t.Skip("no process")
	}
	k := rapid.IntRange(0, len(s.procs)-1).Draw(t, "process")
	p := s.procs[k]
	if err := s.stops[p.id](); err != nil {
		t.Fatalf("stopping a process: %v", err)
	}
	delete(s.stops, p.id)
	s.procs = slices.Delete(s.procs, k, k+1)
	s.m.live[p.gi].procs[p.ci]--
}

func (s *machine) check(t *rapid.T) {
	got, err := s.r().Instances(s.ctx, s.e.gpu)
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	if err := s.m.Compare(got); err != nil {
		t.Fatal(err)
	}
	if s.e.b.StartProcess == nil {
		return
	}
	rep, err := s.r().Processes(s.ctx, s.e.gpu)
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	total, byGI := s.m.ProcessCounts()
	if rep.Total != total || len(rep.ByGPUInstance) != len(byGI) {
		t.Fatalf("Processes = %+v, the model runs %d (%v)", rep, total, byGI)
	}
	for gi, n := range byGI {
		if rep.ByGPUInstance[gi] != n {
			t.Fatalf("Processes = %+v, the model runs %v", rep, byGI)
		}
	}
}

// teardown stops every process and destroys every instance; the GPU must
// end empty.
func (s *machine) teardown(t *rapid.T) {
	for _, p := range s.procs {
		_ = s.stops[p.id]()
	}
	for gi, g := range s.m.live {
		for _, ci := range g.inst.ComputeInstances {
			_ = s.r().DestroyComputeInstance(s.ctx, s.e.gpu, gi, ci.ID)
		}
		_ = s.r().DestroyGPUInstance(s.ctx, s.e.gpu, gi)
	}
	if got, err := s.r().Instances(s.ctx, s.e.gpu); err != nil || len(got) != 0 {
		t.Fatalf("after teardown Instances = %s, %v; want none", listString(got), err)
	}
}
