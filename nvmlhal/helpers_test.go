package nvmlhal_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newBackend returns an initialised backend over a fresh strict server.
func newBackend(t *testing.T, model nvmlmock.Model, opts nvmlmock.Options) (*nvmlhal.Backend, *nvmlmock.Server) {
	t.Helper()
	srv := nvmlmock.New(model, opts)
	b := nvmlhal.New(nvmlhal.Options{NVML: srv})
	if err := b.Init(context.Background()); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if got := srv.Inits(); got != 0 {
			t.Errorf("NVML inits left after Shutdown = %d, want 0", got)
		}
	})
	return b, srv
}

// discoverGPU0 builds GPU 0's capability from what the backend discovers.
func discoverGPU0(t *testing.T, b *nvmlhal.Backend) capability.GPU {
	t.Helper()
	ctx := context.Background()
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := b.GIProfiles(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	gpu, errs := capability.GPUFromDevice(devs[0], infos)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return gpu
}
