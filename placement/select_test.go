package placement_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

func TestSelectSmoke(t *testing.T) {
	gpus := node(t, "A100-SXM4-40GB", 2)
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 3, Memory: placement.MiB(9000)}, {Devices: 1}}}
	as, err := placement.Select(gpus, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		t.Log(a)
	}
	_ = capability.Placement{}
	_ = errors.Is
}
