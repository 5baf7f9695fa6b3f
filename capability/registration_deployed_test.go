package capability_test

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

// The shapes below are written from the facts of the deployed device
// plugin's node registration: every key of its device struct is omitempty,
// so it leaves out "health" for an unhealthy GPU, "index" for GPU 0, "numa"
// for NUMA node 0 and any zero count, devmem or devcore and empty type or
// mode; it ranges over a map, so the array's order varies; and it writes
// "placements":null (or []) for a profile NVML reports no placement for.

const (
	uuidA  = "GPU-0a0a0a0a-0000-4000-8000-00000000000a"
	uuidB  = "GPU-0b0b0b0b-0000-4000-8000-00000000000b"
	uuidT4 = "GPU-00000000-0000-0000-0000-000000000001"
)

// a30Wire is an A30's profiles as published, compact.
const a30Wire = `[{"name":"1g.6gb","memoryMB":5952,"core":25,"sliceCount":1,"placements":[{"start":0,"size":1},{"start":1,"size":1},{"start":2,"size":1},{"start":3,"size":1}]},` +
	`{"name":"2g.12gb","memoryMB":11968,"core":50,"sliceCount":2,"placements":[{"start":0,"size":2},{"start":2,"size":2}]},` +
	`{"name":"4g.24gb","memoryMB":24000,"core":100,"sliceCount":4,"placements":[{"start":0,"size":4}]}]`

// a30Profiles is a30Wire decoded.
func a30Profiles() []capability.Profile {
	return []capability.Profile{
		{Name: "1g.6gb", MemoryMB: 5952, Core: 25, SliceCount: 1, Placements: starts(1, 0, 1, 2, 3)},
		{Name: "2g.12gb", MemoryMB: 11968, Core: 50, SliceCount: 2, Placements: starts(2, 0, 2)},
		{Name: "4g.24gb", MemoryMB: 24000, Core: 100, SliceCount: 4, Placements: starts(4, 0)},
	}
}

// regA30 is a registered A30 in MIG mode.
func regA30(id string, index, numa int, health bool) capability.NodeDevice {
	return capability.NodeDevice{ID: id, Index: index, Count: 4, Devmem: 24576, Devcore: 100, Type: "NVIDIA A30",
		NUMA: numa, Mode: capability.ModeMIG, MIGProfiles: a30Profiles(), Health: health}
}

// t4 is a registered T4 in hami-core mode.
func t4(health bool) capability.NodeDevice {
	return capability.NodeDevice{ID: uuidT4, Count: 10, Devmem: 15360, Devcore: 100, Type: "Tesla T4",
		Mode: capability.ModeHAMiCore, Health: health}
}

// rejection is one entry ReadNodeRegistration leaves out.
type rejection struct {
	device int
	field  string
}

