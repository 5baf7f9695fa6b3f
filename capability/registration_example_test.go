package capability_test

import (
	"fmt"

	"github.com/dynmig/dynmig/capability"
)

// A node as the deployed device plugin registers it: GPU 1 is unhealthy, so
// its "health" key is left out; GPU 0 has no "index"; a third entry is
// malformed and takes out only that GPU.
func ExampleReadNodeRegistration() {
	annotation := `[` +
		`{"id":"GPU-b","index":1,"count":1,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig",` +
		`"migProfiles":[{"name":"4g.24gb","memoryMB":24000,"core":100,"sliceCount":4,"placements":[{"start":0,"size":4}]}]},` +
		`{"id":"GPU-a","count":1,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig",` +
		`"migProfiles":[{"name":"4g.24gb","memoryMB":24000,"core":100,"sliceCount":4,"placements":[{"start":0,"size":4}]},` +
		`{"name":"1g.6gb","memoryMB":5952,"core":25,"sliceCount":1,"placements":null}],"health":true},` +
		`{"id":"GPU-c","index":2,"count":"1","mode":"mig","health":true}]`
	reg, err := capability.ReadNodeRegistration([]byte(annotation))
	if err != nil {
		panic(err) // the value as a whole is unusable
	}
	for _, g := range reg.GPUs() {
		fmt.Println(g.Index, g.UUID, "unhealthy:", g.Unhealthy)
	}
	for _, re := range reg.Rejected {
		fmt.Println("rejected: device", re.Device, re.Field)
	}
	for _, f := range reg.Findings {
		fmt.Println("finding:", f)
	}
	// Written back as the deployed plugin writes it: no "health" for GPU-b.
	data, _ := capability.EncodeNodeRegistration(reg.Devices[:1])
	fmt.Println(string(data))
	// Output:
	// 0 GPU-a unhealthy: false
	// 1 GPU-b unhealthy: true
	// rejected: device 2 count
	// finding: device 1 (GPU-a) migProfiles[1].placements: profile 1g.6gb publishes no placement and cannot be placed on this GPU
	// [{"id":"GPU-b","index":1,"count":1,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":[{"name":"4g.24gb","memoryMB":24000,"core":100,"sliceCount":4,"placements":[{"start":0,"size":4}]}]}]
}
