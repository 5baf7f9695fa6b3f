package capability_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

// specProfile is the migProfiles example of dynamic-mig-design.md, compact.
const specProfile = `{"name":"2g.10gb","memoryMB":9984,"core":29,"sliceCount":2,"placements":[{"start":0,"size":2},{"start":2,"size":2},{"start":4,"size":2}]}`

// specRegistration is a node registration as the deployed device plugin
// writes it: a full A100-40GB, keys in wire order, and an unhealthy T4 in
// hami-core mode, whose zero index, zero NUMA node and false health are
// left out (every key of the deployed struct is omitempty).
const specRegistration = `[{"id":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","index":1,"count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","numa":1,"mode":"mig","migProfiles":[` +
	`{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":0,"size":1},{"start":1,"size":1},{"start":2,"size":1},{"start":3,"size":1},{"start":4,"size":1},{"start":5,"size":1},{"start":6,"size":1}]},` +
	specProfile + `,` +
	`{"name":"3g.20gb","memoryMB":20096,"core":43,"sliceCount":3,"placements":[{"start":0,"size":4},{"start":4,"size":4}]},` +
	`{"name":"7g.40gb","memoryMB":40448,"core":100,"sliceCount":7,"placements":[{"start":0,"size":8}]}],"health":true},` +
	`{"id":"GPU-00000000-0000-0000-0000-000000000001","count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","mode":"hami-core"}]`

