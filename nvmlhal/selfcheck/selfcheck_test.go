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
	r.Unchecked = nil // no instance is live: every CI profile is unchecked
	_ = selfcheck.Write(os.Stdout, []selfcheck.Result{r})
	// Output:
	// GPU 0 "NVIDIA H100 80GB HBM3" (driver 580.65.06): preset "NVIDIA H100 PCIe": 7 differences
	//   profile     field  preset  driver
	//   1g.10gb     SMs    14      16
	//   1g.10gb+me  SMs    14      16
	//   1g.20gb     SMs    14      26
	//   2g.20gb     SMs    30      32
	//   3g.40gb     SMs    46      60
	//   4g.40gb     SMs    62      64
	//   7g.80gb     SMs    114     132
}
