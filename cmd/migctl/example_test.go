package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

// migctl validate lists every problem of an annotation value by entry and
// field, and exits 1.
func Example_validate() {
	value := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"},
	{"containerIndex":0,"deviceIndex":1,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"1g.5gb","placement":{"start":3,"size":1}}]`
	code := run(context.Background(), []string{"validate"}, strings.NewReader(value), os.Stdout, io.Discard)
	fmt.Println("exit", code)
	// Output:
	// entry 0 field gpuInstanceID: partial runtime identity: 1 of migUUID, gpuInstanceID, computeInstanceID present
	// entry 1 field placement: overlapping placements: [3,4) overlaps [2,4) on GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f (entry 0)
	// invalid: 2 problems
	// exit 1
}

// migctl place prints the annotation value the scheduler would write.
func Example_place() {
	run(context.Background(), []string{"place", "--node", "testdata/node.json", "--pods", "testdata/pods.json",
		"--pod", "testdata/pod.json"}, nil, os.Stdout, io.Discard)
	// Output:
	// [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-2c4e6a8b-1d3f-4a5b-8c7d-9e0f1a2b3c4d","profile":"2g.10gb","placement":{"start":2,"size":2}}]
}

// migctl status draws the node's slot maps and lists its reservations.
func Example_status() {
	run(context.Background(), []string{"status", "--node", "testdata/node.json", "--pods", "testdata/pods.json"},
		nil, os.Stdout, io.Discard)
	// Output:
	// node mig-node-a: 2 MIG GPUs (NVIDIA A100-SXM4-40GB x2), 3 active pods hold 4 reservations (2 realized, 2 not yet), 1 pending MIG pod
	//
	// GPU0  [..|aa|bbbb]  free 2/8 slots, capacity 3, largest fit 2g.10gb  GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f
	// GPU1  [c|c|......]  free 6/8 slots, capacity 8, largest fit 3g.20gb  GPU-2c4e6a8b-1d3f-4a5b-8c7d-9e0f1a2b3c4d
	// node: free 8/16 slots, capacity 11, largest fit 3g.20gb, 0 unusable
	//
	// reservations:
	//   a  ml/train-0     c0/d0  GPU0  2g.10gb  [2,4)  realized MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d gi=4 ci=0
	//   b  ml/notebook-0  c0/d0  GPU0  3g.20gb  [4,8)  realized MIG-2b3c4d5e-6f70-4b8c-9d0e-1f2a3b4c5d6e gi=2 ci=0
	//   c  ml/infer-0     c0/d0  GPU1  1g.5gb   [0,1)  reserved, not realized yet
	//   c  ml/infer-0     c1/d0  GPU1  1g.5gb   [1,2)  reserved, not realized yet
	//
	// pending MIG pods (policy frag-aware):
	//   ml/waiting-0: fits now: c0/d0 GPU1 3g.20gb [4,8)
}
