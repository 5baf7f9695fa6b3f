package capability_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

// legacyConfig is a v2.9 device config in the shape HAMi's chart shipped.
const legacyConfig = `
nvidia:
  resourceCountName: nvidia.com/gpu
  knownMigGeometries:
  - models: ["A30"]
    allowedGeometries:
      - - name: 1g.6gb
          memory: 6144
          count: 4
      - - name: 2g.12gb
          memory: 12288
          count: 2
      - - name: 4g.24gb
          memory: 24576
          count: 1
  - models: ["A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB", "A100-SXM4-40GB"]
    allowedGeometries:
      - - name: 1g.5gb
          core: 14
          memory: 5120
          count: 7
      - - name: 2g.10gb
          memory: 10240
          count: 3
        - name: 1g.5gb
          memory: 5120
          count: 1
      - - name: 3g.20gb
          memory: 20480
          count: 2
      - - name: 7g.40gb
          memory: 40960
          count: 1
      - - name: 1g.5gb-custom
          memory: 5120
          count: 7
  - models: ["H100-SXM5-80GB"]
    allowedGeometries:
      - - name: "7G.80GB"
          memory: 81920
          count: 1
  - models: []
    allowedGeometries:
      - - name: 1g.10gb
          memory: 10240
          count: 7
`

func TestParseLegacyGeometries(t *testing.T) {
	g, err := capability.ParseLegacyGeometries([]byte(legacyConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 4 {
		t.Fatalf("got %d entries, want 4", len(g))
	}
	want := capability.LegacyEntry{
		Models: []string{"A30"},
		AllowedGeometries: [][]capability.LegacyTemplate{
			{{Name: "1g.6gb", Memory: 6144, Count: 4}},
			{{Name: "2g.12gb", Memory: 12288, Count: 2}},
			{{Name: "4g.24gb", Memory: 24576, Count: 1}},
		},
	}
	if !reflect.DeepEqual(g[0], want) {
		t.Errorf("got %+v, want %+v", g[0], want)
	}
	if got := g[1].AllowedGeometries[0][0]; got.Core != 14 {
		t.Errorf("got core %d, want 14", got.Core)
	}
}

func TestConvertLegacy(t *testing.T) {
	g, err := capability.ParseLegacyGeometries([]byte(legacyConfig))
	if err != nil {
		t.Fatal(err)
	}
	got, report := capability.ConvertLegacy(g)
	want := capability.Allowlist{
		{Models: []string{"A30"}, Profiles: []string{"1g.6gb", "2g.12gb", "4g.24gb"}},
		{Models: []string{"A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"}, Profiles: []string{"1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("converted allowlist invalid: %v", err)
	}
	wantReport := []capability.LegacyEntryReport{
		{Entry: 0, AllowlistEntry: 0, Models: want[0].Models, Profiles: want[0].Profiles},
		{Entry: 1, AllowlistEntry: 1, Models: want[1].Models, Profiles: want[1].Profiles,
			InvalidProfiles: []string{"1g.5gb-custom"}, InvalidModels: []string{"A100-SXM4-40GB"}},
		{Entry: 2, AllowlistEntry: -1, Models: []string{"H100-SXM5-80GB"},
			InvalidProfiles: []string{"7G.80GB"}, Dropped: "no valid profile names"},
		{Entry: 3, AllowlistEntry: -1, Profiles: []string{"1g.10gb"}, Dropped: "no usable models"},
	}
	if !reflect.DeepEqual(report.Entries, wantReport) {
		t.Errorf("got report\n%+v\nwant\n%+v", report.Entries, wantReport)
	}
	if report.Clean() {
		t.Error("got Clean, want not clean")
	}
	// The converted policy is a valid device config again.
	data, err := capability.EncodeDeviceConfig(got, capability.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := capability.ParseDeviceConfig(data)
	if err != nil || !reflect.DeepEqual(cfg.Allowlist, got) {
		t.Errorf("got %v %v, want the converted allowlist back", cfg.Allowlist, err)
	}
}

func TestConvertLegacyEmpty(t *testing.T) {
	got, report := capability.ConvertLegacy(nil)
	if got == nil || len(got) != 0 || len(report.Entries) != 0 || !report.Clean() {
		t.Errorf("got %#v %+v, want an empty non-nil allowlist and a clean report", got, report)
	}
}

func TestParseLegacyGeometriesErrors(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		path  string
		entry int
		field string
	}{
		{name: "absent", doc: "nvidia:\n  migProfileAllowlist: []\n", path: "nvidia.knownMigGeometries", entry: -1},
		{name: "not a list", doc: "nvidia:\n  knownMigGeometries: {}\n", path: "nvidia.knownMigGeometries", entry: -1},
		{name: "unknown entry key", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    geometries: []\n",
			path: "nvidia.knownMigGeometries[0].geometries", entry: 0, field: "geometries"},
		{name: "model not a string", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30, 3]\n",
			path: "nvidia.knownMigGeometries[0].models[1]", entry: 0, field: "models[1]"},
		{name: "geometry not a list", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries: [x]\n",
			path: "nvidia.knownMigGeometries[0].allowedGeometries[0]", entry: 0, field: "allowedGeometries[0]"},
		{name: "template unknown key", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries: [[{name: 1g.6gb, cores: 1}]]\n",
			path: "nvidia.knownMigGeometries[0].allowedGeometries[0][0].cores", entry: 0, field: "allowedGeometries[0][0].cores"},
		{name: "count not an integer", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries: [[{name: 1g.6gb, count: 1.5}]]\n",
			path: "nvidia.knownMigGeometries[0].allowedGeometries[0][0].count", entry: 0, field: "allowedGeometries[0][0].count"},
		{name: "memory overflows", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries: [[{name: 1g.6gb, memory: 99999999999}]]\n",
			path: "nvidia.knownMigGeometries[0].allowedGeometries[0][0].memory", entry: 0, field: "allowedGeometries[0][0].memory"},
		{name: "name missing", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries: [[{count: 1}]]\n",
			path: "nvidia.knownMigGeometries[0].allowedGeometries[0][0].name", entry: 0, field: "allowedGeometries[0][0].name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := capability.ParseLegacyGeometries([]byte(tc.doc))
			var ce *capability.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, capability.ErrConfig) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if ce.Path != tc.path || ce.Entry != tc.entry || ce.Field != tc.field {
				t.Errorf("got %q %d %q, want %q %d %q", ce.Path, ce.Entry, ce.Field, tc.path, tc.entry, tc.field)
			}
		})
	}
}

func TestParseLegacyGeometriesNulls(t *testing.T) {
	g, err := capability.ParseLegacyGeometries([]byte(`{"nvidia":{"knownMigGeometries":[{"models":null,"allowedGeometries":[null,[]]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := capability.LegacyGeometries{{AllowedGeometries: [][]capability.LegacyTemplate{nil, nil}}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("got %#v, want %#v", g, want)
	}
}
