package realize_test

import (
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/realize"
)

func gpuEvent(gpu int, healthy bool) realize.HealthEvent {
	return realize.HealthEvent{GPU: gpu, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: healthy, Cause: realize.CauseXid, Xid: 79}
}

func migEvent(gpu int, gi, ci uint32, healthy bool) realize.HealthEvent {
	return realize.HealthEvent{GPU: gpu, GI: gi, CI: ci, Healthy: healthy, Cause: realize.CauseXid, Xid: 94}
}

func TestHealthStateTransitions(t *testing.T) {
	tests := []struct {
		name        string
		events      []realize.HealthEvent
		wantChanged []bool
		wantGPU1    bool
		wantMIG     bool // GPU 1 MIG 2/0
		wantGPU0    bool
	}{
		{name: "zero value healthy", wantGPU1: true, wantMIG: true, wantGPU0: true},
		{name: "gpu fails", events: []realize.HealthEvent{gpuEvent(1, false)}, wantChanged: []bool{true}, wantGPU1: false, wantMIG: false, wantGPU0: true},
		{name: "second failure is no transition", events: []realize.HealthEvent{gpuEvent(1, false), gpuEvent(1, false)}, wantChanged: []bool{true, false}, wantMIG: false, wantGPU0: true},
		{name: "mig fails, gpu stays healthy", events: []realize.HealthEvent{migEvent(1, 2, 0, false)}, wantChanged: []bool{true}, wantGPU1: true, wantMIG: false, wantGPU0: true},
		{name: "recovery heals gpu and its mig devices", events: []realize.HealthEvent{migEvent(1, 2, 0, false), gpuEvent(1, false), gpuEvent(1, true)}, wantChanged: []bool{true, true, true}, wantGPU1: true, wantMIG: true, wantGPU0: true},
		{name: "recovery heals a mig-only failure", events: []realize.HealthEvent{migEvent(1, 2, 0, false), gpuEvent(1, true)}, wantChanged: []bool{true, true}, wantGPU1: true, wantMIG: true, wantGPU0: true},
		{name: "recovery of healthy gpu changes nothing", events: []realize.HealthEvent{gpuEvent(1, true)}, wantChanged: []bool{false}, wantGPU1: true, wantMIG: true, wantGPU0: true},
		{name: "other gpu untouched", events: []realize.HealthEvent{gpuEvent(0, false)}, wantChanged: []bool{true}, wantGPU1: true, wantMIG: true, wantGPU0: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s realize.HealthState
			for i, e := range tt.events {
				if got := s.Apply(e); got != tt.wantChanged[i] {
					t.Errorf("Apply(%v) = %v, want %v", e, got, tt.wantChanged[i])
				}
			}
			if got := s.GPUHealthy(1); got != tt.wantGPU1 {
				t.Errorf("GPUHealthy(1) = %v, want %v", got, tt.wantGPU1)
			}
			if got := s.MIGHealthy(1, 2, 0); got != tt.wantMIG {
				t.Errorf("MIGHealthy(1, 2, 0) = %v, want %v", got, tt.wantMIG)
			}
			if got := s.GPUHealthy(0); got != tt.wantGPU0 {
				t.Errorf("GPUHealthy(0) = %v, want %v", got, tt.wantGPU0)
			}
			if got, want := s.UnhealthyMIGDevices(1) > 0, tt.wantGPU1 && !tt.wantMIG; got != want {
				t.Errorf("UnhealthyMIGDevices(1) > 0 = %v, want %v", got, want)
			}
			if _, bad := s.Why(1); bad == tt.wantGPU1 {
				t.Errorf("Why(1) reports unhealthy %v, want %v", bad, !tt.wantGPU1)
			}
		})
	}
}

func TestApplicationXids(t *testing.T) {
	for _, xid := range []uint64{13, 31, 43, 45, 68, 109} {
		if !realize.IsApplicationXid(xid) {
			t.Errorf("IsApplicationXid(%d) = false, want true", xid)
		}
	}
	for _, xid := range []uint64{0, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120} {
		if realize.IsApplicationXid(xid) {
			t.Errorf("IsApplicationXid(%d) = true, want false", xid)
		}
	}
}

