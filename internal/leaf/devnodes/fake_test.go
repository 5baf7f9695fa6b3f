package devnodes_test

import (
	"testing"

	"github.com/dynmig/dynmig/internal/leaf/devnodes"
)

// TestFakeNumbering: the capability minors follow the driver's mig-minors
// layout, so two instances never share a node.
func TestFakeNumbering(t *testing.T) {
	tests := []struct {
		gpu      int
		gi, ci   uint32
		gpuNode  string
		giMinor  int64
		ciMinor  int64
		capMajor int64
	}{
		{0, 0, 0, "/dev/nvidia0", 3, 4, devnodes.FakeCapsMajor},
		{0, 1, 0, "/dev/nvidia0", 12, 13, devnodes.FakeCapsMajor},
		{0, 14, 7, "/dev/nvidia0", 129, 137, devnodes.FakeCapsMajor},
		{1, 0, 0, "/dev/nvidia1", 138, 139, devnodes.FakeCapsMajor},
	}
	for _, tt := range tests {
		n := devnodes.Fake{}.MIGNodes(tt.gpu, tt.gi, tt.ci)
		if len(n) != 3 || n[0].Path != tt.gpuNode || n[0].Major != devnodes.NVIDIAMajor ||
			n[1].Minor != tt.giMinor || n[2].Minor != tt.ciMinor || n[1].Major != tt.capMajor {
			t.Errorf("gpu%d gi%d ci%d: %+v", tt.gpu, tt.gi, tt.ci, n)
		}
	}
	if c := (devnodes.Fake{}).ControlNodes(); len(c) != 1 || c[0].Path != "/dev/nvidiactl" {
		t.Errorf("control nodes %+v", c)
	}
}