var deployedShapes = []struct {
	name      string
	doc       string
	devices   []capability.NodeDevice // the usable devices, exactly
	rejected  []rejection
	findings  []capability.RegistrationFinding
	roundTrip bool // EncodeNodeRegistration(devices) is doc, byte for byte
}{
	{name: "unhealthy GPU: health left out",
		doc:     `[{"id":"` + uuidT4 + `","count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","mode":"hami-core"}]`,
		devices: []capability.NodeDevice{t4(false)}, roundTrip: true},
	{name: "GPU 0 on NUMA node 0: index and numa left out",
		doc:     `[{"id":"` + uuidA + `","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":` + a30Wire + `,"health":true}]`,
		devices: []capability.NodeDevice{regA30(uuidA, 0, 0, true)}, roundTrip: true},
	{name: "unhealthy MIG GPU",
		doc:     `[{"id":"` + uuidB + `","index":1,"count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","numa":1,"mode":"mig","migProfiles":` + a30Wire + `}]`,
		devices: []capability.NodeDevice{regA30(uuidB, 1, 1, false)}, roundTrip: true},
	{name: "NVML reports no placement: placements null",
		doc: `[{"id":"` + uuidA + `","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":[` +
			`{"name":"1g.6gb","memoryMB":5952,"core":25,"sliceCount":1,"placements":null}],"health":true}]`,
		devices: []capability.NodeDevice{{ID: uuidA, Count: 4, Devmem: 24576, Devcore: 100, Type: "NVIDIA A30", Mode: capability.ModeMIG,
			MIGProfiles: []capability.Profile{{Name: "1g.6gb", MemoryMB: 5952, Core: 25, SliceCount: 1}}, Health: true}},
		findings:  []capability.RegistrationFinding{{Device: 0, ID: uuidA, Field: "migProfiles[0].placements", Profile: "1g.6gb"}},
		roundTrip: true},
	{name: "NVML reports no placement: placements empty",
		doc: `[{"id":"` + uuidT4 + `","mode":"hami-core"},{"id":"` + uuidA + `","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":[` +
			`{"name":"4g.24gb","memoryMB":24000,"core":100,"sliceCount":4,"placements":[]}],"health":true}]`,
		devices: []capability.NodeDevice{{ID: uuidT4, Mode: capability.ModeHAMiCore}, {ID: uuidA, Count: 4, Devmem: 24576, Devcore: 100, Type: "NVIDIA A30", Mode: capability.ModeMIG,
			MIGProfiles: []capability.Profile{{Name: "4g.24gb", MemoryMB: 24000, Core: 100, SliceCount: 4, Placements: []capability.Placement{}}}, Health: true}},
		findings:  []capability.RegistrationFinding{{Device: 1, ID: uuidA, Field: "migProfiles[0].placements", Profile: "4g.24gb"}},
		roundTrip: true},
	{name: "MIG GPU without profiles: count and migProfiles left out",
		doc:     `[{"id":"` + uuidA + `","devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","health":true}]`,
		devices: []capability.NodeDevice{{ID: uuidA, Devmem: 24576, Devcore: 100, Type: "NVIDIA A30", Mode: capability.ModeMIG, Health: true}}, roundTrip: true},
	{name: "zero devmem and devcore left out",
		doc:     `[{"id":"` + uuidT4 + `","index":2,"count":10,"type":"Tesla T4","mode":"hami-core","health":true}]`,
		devices: []capability.NodeDevice{{ID: uuidT4, Index: 2, Count: 10, Type: "Tesla T4", Mode: capability.ModeHAMiCore, Health: true}}, roundTrip: true},
	{name: "empty type left out",
		doc:     `[{"id":"` + uuidT4 + `","count":10,"devmem":15360,"devcore":100,"mode":"mps","health":true}]`,
		devices: []capability.NodeDevice{{ID: uuidT4, Count: 10, Devmem: 15360, Devcore: 100, Mode: capability.ModeMPS, Health: true}}, roundTrip: true},
	{name: "empty mode left out",
		doc:     `[{"id":"` + uuidT4 + `","count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","health":true}]`,
		devices: []capability.NodeDevice{{ID: uuidT4, Count: 10, Devmem: 15360, Devcore: 100, Type: "Tesla T4", Health: true}}, roundTrip: true},
	{name: "every key but id zero",
		doc:     `[{"id":"` + uuidT4 + `"}]`,
		devices: []capability.NodeDevice{{ID: uuidT4}}, roundTrip: true},
	{name: "devices in map order, one unhealthy",
		doc: `[{"id":"` + uuidB + `","index":1,"count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","numa":1,"mode":"mig","migProfiles":` + a30Wire + `},` +
			`{"id":"` + uuidA + `","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":` + a30Wire + `,"health":true}]`,
		devices: []capability.NodeDevice{regA30(uuidB, 1, 1, false), regA30(uuidA, 0, 0, true)}, roundTrip: true},
	{name: "keys v2.10 never fills for NVIDIA are ignored",
		doc:     `[{"id":"` + uuidT4 + `","count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","mode":"hami-core","migtemplate":[[{"name":"1g.5gb"}]],"devicevendor":"NVIDIA","custominfo":{"k":1}}]`,
		devices: []capability.NodeDevice{t4(false)}},
	{name: "zero values written out are read too",
		doc:     `[{"id":"` + uuidT4 + `","index":0,"count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","numa":0,"mode":"hami-core","health":false}]`,
		devices: []capability.NodeDevice{t4(false)}},
	{name: "a malformed entry takes out that GPU only",
		doc: `[{"id":"` + uuidA + `","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":` + a30Wire + `,"health":true},` +
			`{"id":"` + uuidB + `","index":1,"count":"4","devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","health":true}]`,
		devices: []capability.NodeDevice{regA30(uuidA, 0, 0, true)}, rejected: []rejection{{device: 1, field: "count"}}},
	{name: "an invalid entry takes out that GPU only",
		doc: `[{"id":"` + uuidB + `","index":1,"count":4,"devmem":24576,"devcore":50,"type":"NVIDIA A30","mode":"mig","health":true},` +
			`{"id":"` + uuidA + `","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":` + a30Wire + `,"health":true}]`,
		devices: []capability.NodeDevice{regA30(uuidA, 0, 0, true)}, rejected: []rejection{{device: 0, field: "devcore"}}},
	{name: "memory the deployed reader's int32 cannot hold",
		doc: `[{"id":"` + uuidA + `","count":1,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":[` +
			`{"name":"1g.6gb","memoryMB":2147483648,"core":25,"sliceCount":1,"placements":[{"start":0,"size":1}]}],"health":true}]`,
		rejected: []rejection{{device: 0, field: "migProfiles[0].memoryMB"}}},
	{name: "entries sharing an id are all left out",
		doc:      `[{"id":"` + uuidT4 + `"},{"id":"` + uuidA + `"},{"id":"` + uuidT4 + `","health":true}]`,
		devices:  []capability.NodeDevice{{ID: uuidA}},
		rejected: []rejection{{device: 0, field: "id"}, {device: 2, field: "id"}}},
}