func TestNodeRegistrationSpecExampleRoundTrip(t *testing.T) {
	for _, doc := range []string{
		specRegistration,
		`[{"id":"GPU-a","count":3,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig","migProfiles":[` + specProfile + `],"health":true}]`,
	} {
		devs, err := capability.DecodeNodeRegistration([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		got, err := capability.EncodeNodeRegistration(devs)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != doc {
			t.Errorf("re-encoded bytes differ:\ngot  %s\nwant %s", got, doc)
		}
	}
}

func TestDecodeNodeRegistrationFields(t *testing.T) {
	devs, err := capability.DecodeNodeRegistration([]byte(specRegistration))
	if err != nil {
		t.Fatal(err)
	}
	want := capability.Profile{Name: "2g.10gb", MemoryMB: 9984, Core: 29, SliceCount: 2, Placements: starts(2, 0, 2, 4)}
	if len(devs) != 2 || !reflect.DeepEqual(devs[0].MIGProfiles[1], want) {
		t.Fatalf("got %+v, want the spec's 2g.10gb", devs)
	}
	d := devs[0]
	if d.ID != "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f" || d.Index != 1 || d.Count != 7 || d.Devmem != 40960 ||
		d.Devcore != 100 || d.Type != "NVIDIA A100-SXM4-40GB" || d.NUMA != 1 || d.Mode != capability.ModeMIG || !d.Health {
		t.Errorf("got %+v", d)
	}
	if devs[1].Mode != capability.ModeHAMiCore || devs[1].Health || devs[1].MIGProfiles != nil {
		t.Errorf("got %+v", devs[1])
	}
}

func TestDecodeNodeRegistrationEmpty(t *testing.T) {
	for _, doc := range []string{"", "  \n", "[]", "[ ]"} {
		devs, err := capability.DecodeNodeRegistration([]byte(doc))
		if err != nil || devs != nil {
			t.Errorf("%q: got %v %v, want nil, nil", doc, devs, err)
		}
	}
	got, err := capability.EncodeNodeRegistration(nil)
	if err != nil || string(got) != "[]" {
		t.Errorf("got %s %v, want []", got, err)
	}
}

func TestDecodeNodeRegistrationErrors(t *testing.T) {
	const dev = `"id":"GPU-a","count":1,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":true`
	const prof = `"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1`
	tests := []struct {
		name   string
		doc    string
		device int
		field  string
		cause  error
	}{
		{name: "not JSON", doc: `[{`, device: -1},
		{name: "not an array", doc: `{}`, device: -1},
		{name: "device not an object", doc: `[1]`, device: 0},
		{name: "unknown key", doc: `[{` + dev + `,"vendor":"NVIDIA"}]`, device: 0, field: "vendor"},
		{name: "miscased key", doc: `[{"ID":"GPU-a","count":1,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":true}]`, device: 0, field: "ID"},
		{name: "duplicate key", doc: `[{` + dev + `,"count":2}]`, device: 0, field: "count"},
		{name: "duplicate placement key", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":0,"size":1,"start":1}]}]}]`, device: 0, field: "migProfiles[0].placements[0].start"},
		{name: "count float", doc: `[{"id":"GPU-a","count":1.5,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":true}]`, device: 0, field: "count"},
		{name: "devmem overflow", doc: `[{"id":"GPU-a","count":1,"devmem":4294967296,"devcore":100,"type":"T","mode":"mig","health":true}]`, device: 0, field: "devmem"},
		{name: "health string", doc: `[{"id":"GPU-a","count":1,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":"true"}]`, device: 0, field: "health"},
		{name: "negative index", doc: `[{"id":"GPU-a","index":-1,"count":1,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":true}]`, device: 0, field: "index"},
		{name: "negative count", doc: `[{"id":"GPU-a","count":-1,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":true}]`, device: 0, field: "count"},
		{name: "empty id", doc: `[{"id":"","count":1,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":true}]`, device: 0, field: "id"},
		{name: "unknown mode", doc: `[{"id":"GPU-a","count":1,"devmem":1,"devcore":100,"type":"T","mode":"MIG","health":true}]`, device: 0, field: "mode"},
		{name: "MIG devcore", doc: `[{"id":"GPU-a","count":1,"devmem":1,"devcore":50,"type":"T","mode":"mig","health":true}]`, device: 0, field: "devcore"},
		{name: "duplicate id", doc: `[{` + dev + `},{` + dev + `}]`, device: 0, field: "id"},
		{name: "profiles outside MIG", doc: `[{"id":"GPU-a","count":1,"devmem":1,"devcore":100,"type":"T","mode":"hami-core","migProfiles":[{` + prof + `,"placements":[{"start":0,"size":1}]}],"health":true}]`, device: 0, field: "migProfiles"},
		{name: "profiles not a list", doc: `[{` + dev + `,"migProfiles":{}}]`, device: 0, field: "migProfiles"},
		{name: "profile unknown key", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":0,"size":1}],"maxInstances":7}]}]`, device: 0, field: "migProfiles[0].maxInstances"},
		{name: "profile missing placements", doc: `[{` + dev + `,"migProfiles":[{` + prof + `}]}]`, device: 0, field: "migProfiles[0].placements"},
		{name: "placements a number", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":1}]}]`, device: 0, field: "migProfiles[0].placements"},
		{name: "memory above int32", doc: `[{` + dev + `,"migProfiles":[{"name":"1g.5gb","memoryMB":2147483648,"core":15,"sliceCount":1,"placements":[{"start":0,"size":1}]}]}]`, device: 0, field: "migProfiles[0].memoryMB"},
		{name: "null id", doc: `[{"id":null}]`, device: 0, field: "id"},
		{name: "no id", doc: `[{"count":1}]`, device: 0, field: "id"},
		{name: "profile null", doc: `[{` + dev + `,"migProfiles":[null]}]`, device: 0, field: "migProfiles[0]"},
		{name: "malformed name", doc: `[{` + dev + `,"migProfiles":[{"name":"MIG 1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":0,"size":1}]}]}]`, device: 0, field: "migProfiles[0].name", cause: capability.ErrProfileName},
		{name: "duplicate name", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":0,"size":1}]},{` + prof + `,"placements":[{"start":1,"size":1}]}]}]`, device: 0, field: "migProfiles[1].name"},
		{name: "zero memory", doc: `[{` + dev + `,"migProfiles":[{"name":"1g.5gb","memoryMB":0,"core":15,"sliceCount":1,"placements":[{"start":0,"size":1}]}]}]`, device: 0, field: "migProfiles[0].memoryMB"},
		{name: "zero slices", doc: `[{` + dev + `,"migProfiles":[{"name":"1g.5gb","memoryMB":1,"core":15,"sliceCount":0,"placements":[{"start":0,"size":1}]}]}]`, device: 0, field: "migProfiles[0].sliceCount"},
		{name: "core above 100", doc: `[{` + dev + `,"migProfiles":[{"name":"1g.5gb","memoryMB":1,"core":101,"sliceCount":1,"placements":[{"start":0,"size":1}]}]}]`, device: 0, field: "migProfiles[0].core"},
		{name: "size zero", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":0,"size":1},{"start":2,"size":0}]}]}]`, device: 0, field: "migProfiles[0].placements[1].size"},
		{name: "placement outside grid", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":60,"size":8}]}]}]`, device: 0, field: "migProfiles[0].placements[0]"},
		{name: "duplicate placement", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":0,"size":1},{"start":0,"size":1}]}]}]`, device: 0, field: "migProfiles[0].placements[1]"},
		{name: "negative start", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":-1,"size":1}]}]}]`, device: 0, field: "migProfiles[0].placements[0].start"},
		{name: "placement missing size", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":0}]}]}]`, device: 0, field: "migProfiles[0].placements[0].size"},
		{name: "placement unknown key", doc: `[{` + dev + `,"migProfiles":[{` + prof + `,"placements":[{"start":0,"size":1,"end":1}]}]}]`, device: 0, field: "migProfiles[0].placements[0].end"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := capability.DecodeNodeRegistration([]byte(tc.doc))
			if err == nil {
				t.Fatalf("got %+v, want an error", devs)
			}
			var re *capability.RegistrationError
			if !errors.As(err, &re) || !errors.Is(err, capability.ErrRegistration) {
				t.Fatalf("got %v, want a *RegistrationError", err)
			}
			if re.Device != tc.device || re.Field != tc.field {
				t.Errorf("got device %d field %q, want %d %q (%v)", re.Device, re.Field, tc.device, tc.field, err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("got %v, want it to match %v", err, tc.cause)
			}
		})
	}
}

func TestNullMIGProfilesIsAbsent(t *testing.T) {
	devs, err := capability.DecodeNodeRegistration([]byte(`[{"id":"GPU-a","count":0,"devmem":1,"devcore":100,"type":"T","mode":"mig","migProfiles":null,"health":true}]`))
	if err != nil || devs[0].MIGProfiles != nil {
		t.Errorf("got %+v %v", devs, err)
	}
}

func TestNewMIGNodeDeviceFromDiscovery(t *testing.T) {
	var hw fakeView
	d := hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
	d.NUMA = 1
	gpus, _, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	dev, err := capability.NewMIGNodeDevice(gpus[0], true)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Mode != capability.ModeMIG || dev.Devcore != 100 || dev.Devmem != a100_40Total || dev.Count != 7 ||
		dev.ID != "GPU-00000000" || dev.Type != "NVIDIA A100-SXM4-40GB" || dev.NUMA != 1 || !dev.Health {
		t.Errorf("got %+v", dev)
	}
	for _, p := range dev.MIGProfiles {
		if p.GIProfileIndex != 0 || p.MaxInstances != 0 || p.Multiprocessors != 0 || p.GIProfileID != 0 {
			t.Errorf("profile %s carries identity onto the wire: %+v", p.Name, p)
		}
	}
	// The registration does not alias the GPU's placements.
	dev.MIGProfiles[0].Placements[0].Start = 99
	if gpus[0].Profiles[0].Placements[0].Start == 99 {
		t.Error("NewMIGNodeDevice aliases the GPU's placements")
	}
	dev.MIGProfiles[0].Placements[0].Start = 0

	data, err := capability.EncodeNodeRegistration([]capability.NodeDevice{dev})
	if err != nil {
		t.Fatal(err)
	}
	back, err := capability.DecodeNodeRegistration(data)
	if err != nil {
		t.Fatal(err)
	}
	g, err := back[0].GPU()
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler's view equals discovery's in every wire field.
	want := gpus[0]
	if g.UUID != want.UUID || g.Index != want.Index || g.Name != want.Name || g.MemoryMB != want.MemoryMB ||
		g.NUMA != want.NUMA || g.MIGMode != capability.MIGEnabled || g.Width() != want.Width() || len(g.Profiles) != len(want.Profiles) {
		t.Fatalf("got %+v, want %+v", g, want)
	}
	for i, p := range g.Profiles {
		w := want.Profiles[i]
		if p.Name != w.Name || p.MemoryMB != w.MemoryMB || p.Core != w.Core || p.SliceCount != w.SliceCount ||
			!reflect.DeepEqual(p.Placements, w.Placements) || p.Variant != w.Variant || p.CIProfileIndex != w.CIProfileIndex {
			t.Errorf("profile %d: got %+v, want %+v", i, p, w)
		}
	}
}

func TestNewMIGNodeDeviceErrors(t *testing.T) {
	tests := []struct {
		name  string
		gpu   capability.GPU
		field string
	}{
		{name: "MIG disabled", gpu: capability.GPU{UUID: "GPU-a", MIGMode: capability.MIGDisabled}, field: "mode"},
		{name: "memory too large", gpu: capability.GPU{UUID: "GPU-a", MIGMode: capability.MIGEnabled, MemoryMB: 1 << 32}, field: "devmem"},
		{name: "no UUID", gpu: capability.GPU{MIGMode: capability.MIGEnabled}, field: "id"},
		{name: "bad profile", gpu: capability.GPU{UUID: "GPU-a", MIGMode: capability.MIGEnabled,
			Profiles: []capability.Profile{{Name: "1g.5gb", MemoryMB: 1, SliceCount: 1}}}, field: "migProfiles[0].placements"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := capability.NewMIGNodeDevice(tc.gpu, true)
			var re *capability.RegistrationError
			if !errors.As(err, &re) || re.Field != tc.field {
				t.Errorf("got %v, want a RegistrationError for %s", err, tc.field)
			}
		})
	}
}

func TestNodeDeviceGPU(t *testing.T) {
	devs, err := capability.DecodeNodeRegistration([]byte(specRegistration))
	if err != nil {
		t.Fatal(err)
	}
	g, err := devs[1].GPU()
	if err != nil || g.MIGMode != capability.MIGDisabled || g.Profiles != nil {
		t.Errorf("got %+v %v, want a non-MIG GPU", g, err)
	}
	bad := devs[0]
	bad.Mode = "vgpu"
	if _, err := bad.GPU(); !errors.Is(err, capability.ErrRegistration) {
		t.Errorf("got %v, want ErrRegistration", err)
	}
	// Unsorted wire profiles come back in CompareProfiles order, with the
	// derivable identity.
	dev := capability.NodeDevice{ID: "GPU-x", Devmem: 24576, Devcore: 100, Type: "NVIDIA A30", Mode: capability.ModeMIG,
		MIGProfiles: []capability.Profile{
			{Name: "2g.12gb+me", MemoryMB: 11968, Core: 50, SliceCount: 2, Placements: starts(2, 0, 2)},
			{Name: "1g.6gb", MemoryMB: 5952, Core: 25, SliceCount: 1, Placements: starts(1, 0, 1, 2, 3)},
		}}
	g, err = dev.GPU()
	if err != nil {
		t.Fatal(err)
	}
	if g.Profiles[0].Name != "1g.6gb" || g.Profiles[1].Variant != capability.VariantME || g.Profiles[1].CIProfileIndex != capability.CIProfile2Slice || g.Width() != 4 {
		t.Errorf("got %+v", g.Profiles)
	}
	if dev.MIGProfiles[0].Name != "2g.12gb+me" {
		t.Error("GPU reordered the NodeDevice's profiles")
	}
}

func TestEncodeNodeRegistrationValidates(t *testing.T) {
	_, err := capability.EncodeNodeRegistration([]capability.NodeDevice{{}})
	var re *capability.RegistrationError
	if !errors.As(err, &re) || re.Device != 0 {
		t.Errorf("got %v, want a RegistrationError for device 0", err)
	}
}

func TestNewMIGNodeDevices(t *testing.T) {
	var hw fakeView
	hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
	hw.add("NVIDIA A30", a30Total, a30)
	gpus, _, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	devs, err := capability.NewMIGNodeDevices(gpus, func(g *capability.GPU) bool { return g.Index == 0 })
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || !devs[0].Health || devs[1].Health || devs[1].Count != 4 || devs[0].Count != 7 {
		t.Errorf("got %+v", devs)
	}
	if devs, err := capability.NewMIGNodeDevices(gpus, nil); err != nil || !devs[1].Health {
		t.Errorf("nil healthy: got %+v %v, want all healthy", devs, err)
	}
	t4 := capability.GPU{UUID: "GPU-t4", Index: 2, Name: "Tesla T4", MIGMode: capability.MIGDisabled}
	tests := []struct {
		name  string
		gpus  []capability.GPU
		want  int
		field string
	}{
		{name: "not in MIG mode", gpus: []capability.GPU{gpus[0], gpus[1], t4}, want: 2, field: "mode"},
		// Every device sharing the UUID is named, the first one first.
		{name: "duplicate UUID", gpus: []capability.GPU{gpus[0], gpus[1], gpus[0]}, want: 0, field: "id"},
	}
	for _, tc := range tests {
		_, err := capability.NewMIGNodeDevices(tc.gpus, nil)
		var re *capability.RegistrationError
		if !errors.As(err, &re) || re.Device != tc.want || re.Field != tc.field {
			t.Errorf("%s: got %v, want device %d field %s", tc.name, err, tc.want, tc.field)
		}
	}
}
