package realize_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/realize"
)

// The meaning of NVIDIA's DP_DISABLE_HEALTHCHECKS and
// DP_ENABLE_HEALTHCHECKS (k8s-device-plugin internal/rm/health.go): enabled
// Xids win over disabled and application ones; "all" or "xids" disables
// every Xid, and with nothing enabled no watch runs.
func TestHealthChecks(t *testing.T) {
	tests := []struct {
		name             string
		disable, enable  string
		counts, excluded []uint64
		off              bool
	}{
		{name: "unset", counts: []uint64{48, 63, 79, 94}, excluded: []uint64{13, 31, 43, 45, 68, 109}},
		{name: "extra xids", disable: "48, 63", counts: []uint64{79}, excluded: []uint64{13, 48, 63}},
		{name: "all", disable: "all", excluded: []uint64{13, 48, 79}, off: true},
		{name: "xids, upper case", disable: "XIDS", excluded: []uint64{79}, off: true},
		{name: "xids inside a list", disable: "48,xids", excluded: []uint64{48, 79}, off: true},
		{name: "all but one", disable: "all", enable: "79", counts: []uint64{79}, excluded: []uint64{13, 48}},
		{name: "enable an application xid", enable: "13", counts: []uint64{13, 79}, excluded: []uint64{31}},
		{name: "enable wins over disable", disable: "79,48", enable: "79", counts: []uint64{79}, excluded: []uint64{48}},
		{name: "enable all", disable: "all", enable: "all", counts: []uint64{13, 31, 48, 79}},
		{name: "empty entries", disable: ",, 48 ,", counts: []uint64{79}, excluded: []uint64{48}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := realize.ParseHealthChecks(tt.disable, tt.enable)
			if err != nil {
				t.Fatal(err)
			}
			if c.Off() != tt.off {
				t.Errorf("Off() = %v, want %v", c.Off(), tt.off)
			}
			for _, x := range tt.counts {
				if !c.CountsXid(x) {
					t.Errorf("CountsXid(%d) = false, want true", x)
				}
			}
			for _, x := range tt.excluded {
				if c.CountsXid(x) {
					t.Errorf("CountsXid(%d) = true, want false", x)
				}
			}
		})
	}
}

func TestParseHealthChecksRefusesMalformedEntries(t *testing.T) {
	tests := []struct {
		disable, enable string
		setting         string
		index           int
	}{
		{disable: "48,x79", setting: realize.EnvDisableHealthChecks, index: 1},
		{disable: "-1", setting: realize.EnvDisableHealthChecks, index: 0},
		{enable: "79,,none", setting: realize.EnvEnableHealthChecks, index: 2},
		{enable: "18446744073709551616", setting: realize.EnvEnableHealthChecks, index: 0},
	}
	for _, tt := range tests {
		_, err := realize.ParseHealthChecks(tt.disable, tt.enable)
		var he *realize.HealthChecksError
		if !errors.Is(err, realize.ErrHealthChecks) || !errors.As(err, &he) || he.Setting != tt.setting || he.Index != tt.index {
			t.Errorf("ParseHealthChecks(%q, %q) = %v, want a HealthChecksError for %s entry %d", tt.disable, tt.enable, err, tt.setting, tt.index)
		}
	}
}

func FuzzParseHealthChecks(f *testing.F) {
	for _, s := range []string{"", "all", "xids", "48,63", " 79 , all", "x", "13,,"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, disable, enable string) {
		c, err := realize.ParseHealthChecks(disable, enable)
		if err != nil {
			if !errors.Is(err, realize.ErrHealthChecks) {
				t.Fatalf("error %v is not ErrHealthChecks", err)
			}
			return
		}
		for _, x := range c.Enable {
			if !c.CountsXid(x) {
				t.Fatalf("enabled Xid %d does not count", x)
			}
		}
		if c.Off() && c.CountsXid(79) {
			t.Fatal("checks are off but Xid 79 counts")
		}
		again, err := realize.ParseHealthChecks(disable, enable)
		if err != nil || again.String() != c.String() {
			t.Fatalf("not deterministic: %v vs %v (%v)", again, c, err)
		}
	})
}

func ExampleParseHealthChecks() {
	// DP_DISABLE_HEALTHCHECKS=all, DP_ENABLE_HEALTHCHECKS=79: only Xid 79
	// (and the events that are not Xids) mark a GPU unhealthy.
	c, err := realize.ParseHealthChecks("all", "79")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c)
	fmt.Println("xid 79:", c.CountsXid(79), "xid 48:", c.CountsXid(48), "watch off:", c.Off())
	_, err = realize.ParseHealthChecks("48,x63", "")
	fmt.Println(err)
	// Output:
	// xids disabled: application+all; enabled: 79
	// xid 79: true xid 48: false watch off: false
	// realize: DP_DISABLE_HEALTHCHECKS entry 1 "x63": want an Xid (a decimal number), "all" or "xids"
}
