package nvmlmock_test

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

func TestEventSetStrictness(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
	if _, ret := srv.EventSetCreate(); ret != nvml.ERROR_UNINITIALIZED {
		t.Fatalf("EventSetCreate before Init = %v, want ERROR_UNINITIALIZED", ret)
	}
	srv.Init()
	defer srv.Shutdown()
	set, ret := srv.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	dev, _ := srv.DeviceGetHandleByIndex(0)
	srv.SetSupportedEvents(1, nvml.EventTypeXidCriticalError)
	dev1, _ := srv.DeviceGetHandleByIndex(1)

	tests := []struct {
		name string
		got  nvml.Return
		want nvml.Return
	}{
		{name: "supported mask registers", got: dev.RegisterEvents(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, set), want: nvml.SUCCESS},
		{name: "unsupported type refused", got: dev1.RegisterEvents(nvml.EventTypeDoubleBitEccError, set), want: nvml.ERROR_NOT_SUPPORTED},
		{name: "nil set refused", got: dev.RegisterEvents(nvml.EventTypeXidCriticalError, nil), want: nvml.ERROR_INVALID_ARGUMENT},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}

	if _, ret := set.Wait(1); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait with nothing pending = %v, want ERROR_TIMEOUT", ret)
	}
	// Only registered types on registered GPUs arrive, in order.
	_ = srv.InjectEvent(0, nvml.EventTypePState, 0, 0xFFFFFFFF, 0xFFFFFFFF)
	_ = srv.InjectXid(1, 79) // GPU 1 not registered
	_ = srv.InjectXid(0, 48)
	_ = srv.InjectEvent(0, nvml.EventTypeDoubleBitEccError, 0, 0xFFFFFFFF, 0xFFFFFFFF)
	for _, want := range []uint64{nvml.EventTypeXidCriticalError, nvml.EventTypeDoubleBitEccError} {
		data, ret := set.Wait(1000)
		if ret != nvml.SUCCESS || data.EventType != want || data.Device != dev {
			t.Errorf("Wait = %+v, %v; want type %d on GPU 0", data, ret, want)
		}
	}
	if _, ret := set.Wait(1); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait after draining = %v, want ERROR_TIMEOUT", ret)
	}
	if err := srv.InjectMIGXid(0, 5, 0, 94); err == nil {
		t.Error("InjectMIGXid on a missing instance succeeded")
	}

	// A waiter is woken by an event sent while it waits.
	go func() { time.Sleep(5 * time.Millisecond); _ = srv.InjectXid(0, 79) }()
	if data, ret := set.Wait(5000); ret != nvml.SUCCESS || data.EventData != 79 {
		t.Errorf("Wait across inject = %+v, %v; want Xid 79", data, ret)
	}

	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := set.Free(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("second Free = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := set.Wait(1); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("Wait on freed set = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("RegisterEvents on freed set = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if got := srv.EventSets(); got != 0 {
		t.Errorf("EventSets = %d, want 0", got)
	}
}
