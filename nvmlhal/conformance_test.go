package nvmlhal_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize/realizetest"
)

// The realize conformance suite over the backend on every strict mock, with
// the driver variations the backend must handle. GPU 7 has MIG disabled so
// the MIG-disabled check runs too.
func TestConformance(t *testing.T) {
	variants := []struct {
		name string
		opts nvmlmock.Options
	}{
		{name: "default", opts: nvmlmock.Options{}},
		{name: "CIInfoDevice", opts: nvmlmock.Options{CIInfoDevice: true}},
		{name: "NoV3", opts: nvmlmock.Options{NoV3: true}},
	}
	for _, model := range nvmlmock.Models {
		for _, v := range variants {
			t.Run(model.String()+"/"+v.name, func(t *testing.T) {
				realizetest.TestRealizer(t, func(t *testing.T) realizetest.Backend {
					return conformanceBackend(t, model, v.opts)
				})
			})
		}
	}
}

func conformanceBackend(t *testing.T, model nvmlmock.Model, opts nvmlmock.Options) realizetest.Backend {
	b, srv := newBackend(t, model, opts)
	if act, ret := srv.GPU(7).SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.SUCCESS || act != nvml.SUCCESS {
		t.Fatalf("disable MIG on GPU 7: %v/%v", ret, act)
	}
	var pids atomic.Uint32
	pids.Store(1000)
	start := func(_ context.Context, gpu int, migUUID string) (func() error, error) {
		pid := pids.Add(1)
		on, err := srv.StartProcessOnMIGDevice(migUUID, pid)
		if err != nil {
			return nil, err
		}
		if on != gpu {
			srv.StopProcess(on, pid)
			return nil, fmt.Errorf("MIG device %s is on GPU %d, not %d", migUUID, on, gpu)
		}
		return func() error { srv.StopProcess(gpu, pid); return nil }, nil
	}
	return realizetest.Backend{Realizer: b, StartProcess: start}
}
