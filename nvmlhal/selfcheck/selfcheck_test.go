package selfcheck_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/nvmlhal/selfcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func backend(t testing.TB, model nvmlmock.Model, opts nvmlmock.Options) *nvmlhal.Backend {
	t.Helper()
	srv := nvmlmock.New(model, opts)
	b := nvmlhal.New(nvmlhal.Options{NVML: srv, Sysfs: srv.Sysfs()})
	if err := b.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

// Every mock is built from the presets, so every GPU of every mock, at
// either driver generation, matches; with an instance of every profile
// live, the compute instance profiles are checked too.
func TestMocksMatchPresets(t *testing.T) {
	for _, drv := range []fakehal.Driver{fakehal.DriverCurrent, fakehal.DriverEarly} {
		for _, model := range nvmlmock.Models {
			b := backend(t, model, nvmlmock.Options{Driver: drv})
			results, err := selfcheck.Check(t.Context(), b)
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 8 {
				t.Fatalf("%v: %d results, want 8", model, len(results))
			}
			for _, r := range results {
				if !r.OK() {
					t.Errorf("%v (%v) GPU %d: %+v", model, drv, r.GPU, r.Differences)
				}
			}
			if results[0].Generation != drv && len(fakehalOlder(model)) > 0 {
				t.Errorf("%v: compared with the %v table, want %v", model, results[0].Generation, drv)
			}
			b.Shutdown(context.Background())
		}
	}
}

func fakehalOlder(model nvmlmock.Model) []fakehal.DriverTable {
	m, _ := fakehal.LookupModel(model.Preset())
	return m.Older
}

// TestComputeProfilesChecked: a live instance makes its profile's compute
// instance profiles checked; the others stay "not checked".
func TestComputeProfilesChecked(t *testing.T) {
	b := backend(t, nvmlmock.A30, nvmlmock.Options{})
	defer b.Shutdown(context.Background())
	if _, err := b.CreateInstance(t.Context(), 0, capability.GIProfile2Slice, capability.Placement{Start: 0, Size: 2}); err != nil {
		t.Fatal(err)
	}
	results, err := selfcheck.Check(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	r := results[0]
	if !r.OK() || len(r.Unchecked) != 1 || strings.Contains(r.Unchecked[0], "2g.12gb,") || !strings.Contains(r.Unchecked[0], "4g.24gb") {
		t.Errorf("GPU 0: OK %v, unchecked %v; want OK with every profile but 2g.12gb unchecked", r.OK(), r.Unchecked)
	}
	if len(results[1].Unchecked) != 1 || !strings.Contains(results[1].Unchecked[0], "2g.12gb,") {
		t.Errorf("GPU 1: unchecked %v, want every profile", results[1].Unchecked)
	}
}

// TestCompareFindsDifferences shows the check can fail: an H100 PCIe that
// reported the SXM5 table (the bug the H100 PCIe preset fixes) differs in
// every SM count, and a profile the preset lacks or the GPU lacks is
// reported.
func TestCompareFindsDifferences(t *testing.T) {
	b := backend(t, nvmlmock.DGXH100, nvmlmock.Options{})
	defer b.Shutdown(context.Background())
	got, err := b.Inspect(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pcie, _ := fakehal.LookupModel("NVIDIA H100 PCIe")
	r := selfcheck.Compare(pcie, got)
	if r.OK() || len(r.Differences) != 7 {
		t.Errorf("H100 PCIe preset vs an SXM5 GPU: %d differences %+v, want the 7 SM counts", len(r.Differences), r.Differences)
	}
	for _, d := range r.Differences {
		if d.Field != "SMs" {
			t.Errorf("unexpected difference %+v", d)
		}
	}
	got.Profiles = got.Profiles[1:] // the GPU lacks one profile
	got.Profiles[0].Decoders++      // and reports another engine
	r = selfcheck.Compare(fakehal.Model{Name: "x", MemoryMB: got.Device.MemoryMB}, got)
	if len(r.Differences) != len(got.Profiles) {
		t.Errorf("empty preset: %d differences, want one per reported profile", len(r.Differences))
	}
}

func TestNoPreset(t *testing.T) {
	r := selfcheck.Result{GPU: 0, Name: "NVIDIA L40S"}
	if r.OK() {
		t.Error("a GPU without a preset is OK")
	}
	if err := selfcheck.Write(io.Discard, []selfcheck.Result{r}); err != nil {
		t.Fatal(err)
	}
}

// Example is the self-check on a strict mock of a DGX B200 whose driver
// reports the early table, with one instance live on GPU 0 (GPU 0 shown).
func Example() {
	srv := nvmlmock.New(nvmlmock.DGXB200, nvmlmock.Options{Driver: fakehal.DriverEarly})
	b := nvmlhal.New(nvmlhal.Options{NVML: srv, Sysfs: srv.Sysfs()})
	ctx := context.Background()
	if err := b.Init(ctx); err != nil {
		panic(err)
	}
	defer b.Shutdown(ctx)
	if _, err := b.CreateInstance(ctx, 0, capability.GIProfile1Slice, capability.Placement{Start: 0, Size: 1}); err != nil {
		panic(err)
	}
	results, err := selfcheck.Check(ctx, b)
	if err != nil {
		panic(err)
	}
	_ = selfcheck.Write(os.Stdout, results[:1])
	// Output:
	// GPU 0 "NVIDIA B200" (driver 580.65.06): preset "NVIDIA B200" (early drivers' table), unconfirmed: 3g/4g/7g memory and SM counts, placements and media engines unconfirmed: matches
	//   not checked: compute instance profiles of 1g.23gb+me, 1g.45gb, 2g.45gb, 3g.90gb, 4g.90gb, 7g.180gb (no live instance to read them from; the check creates none)
	//   implied, not measured: 1g.23gb+me: compute instance profile 0, 1 slice(s), 18 SMs
	//   implied, not measured: 1g.45gb: compute instance profile 0, 1 slice(s), 30 SMs
	//   implied, not measured: 2g.45gb: compute instance profile 1, 2 slice(s), 36 SMs
	//   implied, not measured: 3g.90gb: compute instance profile 2, 3 slice(s), 72 SMs
	//   implied, not measured: 4g.90gb: compute instance profile 3, 4 slice(s), 96 SMs
	//   implied, not measured: 7g.180gb: compute instance profile 4, 7 slice(s), 148 SMs
}

// ExampleCompare shows the differences table: an H100 PCIe preset against
// a GPU reporting the SXM5 table.
func ExampleCompare() {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	b := nvmlhal.New(nvmlhal.Options{NVML: srv, Sysfs: srv.Sysfs()})
	ctx := context.Background()
	if err := b.Init(ctx); err != nil {
		panic(err)
	}
	defer b.Shutdown(ctx)
	got, err := b.Inspect(ctx, 0)
	if err != nil {
		panic(err)
	}
	pcie, _ := fakehal.LookupModel("NVIDIA H100 PCIe")
	r := selfcheck.Compare(pcie, got)
	r.Unchecked, r.Implied = nil, nil // no instance is live: every CI profile is unchecked
	_ = selfcheck.Write(os.Stdout, []selfcheck.Result{r})
	// Output:
	// GPU 0 "NVIDIA H100 80GB HBM3" (driver 580.65.06): preset "NVIDIA H100 PCIe": 7 differences (7 mismatch)
	//   profile     field  preset  driver  class
	//   1g.10gb     SMs    14      16      mismatch
	//   1g.10gb+me  SMs    14      16      mismatch
	//   1g.20gb     SMs    14      26      mismatch
	//   2g.20gb     SMs    30      32      mismatch
	//   3g.40gb     SMs    46      60      mismatch
	//   4g.40gb     SMs    62      64      mismatch
	//   7g.80gb     SMs    114     132     mismatch
}

// recordedH200 is what the read-only check read from an H200 SXM with
// driver 580.159.04 (NVML 13.580.159.04, MIG mode disabled), as recorded in
// mig-hardware-facts: names from the V2 query, V1 numbers, placements and
// engine counts. MIG was off, so no compute instance profile was read.
func recordedH200() nvmlhal.Inspection {
	type row struct {
		idx                 capability.GIProfileIndex
		id                  uint32
		name                string
		slices, max, sms    uint32
		mib                 uint64
		pl                  []capability.Placement
		dec, enc, jpeg, ofa uint32
	}
	st := func(size uint32, at ...uint32) []capability.Placement {
		out := make([]capability.Placement, len(at))
		for i, s := range at {
			out[i] = capability.Placement{Start: s, Size: size}
		}
		return out
	}
	rows := []row{
		{capability.GIProfile1Slice, 19, "1g.18gb", 1, 7, 16, 16384, st(1, 0, 1, 2, 3, 4, 5, 6), 1, 0, 1, 0},
		{capability.GIProfile2Slice, 14, "2g.35gb", 2, 3, 32, 33280, st(2, 0, 2, 4), 2, 0, 2, 0},
		{capability.GIProfile3Slice, 9, "3g.71gb", 3, 2, 60, 71424, st(4, 0, 4), 3, 0, 3, 0},
		{capability.GIProfile4Slice, 5, "4g.71gb", 4, 1, 64, 71424, st(4, 0), 4, 0, 4, 0},
		{capability.GIProfile7Slice, 0, "7g.141gb", 7, 1, 132, 143360, st(8, 0), 7, 0, 7, 1},
		{capability.GIProfile1SliceRev1, 20, "1g.18gb+me", 1, 1, 16, 16384, st(1, 0, 1, 2, 3, 4, 5, 6), 1, 0, 1, 1},
		{capability.GIProfile1SliceRev2, 15, "1g.35gb", 1, 4, 26, 33280, st(2, 0, 2, 4, 6), 1, 0, 1, 0},
	}
	out := nvmlhal.Inspection{
		Device: capability.DeviceInfo{Index: 0, UUID: "GPU-recorded", Name: "NVIDIA H200", MemoryMB: 143771,
			MIGMode: capability.MIGDisabled, PendingMIGMode: capability.MIGDisabled},
		DriverVersion: "580.159.04",
	}
	for _, r := range rows {
		out.Profiles = append(out.Profiles, nvmlhal.InspectedProfile{
			GIProfileInfo: capability.GIProfileInfo{Index: r.idx, ID: r.id, Name: r.name, SliceCount: r.slices,
				InstanceCount: r.max, MultiprocessorCount: r.sms, MemoryMB: r.mib, Placements: r.pl},
			Decoders: r.dec, Encoders: r.enc, JPEG: r.jpeg, OFA: r.ofa,
		})
	}
	return out
}

// The H200 preset reproduces the recorded driver answers: no difference,
// and the compute instance profiles, unread with MIG off, implied.
func TestRecordedH200(t *testing.T) {
	m, _ := fakehal.LookupModel("NVIDIA H200")
	r := selfcheck.Compare(m, recordedH200())
	if !r.OK() || r.Generation != fakehal.DriverCurrent {
		t.Errorf("recorded H200 answers: %d differences %+v at the %v table, want none at the current one", len(r.Differences), r.Differences, r.Generation)
	}
	if len(r.Implied) != 7 {
		t.Errorf("implied compute instance profiles %+v, want one per profile", r.Implied)
	}
	for _, c := range r.Implied {
		if c.Profile == "3g.71gb" && (c.Index != capability.CIProfileIndex(2) || c.SliceCount != 3 || c.SMs != 60) {
			t.Errorf("3g.71gb implied %+v, want CI profile 2, 3 slices, 60 SMs", c)
		}
	}
	// The driver-580 mock with MIG off is read the same way, names from V2.
	b := backend(t, nvmlmock.DGXH200, nvmlmock.Options{Driver580: true, MIGDisabled: true})
	defer b.Shutdown(context.Background())
	results, err := selfcheck.Check(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !r.OK() || r.DriverVersion != "580.159.04" {
			t.Errorf("driver-580 mock GPU %d: %+v (driver %s)", r.GPU, r.Differences, r.DriverVersion)
		}
	}
}

// Each difference is classified: a value of the preset's other driver
// generation (named), drift within 2%, or a real mismatch.
func TestDifferenceClasses(t *testing.T) {
	m, _ := fakehal.LookupModel("NVIDIA H200")
	got := recordedH200()
	for i := range got.Profiles {
		p := &got.Profiles[i]
		switch p.Name {
		case "7g.141gb":
			p.MemoryMB = 143104 // the early drivers' value
		case "3g.71gb":
			p.MemoryMB = 71000 // 0.6% off, in no table
		case "4g.71gb":
			p.Name = "4g.70gb" // a name 1 GB off
		case "2g.35gb":
			p.MultiprocessorCount = 30 // a real mismatch
		case "1g.35gb":
			p.MemoryMB = 40000 // 20% off
		}
	}
	r := selfcheck.Compare(m, got)
	want := map[string]selfcheck.Class{
		"7g.141gb memory MiB": selfcheck.ClassOtherGeneration,
		"3g.71gb memory MiB":  selfcheck.ClassDrift,
		"4g.71gb name":        selfcheck.ClassDrift,
		"2g.35gb SMs":         selfcheck.ClassMismatch,
		"1g.35gb memory MiB":  selfcheck.ClassMismatch,
	}
	if len(r.Differences) != len(want) {
		t.Errorf("differences %+v, want %d", r.Differences, len(want))
	}
	for _, d := range r.Differences {
		c, ok := want[d.Profile+" "+d.Field]
		if !ok || d.Class != c {
			t.Errorf("%s %s: class %v, want %v", d.Profile, d.Field, d.Class, c)
		}
		if d.Class == selfcheck.ClassOtherGeneration && d.Generation != fakehal.DriverEarly {
			t.Errorf("%s %s: generation %v, want early", d.Profile, d.Field, d.Generation)
		}
	}
	if r.Count(selfcheck.ClassMismatch) != 2 || r.Count(selfcheck.ClassDrift) != 2 || r.Count(selfcheck.ClassOtherGeneration) != 1 {
		t.Errorf("counts: %d mismatch, %d drift, %d other generation", r.Count(selfcheck.ClassMismatch), r.Count(selfcheck.ClassDrift), r.Count(selfcheck.ClassOtherGeneration))
	}
	var out strings.Builder
	if err := selfcheck.Write(&out, []selfcheck.Result{r}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"5 differences (2 mismatch, 1 other driver generation, 2 drift)", "early drivers' table", "drift within 2%", "implied, not measured: 1g.18gb:"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("Write output lacks %q:\n%s", s, out.String())
		}
	}
}