func TestHealthEventString(t *testing.T) {
	tests := []struct {
		name string
		e    realize.HealthEvent
		want string
	}{
		{name: "gpu xid", e: gpuEvent(2, false), want: "GPU 2 unhealthy (xid 79)"},
		{name: "mig xid", e: migEvent(2, 1, 0, false), want: "GPU 2 MIG 1/0 unhealthy (xid 94)"},
		{name: "recovered", e: realize.HealthEvent{GPU: 3, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: true, Cause: realize.CauseRecovered}, want: "GPU 3 healthy (recovered)"},
		{name: "ecc", e: realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseDoubleBitECC}, want: "GPU 0 unhealthy (double-bit-ecc)"},
		{name: "unknown cause", e: realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Cause: 200}, want: "GPU 0 unhealthy (cause(200))"},
	}
	for _, tt := range tests {
		if got := tt.e.String(); got != tt.want {
			t.Errorf("%s: String() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func ExampleHealthState() {
	var s realize.HealthState
	events := []realize.HealthEvent{
		{GPU: 0, GI: 1, CI: 0, Cause: realize.CauseXid, Xid: 94},                                   // one MIG device
		{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79}, // fallen off the bus
		{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 48}, // already unhealthy
	}
	for _, e := range events {
		fmt.Println(e, "changed:", s.Apply(e))
	}
	fmt.Println("GPU 0 takes new instances:", s.GPUHealthy(0), "MIG 1/0 usable:", s.MIGHealthy(0, 1, 0))
	fmt.Println("GPU 1 takes new instances:", s.GPUHealthy(1))
	// Output:
	// GPU 0 MIG 1/0 unhealthy (xid 94) changed: true
	// GPU 1 unhealthy (xid 79) changed: true
	// GPU 1 unhealthy (xid 48) changed: false
	// GPU 0 takes new instances: true MIG 1/0 usable: false
	// GPU 1 takes new instances: false
}

func TestHealthStateForget(t *testing.T) {
	var s realize.HealthState
	s.Apply(migEvent(1, 2, 0, false))
	s.Apply(migEvent(1, 3, 0, false))
	if got := len(s.UnhealthyMIG(1)); got != 2 {
		t.Fatalf("UnhealthyMIG(1) has %d events, want 2", got)
	}
	if !s.Forget(1, 2, 0) {
		t.Error("Forget(1, 2, 0) = false, want true")
	}
	if s.Forget(1, 2, 0) {
		t.Error("second Forget(1, 2, 0) = true, want false")
	}
	if !s.MIGHealthy(1, 2, 0) || s.MIGHealthy(1, 3, 0) {
		t.Errorf("MIGHealthy(2/0, 3/0) = %v, %v; want true, false", s.MIGHealthy(1, 2, 0), s.MIGHealthy(1, 3, 0))
	}
	if got := s.UnhealthyMIGDevices(1); got != 1 {
		t.Errorf("UnhealthyMIGDevices(1) = %d, want 1", got)
	}
}

// Why names the event that took a GPU (or MIG device) out of service, not
// a later one on the already unhealthy device; a recovery clears it and the
// next failure is the new cause.
func TestHealthStateKeepsFirstCause(t *testing.T) {
	xid := func(gpu int, gi, ci uint32, x uint64) realize.HealthEvent {
		return realize.HealthEvent{GPU: gpu, GI: gi, CI: ci, Cause: realize.CauseXid, Xid: x}
	}
	const all = realize.NoInstance
	tests := []struct {
		name    string
		events  []realize.HealthEvent
		wantWhy *realize.HealthEvent // GPU 0's cause; nil: healthy
		wantMIG []realize.HealthEvent
	}{
		{name: "xid 48 after xid 79", events: []realize.HealthEvent{xid(0, all, all, 79), xid(0, all, all, 48)},
			wantWhy: ptr(xid(0, all, all, 79))},
		{name: "ecc after xid", events: []realize.HealthEvent{xid(0, all, all, 79),
			{GPU: 0, GI: all, CI: all, Cause: realize.CauseDoubleBitECC}}, wantWhy: ptr(xid(0, all, all, 79))},
		{name: "recovery then new cause", events: []realize.HealthEvent{xid(0, all, all, 79),
			{GPU: 0, GI: all, CI: all, Healthy: true, Cause: realize.CauseRecovered}, xid(0, all, all, 48)},
			wantWhy: ptr(xid(0, all, all, 48))},
		{name: "mig device keeps its first xid", events: []realize.HealthEvent{xid(0, 1, 0, 94), xid(0, 1, 0, 95)},
			wantMIG: []realize.HealthEvent{xid(0, 1, 0, 94)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s realize.HealthState
			for _, e := range tt.events {
				s.Apply(e)
			}
			why, bad := s.Why(0)
			switch {
			case tt.wantWhy == nil && bad:
				t.Errorf("Why(0) = %v, want healthy", why)
			case tt.wantWhy != nil && (!bad || why != *tt.wantWhy):
				t.Errorf("Why(0) = %v, %v; want %v", why, bad, *tt.wantWhy)
			}
			if got := s.UnhealthyMIG(0); len(got) != len(tt.wantMIG) || (len(got) > 0 && got[0] != tt.wantMIG[0]) {
				t.Errorf("UnhealthyMIG(0) = %v, want %v", got, tt.wantMIG)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
