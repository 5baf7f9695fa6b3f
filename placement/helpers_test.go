package placement_test

import (
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
)

// plainGPU builds the capability of one GPU of a built-in model, keeping
// only plain (VariantNone) profiles, as a realistic allowlist would.
func plainGPU(t fataler, model string, index int) capability.GPU {
	t.Helper()
	m, ok := fakehal.LookupModel(model)
	if !ok {
		t.Fatalf("unknown model %q", model)
	}
	dev := capability.DeviceInfo{Index: index, UUID: uuidOf(model, index), Name: m.Name, MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}
	gpu, errs := capability.GPUFromDevice(dev, m.Profiles)
	if len(errs) > 0 {
		t.Fatalf("GPUFromDevice(%s): %v", model, errs)
	}
	kept := gpu.Profiles[:0]
	for _, p := range gpu.Profiles {
		if p.Variant == capability.VariantNone {
			kept = append(kept, p)
		}
	}
	gpu.Profiles = kept
	return gpu
}

// fataler is what the helpers need from testing.TB and *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func uuidOf(model string, i int) string {
	return "GPU-" + model + "-" + string(rune('a'+i))
}

// node builds n GPUs of model as GPUStates.
func node(t testing.TB, model string, n int) []placement.GPUState {
	t.Helper()
	out := make([]placement.GPUState, n)
	for i := range out {
		gpu := plainGPU(t, model, i)
		g, err := placement.NewGrid(&gpu)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = placement.GPUState{Grid: g}
	}
	return out
}