func TestReadNodeRegistrationDeployedShapes(t *testing.T) {
	for _, tc := range deployedShapes {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := capability.ReadNodeRegistration([]byte(tc.doc))
			if err != nil {
				t.Fatalf("got %v, want the value read", err)
			}
			if !reflect.DeepEqual(reg.Devices, tc.devices) {
				t.Errorf("devices:\ngot  %+v\nwant %+v", reg.Devices, tc.devices)
			}
			var got []rejection
			for _, re := range reg.Rejected {
				if !errors.Is(re, capability.ErrRegistration) {
					t.Errorf("rejection %v does not match ErrRegistration", re)
				}
				got = append(got, rejection{device: re.Device, field: re.Field})
			}
			if !reflect.DeepEqual(got, tc.rejected) {
				t.Errorf("rejected: got %+v, want %+v (%v)", got, tc.rejected, reg.Err())
			}
			if (reg.Err() == nil) != (len(tc.rejected) == 0) {
				t.Errorf("Err() = %v with %d rejections", reg.Err(), len(tc.rejected))
			}
			if !reflect.DeepEqual(reg.Findings, tc.findings) {
				t.Errorf("findings: got %+v, want %+v", reg.Findings, tc.findings)
			}
			enc, err := capability.EncodeNodeRegistration(reg.Devices)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if tc.roundTrip && string(enc) != tc.doc {
				t.Errorf("re-encoded bytes differ:\ngot  %s\nwant %s", enc, tc.doc)
			}
		})
	}
}

