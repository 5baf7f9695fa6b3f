package reservationtest_test

import (
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/reservation/reservationtest"
)

// A device plugin checks its own reader and writer against the wire
// contract: a valid record round-trips byte for byte, and a mutant is
// refused with its sentinel.
func ExampleCheckRecord() {
	r := reservationtest.Record{
		Allocations: []reservation.Allocation{{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: "GPU-a<b>",
			Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2}}},
		DeviceRequests: []int{1},
	}
	fmt.Println(r.Value())
	fmt.Println(reservationtest.CheckRecord(reservationtest.Strict(), r))

	forged := reservationtest.Mutant{Name: "container requests no device", Value: r.Value(),
		DeviceRequests: []int{0}, Want: reservation.ErrNotRequested}
	fmt.Println(reservationtest.CheckMutant(reservationtest.Strict(), forged))
	// Output:
	// [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a\u003cb\u003e","profile":"2g.10gb","placement":{"start":2,"size":2}}]
	// <nil>
	// <nil>
}

// The reference writer of node registrations leaves out every zero value,
// as the deployed device plugin does: GPU 0 has no "index", an unhealthy
// GPU no "health".
func ExampleWireEncodeRegistration() {
	devs := []capability.NodeDevice{{ID: "GPU-0", Devmem: 40960, Devcore: 100, Type: "NVIDIA A100-SXM4-40GB", Mode: capability.ModeMIG,
		MIGProfiles: []capability.Profile{{Name: "7g.40gb", MemoryMB: 40192, Core: 100, SliceCount: 7, Placements: []capability.Placement{{Start: 0, Size: 8}}}}}}
	fmt.Println(reservationtest.WireEncodeRegistration(devs))
	fmt.Println(reservationtest.CheckRegistration(reservationtest.StrictRegistration(), devs))
	// Output:
	// [{"id":"GPU-0","devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig","migProfiles":[{"name":"7g.40gb","memoryMB":40192,"core":100,"sliceCount":7,"placements":[{"start":0,"size":8}]}]}]
	// <nil>
}
