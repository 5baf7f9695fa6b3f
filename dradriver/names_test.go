package dradriver_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
)

const testUUID = "GPU-6b813aea-996a-440d-ab86-4736b86702bf"

func TestDeviceNameRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		profile string
		start   uint32
		size    uint32
		want    string
	}{
		{profile: "1g.6gb", start: 3, size: 1, want: "mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-3-1"},
		{profile: "1g.6gb+me", start: 0, size: 1, want: "mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gbme-0-1"},
		{profile: "1g.24gb-me", start: 11, size: 1, want: "mig-6b813aea-996a-440d-ab86-4736b86702bf-1g24gbnome-11-1"},
		{profile: "4g.96gb+me.all", start: 0, size: 12, want: "mig-6b813aea-996a-440d-ab86-4736b86702bf-4g96gbmeall-0-12"},
		{profile: "1g.24gb+gfx", start: 5, size: 1, want: "mig-6b813aea-996a-440d-ab86-4736b86702bf-1g24gbgfx-5-1"},
		{profile: "8g.180gb", start: 56, size: 8, want: "mig-6b813aea-996a-440d-ab86-4736b86702bf-8g180gb-56-8"},
	} {
		p := dradriver.Partition{GPUUUID: testUUID, Profile: tc.profile, Placement: capability.Placement{Start: tc.start, Size: tc.size}}
		got, err := p.DeviceName()
		if err != nil || got != tc.want {
			t.Errorf("%v.DeviceName() = %q, %v; want %q", p, got, err, tc.want)
			continue
		}
		if len(got) > 63 {
			t.Errorf("%q: %d characters, more than a DNS label", got, len(got))
		}
		back, err := dradriver.ParseDeviceName(got)
		if err != nil || back != p {
			t.Errorf("ParseDeviceName(%q) = %v, %v; want %v", got, back, err, p)
		}
	}
}

func TestDeviceNameRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    dradriver.Partition
	}{
		{name: "upper-case UUID", p: dradriver.Partition{GPUUUID: "GPU-6B813AEA-996A-440D-AB86-4736B86702BF", Profile: "1g.6gb", Placement: capability.Placement{Size: 1}}},
		{name: "no GPU prefix", p: dradriver.Partition{GPUUUID: "6b813aea-996a-440d-ab86-4736b86702bf", Profile: "1g.6gb", Placement: capability.Placement{Size: 1}}},
		{name: "profile not canonical", p: dradriver.Partition{GPUUUID: testUUID, Profile: "1g.06gb", Placement: capability.Placement{Size: 1}}},
		{name: "compute profile", p: dradriver.Partition{GPUUUID: testUUID, Profile: "1c.2g.10gb", Placement: capability.Placement{Size: 1}}},
		{name: "empty placement", p: dradriver.Partition{GPUUUID: testUUID, Profile: "1g.6gb"}},
		{name: "beyond the grid", p: dradriver.Partition{GPUUUID: testUUID, Profile: "1g.6gb", Placement: capability.Placement{Start: 64, Size: 1}}},
	} {
		if n, err := tc.p.DeviceName(); !errors.Is(err, dradriver.ErrDeviceName) {
			t.Errorf("%s: DeviceName() = %q, %v; want ErrDeviceName", tc.name, n, err)
		}
	}
	for _, name := range []string{
		"", "mig-", "gpu-0-1g-6gb-0",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-03-1",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-3",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-3-1-0",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gbxx-3-1",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-9g6gb-3-1",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g06gb-3-1",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-63-2",
		"mig-6B813AEA-996a-440d-ab86-4736b86702bf-1g6gb-3-1",
		"MIG-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-3-1",
	} {
		var dne *dradriver.DeviceNameError
		if p, err := dradriver.ParseDeviceName(name); !errors.As(err, &dne) || dne.Name != name {
			t.Errorf("ParseDeviceName(%q) = %v, %v; want a *DeviceNameError naming it", name, p, err)
		}
	}
}

// FuzzParseDeviceName: whatever decodes encodes back to the same name,
// which is a DNS label.
func FuzzParseDeviceName(f *testing.F) {
	for _, s := range []string{
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g6gb-3-1",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-4g96gbmeall-0-12",
		"mig-6b813aea-996a-440d-ab86-4736b86702bf-1g24gbnome-11-1",
		"mig-00000000-0000-0000-0000-000000000000-8g180gb-56-8",
		"gpu-0-1g-6gb-0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := dradriver.ParseDeviceName(name)
		if err != nil {
			if !errors.Is(err, dradriver.ErrDeviceName) {
				t.Fatalf("error %v does not match ErrDeviceName", err)
			}
			return
		}
		back, err := p.DeviceName()
		if err != nil || back != name {
			t.Fatalf("ParseDeviceName(%q) = %v, which encodes to %q, %v", name, p, back, err)
		}
		if len(name) > 63 {
			t.Fatalf("%q is longer than a DNS label", name)
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				t.Fatalf("%q has %q, not allowed in a DNS label", name, c)
			}
		}
	})
}