func TestNodeRegistrationGPUsHealthAndOrder(t *testing.T) {
	doc := `[{"id":"` + uuidB + `","index":1,"count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","numa":1,"mode":"mig","migProfiles":` + a30Wire + `},` +
		`{"id":"` + uuidT4 + `","index":2,"count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","mode":"hami-core","health":true},` +
		`{"id":"` + uuidA + `","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":` + a30Wire + `,"health":true}]`
	reg, err := capability.ReadNodeRegistration([]byte(doc))
	if err != nil || reg.Err() != nil {
		t.Fatal(err, reg.Err())
	}
	gpus := reg.GPUs()
	type view struct {
		uuid      string
		index     int
		unhealthy bool
		profiles  int
	}
	var got []view
	for _, g := range gpus {
		got = append(got, view{uuid: g.UUID, index: g.Index, unhealthy: g.Unhealthy, profiles: len(g.Profiles)})
	}
	want := []view{
		{uuid: uuidA, index: 0, unhealthy: false, profiles: 3},
		{uuid: uuidB, index: 1, unhealthy: true, profiles: 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v (MIG GPUs only, by index, health from the registration)", got, want)
	}
}

func TestReadNodeRegistrationRefusesMalformedArray(t *testing.T) {
	good := `{"id":"` + uuidA + `","health":true}`
	tests := []struct {
		name string
		doc  string
	}{
		{name: "truncated", doc: `[` + good + `,`},
		{name: "an object, not an array", doc: good},
		{name: "trailing data", doc: `[` + good + `] []`},
		{name: "null", doc: `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := capability.ReadNodeRegistration([]byte(tc.doc))
			var re *capability.RegistrationError
			if !errors.As(err, &re) || re.Device != -1 {
				t.Fatalf("got %v, want a RegistrationError for the array", err)
			}
			if !reflect.DeepEqual(reg, capability.NodeRegistration{}) {
				t.Errorf("got %+v, want no devices", reg)
			}
		})
	}
}

func TestEncodeNodeRegistrationUnhealthyAndRange(t *testing.T) {
	enc, err := capability.EncodeNodeRegistration([]capability.NodeDevice{t4(false)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(enc), `[{"id":"`+uuidT4+`","count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","mode":"hami-core"}]`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	big := regA30(uuidA, 0, 0, true)
	big.MIGProfiles[2].MemoryMB = math.MaxInt32 + 1
	_, err = capability.EncodeNodeRegistration([]capability.NodeDevice{big})
	var re *capability.RegistrationError
	if !errors.As(err, &re) || re.Device != 0 || re.Field != "migProfiles[2].memoryMB" {
		t.Errorf("got %v, want a RegistrationError for migProfiles[2].memoryMB", err)
	}
	big.MIGProfiles[2].MemoryMB = math.MaxInt32
	if _, err := capability.EncodeNodeRegistration([]capability.NodeDevice{big}); err != nil {
		t.Errorf("2^31-1 MiB: got %v, want it written", err)
	}

	gpu := capability.GPU{UUID: uuidA, MIGMode: capability.MIGEnabled, MemoryMB: 24576,
		Profiles: []capability.Profile{{Name: "1g.6gb", MemoryMB: 1 << 31, SliceCount: 1, Placements: starts(1, 0)}}}
	_, err = capability.NewMIGNodeDevice(gpu, true)
	if !errors.As(err, &re) || re.Field != "migProfiles[0].memoryMB" {
		t.Errorf("NewMIGNodeDevice: got %v, want a RegistrationError for migProfiles[0].memoryMB", err)
	}
}

func TestNewMIGNodeDeviceHealthRoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		healthy   bool
		unhealthy bool // GPU.Unhealthy
		want      bool // NodeDevice.Health
	}{
		{name: "healthy", healthy: true, want: true},
		{name: "plugin says unhealthy", healthy: false, want: false},
		{name: "GPU marked unhealthy", healthy: true, unhealthy: true, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := capability.GPU{UUID: uuidA, Index: 3, Name: "NVIDIA A30", MemoryMB: 24576, MIGMode: capability.MIGEnabled,
				Profiles: a30Profiles(), Unhealthy: tc.unhealthy}
			d, err := capability.NewMIGNodeDevice(g, tc.healthy)
			if err != nil {
				t.Fatal(err)
			}
			if d.Health != tc.want {
				t.Errorf("Health = %v, want %v", d.Health, tc.want)
			}
			enc, err := capability.EncodeNodeRegistration([]capability.NodeDevice{d})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := capability.ReadNodeRegistration(enc)
			if err != nil || len(reg.GPUs()) != 1 {
				t.Fatalf("got %+v %v", reg, err)
			}
			if got := reg.GPUs()[0].Unhealthy; got != !tc.want {
				t.Errorf("read back Unhealthy = %v, want %v", got, !tc.want)
			}
			again, err := capability.EncodeNodeRegistration(reg.Devices)
			if err != nil || string(again) != string(enc) {
				t.Errorf("round trip differs: %v\n%s\n%s", err, again, enc)
			}
		})
	}
}
