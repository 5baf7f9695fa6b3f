package capability_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func TestDefaultAllowlistMatchesRealNames(t *testing.T) {
	// want is the first model of the entry that must match: the entry's
	// real NVML name.
	tests := []struct {
		device string
		want   string
		seven  string // the entry's largest profile, as a cross-check
	}{
		// Names real drivers and go-nvml's mocks report.
		{device: "NVIDIA H100 80GB HBM3", want: "NVIDIA H100 80GB HBM3", seven: "7g.80gb"},
		{device: "NVIDIA H100 PCIe", want: "NVIDIA H100 80GB HBM3", seven: "7g.80gb"},
		{device: "NVIDIA H100 NVL", want: "NVIDIA H100 NVL", seven: "7g.94gb"},
		{device: "NVIDIA H200", want: "NVIDIA H200", seven: "7g.141gb"},
		{device: "NVIDIA H200 NVL", want: "NVIDIA H200", seven: "7g.141gb"},
		{device: "NVIDIA H200 141GB HBM3e", want: "NVIDIA H200", seven: "7g.141gb"},
		{device: "NVIDIA H20", want: "NVIDIA H20", seven: "7g.96gb"},
		{device: "NVIDIA B200", want: "NVIDIA B200", seven: "7g.180gb"},
		{device: "NVIDIA B200 180GB HBM3e", want: "NVIDIA B200", seven: "7g.180gb"},
		{device: "NVIDIA GB200", want: "NVIDIA GB200", seven: "7g.186gb"},
		{device: "NVIDIA GH200 480GB", want: "NVIDIA GH200 480GB", seven: "7g.96gb"},
		{device: "NVIDIA A100-SXM4-80GB", want: "NVIDIA A100-SXM4-80GB", seven: "7g.80gb"},
		{device: "NVIDIA A100 80GB PCIe", want: "NVIDIA A100-SXM4-80GB", seven: "7g.80gb"},
		{device: "NVIDIA A100-SXM-80GB", want: "NVIDIA A100-SXM4-80GB", seven: "7g.80gb"},
		{device: "NVIDIA A100-SXM4-40GB", want: "NVIDIA A100-SXM4-40GB", seven: "7g.40gb"},
		{device: "NVIDIA A100-PCIE-40GB", want: "NVIDIA A100-SXM4-40GB", seven: "7g.40gb"},
		{device: "NVIDIA A30", want: "NVIDIA A30", seven: "4g.24gb"},
		{device: "NVIDIA A30-PCIE-24GB", want: "NVIDIA A30", seven: "4g.24gb"},
		{device: "NVIDIA RTX PRO 6000 Blackwell Server Edition", want: "NVIDIA RTX PRO 6000 Blackwell Server Edition", seven: "4g.96gb"},
		{device: "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", want: "NVIDIA RTX PRO 6000 Blackwell Server Edition", seven: "4g.96gb"},
		{device: "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", want: "NVIDIA RTX PRO 6000 Blackwell Server Edition", seven: "4g.96gb"},
		{device: "NVIDIA A800-SXM4-80GB", want: "NVIDIA A100-SXM4-80GB", seven: "7g.80gb"},
		{device: "NVIDIA A800 80GB PCIe", want: "NVIDIA A100-SXM4-80GB", seven: "7g.80gb"},
		{device: "NVIDIA H800", want: "NVIDIA H100 80GB HBM3", seven: "7g.80gb"},
		{device: "NVIDIA H800 PCIe", want: "NVIDIA H100 80GB HBM3", seven: "7g.80gb"},
		{device: "NVIDIA GB200", want: "NVIDIA GB200", seven: "7g.189gb"}, // early drivers' name
		// The chart's strings keep matching.
		{device: "A100-SXM4-40GB", want: "NVIDIA A100-SXM4-40GB", seven: "7g.40gb"},
		{device: "A100-40GB-PCIe", want: "NVIDIA A100-SXM4-40GB", seven: "7g.40gb"},
		{device: "A100-PCIE-40GB", want: "NVIDIA A100-SXM4-40GB", seven: "7g.40gb"},
		{device: "A100-SXM4-80GB", want: "NVIDIA A100-SXM4-80GB", seven: "7g.79gb"},
		{device: "A100-80GB-PCIe", want: "NVIDIA A100-SXM4-80GB", seven: "7g.79gb"},
		{device: "A100-PCIE-80GB", want: "NVIDIA A100-SXM4-80GB", seven: "7g.79gb"},
		{device: "H100-PCIE-80GB", want: "NVIDIA H100 80GB HBM3", seven: "7g.80gb"},
		{device: "H100-SXM5-80GB", want: "NVIDIA H100 80GB HBM3", seven: "7g.80gb"},
		{device: "H100-PCIE-94GB", want: "NVIDIA H100 NVL", seven: "7g.94gb"},
		{device: "H100-SXM5-94GB", want: "NVIDIA H100 NVL", seven: "7g.94gb"},
		{device: "H20", want: "NVIDIA H20", seven: "7g.96gb"},
		{device: "GH200", want: "NVIDIA GH200 480GB", seven: "7g.96gb"},
		{device: "H200 NVL", want: "NVIDIA H200", seven: "7g.141gb"},
		{device: "H200-SXM5", want: "NVIDIA H200", seven: "7g.141gb"},
		{device: "B200", want: "NVIDIA B200", seven: "7g.180gb"},
		{device: "A30", want: "NVIDIA A30", seven: "4g.24gb"},
		{device: "RTX PRO 6000 Blackwell Server Edition", want: "NVIDIA RTX PRO 6000 Blackwell Server Edition", seven: "4g.96gb"},
		// Substring traps: the longer name must win.
		{device: "NVIDIA GH200 144G HBM3e", want: "NVIDIA GH200 144G HBM3e", seven: "7g.144gb"},
		{device: "NVIDIA GH200 480GB", want: "NVIDIA GH200 480GB", seven: "7g.96gb"},
		{device: "NVIDIA H20 96GB", want: "NVIDIA H20", seven: "7g.96gb"},
		{device: "NVIDIA GB200 189GB", want: "NVIDIA GB200", seven: "7g.186gb"},
		{device: "NVIDIA H200 NVL", want: "NVIDIA H200", seven: "7g.141gb"},
	}
	a := capability.DefaultAllowlist()
	for _, tc := range tests {
		t.Run(tc.device, func(t *testing.T) {
			i, _, ok := a.Match(tc.device)
			if !ok {
				t.Fatalf("no entry matches %q", tc.device)
			}
			if got := a[i].Models[0]; got != tc.want {
				t.Errorf("got entry %d (%q), want %q", i, got, tc.want)
			}
			if !a.Allows(tc.device, tc.seven) {
				t.Errorf("%q: got profiles %v, want %s among them", tc.device, a.Profiles(tc.device), tc.seven)
			}
		})
	}
}

func TestDefaultAllowlistNonMatches(t *testing.T) {
	a := capability.DefaultAllowlist()
	for _, name := range []string{"Tesla T4", "NVIDIA L40S", "NVIDIA GeForce RTX 4090", "NVIDIA A10", "NVIDIA RTX PRO 4000 Blackwell", ""} {
		if i, m, ok := a.Match(name); ok {
			t.Errorf("%q: got entry %d via %q, want no match", name, i, m)
		}
	}
}

func TestDefaultAllowlistIsValidAndCoversChart(t *testing.T) {
	a := capability.DefaultAllowlist()
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	// Every model string and profile of the chart table in
	// wire-compatibility.md is kept.
	chart := []struct {
		models   []string
		profiles []string
	}{
		{[]string{"A30"}, []string{"1g.6gb", "2g.12gb", "4g.24gb"}},
		{[]string{"A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"}, []string{"1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"}},
		{[]string{"A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"}, []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb"}},
		{[]string{"H100-PCIE-80GB", "H100-SXM5-80GB"}, []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"}},
		{[]string{"H100-PCIE-94GB", "H100-SXM5-94GB"}, []string{"1g.12gb", "2g.24gb", "3g.47gb", "7g.94gb"}},
		{[]string{"H20", "GH200"}, []string{"1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"}},
		{[]string{"H200 NVL", "H200-SXM5"}, []string{"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"}},
		{[]string{"B200"}, []string{"1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb"}},
		{[]string{"RTX PRO 6000 Blackwell Server Edition"}, []string{"1g.24gb", "2g.48gb", "4g.96gb"}},
	}
	for _, row := range chart {
		for _, m := range row.models {
			found := false
			for _, e := range a {
				if slices.Contains(e.Models, m) {
					found = true
					for _, p := range row.profiles {
						if !slices.Contains(e.Profiles, p) {
							t.Errorf("model %q: profile %s missing from %v", m, p, e.Profiles)
						}
					}
				}
			}
			if !found {
				t.Errorf("chart model %q is not an alias in any entry", m)
			}
		}
	}
	// A fresh copy every call.
	a[0].Models[0] = "changed"
	if capability.DefaultAllowlist()[0].Models[0] == "changed" {
		t.Error("DefaultAllowlist shares memory between calls")
	}
}

func TestAllowlistMatchFirstWins(t *testing.T) {
	a := capability.Allowlist{
		{Models: []string{"H200"}, Profiles: []string{"1g.18gb"}},
		{Models: []string{"H20"}, Profiles: []string{"1g.12gb"}},
	}
	tests := []struct {
		device string
		entry  int
		model  string
	}{
		{device: "NVIDIA H200", entry: 0, model: "H200"},
		{device: "NVIDIA H20", entry: 1, model: "H20"},
		{device: "NVIDIA h200", entry: -1}, // case-sensitive, as deployed
	}
	for _, tc := range tests {
		entry, model, ok := a.Match(tc.device)
		if entry != tc.entry || model != tc.model || ok != (tc.entry >= 0) {
			t.Errorf("%q: got %d %q %v, want %d %q", tc.device, entry, model, ok, tc.entry, tc.model)
		}
	}
	// Reversed, the trap bites: H20 swallows the H200.
	rev := capability.Allowlist{a[1], a[0]}
	if entry, _, _ := rev.Match("NVIDIA H200"); entry != 0 {
		t.Errorf("got %d, want 0 (the H20 entry)", entry)
	}
	if got := a.Profiles("Tesla T4"); got != nil {
		t.Errorf("got %v, want nil", got)
	}
}

const chartConfig = `
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  deviceSplitCount: 10
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
    - models: ["RTX PRO 6000 Blackwell Server Edition"]
      profiles: ["1g.24gb", "2g.48gb", "4g.96gb"]
cambricon:
  resourceCountName: cambricon.com/vmlu
`

func TestParseDeviceConfigValid(t *testing.T) {
	want := capability.Allowlist{
		{Models: []string{"A100-SXM4-40GB"}, Profiles: []string{"1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"}},
		{Models: []string{"RTX PRO 6000 Blackwell Server Edition"}, Profiles: []string{"1g.24gb", "2g.48gb", "4g.96gb"}},
	}
	tests := []struct {
		name   string
		doc    string
		want   capability.Allowlist
		legacy bool
	}{
		{name: "design doc YAML", doc: chartConfig, want: want},
		{name: "JSON", doc: `{"nvidia":{"migProfileAllowlist":[{"models":["A100-SXM4-40GB"],"profiles":["1g.5gb","2g.10gb","3g.20gb","7g.40gb"]},{"models":["RTX PRO 6000 Blackwell Server Edition"],"profiles":["1g.24gb","2g.48gb","4g.96gb"]}]}}`, want: want},
		{name: "YAML flow mapping", doc: `{nvidia: {migProfileAllowlist: [{models: [A30], profiles: [1g.6gb]}]}}`,
			want: capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb"}}}},
		{name: "empty document", doc: ""},
		{name: "comment only", doc: "# nothing\n"},
		{name: "no nvidia", doc: "hygon:\n  x: 1\n"},
		{name: "null nvidia", doc: "nvidia:\n"},
		{name: "no allowlist", doc: "nvidia:\n  resourceCountName: nvidia.com/gpu\n"},
		{name: "explicit empty allowlist", doc: "nvidia:\n  migProfileAllowlist: []\n", want: capability.Allowlist{}},
		{name: "legacy next to allowlist is ignored", doc: "nvidia:\n  knownMigGeometries: [{bogus: 1}]\n  migProfileAllowlist: [{models: [A30], profiles: [1g.6gb]}]\n",
			want: capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb"}}}, legacy: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := capability.ParseDeviceConfig([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Allowlist, tc.want) || got.LegacyIgnored != tc.legacy {
				t.Errorf("got %#v legacy %v, want %#v legacy %v", got.Allowlist, got.LegacyIgnored, tc.want, tc.legacy)
			}
		})
	}
}

func TestParseDeviceConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		path  string // of the first ConfigError
		entry int
		field string
		cause error // also matched, besides ErrConfig
	}{
		{name: "not YAML", doc: "nvidia: [", path: "", entry: -1},
		{name: "duplicate YAML key", doc: "nvidia:\n  migProfileAllowlist: []\n  migProfileAllowlist: []\n", path: "", entry: -1},
		{name: "duplicate JSON key", doc: `{"nvidia":{"migProfileAllowlist":[],"migProfileAllowlist":[]}}`, path: "nvidia", entry: -1},
		{name: "duplicate JSON entry key", doc: `{"nvidia":{"migProfileAllowlist":[{"models":["A30"],"profiles":["1g.6gb"],"models":["A100"]}]}}`,
			path: "nvidia.migProfileAllowlist[0].models", entry: 0, field: "models"},
		{name: "root is a list", doc: "- a\n", path: "", entry: -1},
		{name: "nvidia is a list", doc: "nvidia: [1]\n", path: "nvidia", entry: -1},
		{name: "allowlist is a map", doc: "nvidia:\n  migProfileAllowlist: {models: [A30]}\n", path: "nvidia.migProfileAllowlist", entry: -1},
		{name: "entry is a string", doc: "nvidia:\n  migProfileAllowlist: [A30]\n", path: "nvidia.migProfileAllowlist[0]", entry: 0},
		{name: "unknown entry key", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [1g.6gb]\n    count: 2\n",
			path: "nvidia.migProfileAllowlist[0].count", entry: 0, field: "count"},
		{name: "miscased entry key", doc: `{"nvidia":{"migProfileAllowlist":[{"Models":["A30"],"profiles":["1g.6gb"]}]}}`,
			path: "nvidia.migProfileAllowlist[0].Models", entry: 0, field: "Models"},
		{name: "empty models", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [1g.6gb]\n  - models: []\n    profiles: [1g.6gb]\n",
			path: "nvidia.migProfileAllowlist[1].models", entry: 1, field: "models"},
		{name: "missing models", doc: "nvidia:\n  migProfileAllowlist:\n  - profiles: [1g.6gb]\n",
			path: "nvidia.migProfileAllowlist[0].models", entry: 0, field: "models"},
		{name: "empty model string", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30, \"\"]\n    profiles: [1g.6gb]\n",
			path: "nvidia.migProfileAllowlist[0].models[1]", entry: 0, field: "models[1]"},
		{name: "duplicate model", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30, A30]\n    profiles: [1g.6gb]\n",
			path: "nvidia.migProfileAllowlist[0].models[1]", entry: 0, field: "models[1]"},
		{name: "model not a string", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30, yes]\n    profiles: [1g.6gb]\n",
			path: "nvidia.migProfileAllowlist[0].models[1]", entry: 0, field: "models[1]"},
		{name: "models not a list", doc: "nvidia:\n  migProfileAllowlist:\n  - models: A30\n    profiles: [1g.6gb]\n",
			path: "nvidia.migProfileAllowlist[0].models", entry: 0, field: "models"},
		{name: "empty profiles", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: []\n",
			path: "nvidia.migProfileAllowlist[0].profiles", entry: 0, field: "profiles"},
		{name: "null profiles", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles:\n",
			path: "nvidia.migProfileAllowlist[0].profiles", entry: 0, field: "profiles"},
		{name: "malformed profile", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [1g.6gb, 2g.12GB]\n",
			path: "nvidia.migProfileAllowlist[0].profiles[1]", entry: 0, field: "profiles[1]", cause: capability.ErrProfileName},
		{name: "prefix only profile", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [4g]\n",
			path: "nvidia.migProfileAllowlist[0].profiles[0]", entry: 0, field: "profiles[0]", cause: capability.ErrProfileName},
		{name: "duplicate profile", doc: "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [1g.6gb, 2g.12gb, 1g.6gb]\n",
			path: "nvidia.migProfileAllowlist[0].profiles[2]", entry: 0, field: "profiles[2]"},
		{name: "legacy only", doc: "nvidia:\n  knownMigGeometries:\n  - models: [A30]\n    allowedGeometries: []\n",
			path: "nvidia.knownMigGeometries", entry: -1, cause: capability.ErrLegacyConfig},
		{name: "misspelt allowlist key", doc: "nvidia:\n  migProfileAllowList: []\n", path: "nvidia.migProfileAllowList", entry: -1},
		{name: "snake case allowlist key", doc: "nvidia:\n  mig_profile_allowlist: []\n", path: "nvidia.mig_profile_allowlist", entry: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := capability.ParseDeviceConfig([]byte(tc.doc))
			if err == nil {
				t.Fatalf("got %+v, want an error", cfg)
			}
			if !errors.Is(err, capability.ErrConfig) {
				t.Errorf("got %v, want ErrConfig", err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("got %v, want it to match %v", err, tc.cause)
			}
			var ce *capability.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %T, want *ConfigError", err)
			}
			if ce.Path != tc.path || ce.Entry != tc.entry || ce.Field != tc.field {
				t.Errorf("got path %q entry %d field %q, want %q %d %q (%v)", ce.Path, ce.Entry, ce.Field, tc.path, tc.entry, tc.field, err)
			}
		})
	}
}

func TestParseDeviceConfigReportsEveryProblem(t *testing.T) {
	doc := "nvidia:\n  migProfileAllowlist:\n  - models: []\n    profiles: [x, 1g.6gb, 1g.6gb]\n    extra: 1\n  - models: [A30]\n    profiles: [1g.6gb]\n  - models: [A100]\n    profiles: []\n"
	_, err := capability.ParseDeviceConfig([]byte(doc))
	var paths []string
	for _, e := range flatten(err) {
		var ce *capability.ConfigError
		if errors.As(e, &ce) {
			paths = append(paths, ce.Path)
		}
	}
	want := []string{
		"nvidia.migProfileAllowlist[0].extra",
		"nvidia.migProfileAllowlist[2].profiles",
	}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("got %v, want %v", paths, want)
	}
	// With the structural problem fixed, the semantic ones of entry 0 show.
	doc = strings.Replace(doc, "    extra: 1\n", "", 1)
	_, err = capability.ParseDeviceConfig([]byte(doc))
	paths = nil
	for _, e := range flatten(err) {
		var ce *capability.ConfigError
		if errors.As(e, &ce) {
			paths = append(paths, ce.Path)
		}
	}
	want = []string{
		"nvidia.migProfileAllowlist[0].models",
		"nvidia.migProfileAllowlist[0].profiles[0]",
		"nvidia.migProfileAllowlist[0].profiles[2]",
		"nvidia.migProfileAllowlist[2].profiles",
	}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("got %v, want %v", paths, want)
	}
}

// flatten returns the errors joined in err, or err alone.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, isCE := err.(*capability.ConfigError); !isCE {
			if _, isRE := err.(*capability.RegistrationError); !isRE {
				return j.Unwrap()
			}
		}
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestEncodeDeviceConfigRoundTrip(t *testing.T) {
	for _, f := range []capability.Format{capability.FormatYAML, capability.FormatJSON} {
		for _, a := range []capability.Allowlist{capability.DefaultAllowlist(), nil, {},
			{{Models: []string{"yes", "0x1F", "a: b", "\"q\"", "ü"}, Profiles: []string{"1g.5gb+me.all"}}}} {
			data, err := capability.EncodeDeviceConfig(a, f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := capability.ParseDeviceConfig(data)
			if err != nil {
				t.Fatalf("%s: %v\n%s", f, err, data)
			}
			if !reflect.DeepEqual(got.Allowlist, a) {
				t.Errorf("%s: got %#v, want %#v\n%s", f, got.Allowlist, a, data)
			}
		}
	}
	if _, err := capability.EncodeDeviceConfig(capability.Allowlist{{}}, capability.FormatJSON); !errors.Is(err, capability.ErrConfig) {
		t.Errorf("got %v, want ErrConfig for an invalid allowlist", err)
	}
	if got := capability.FormatJSON.String() + capability.FormatYAML.String(); got != "jsonyaml" {
		t.Errorf("got %q", got)
	}
}

func TestAllowlistClone(t *testing.T) {
	var nilList capability.Allowlist
	if nilList.Clone() != nil {
		t.Error("Clone of nil is not nil")
	}
	a := capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"1g.6gb"}}}
	b := a.Clone()
	b[0].Profiles[0] = "2g.12gb"
	if a[0].Profiles[0] != "1g.6gb" {
		t.Error("Clone shares profile lists")
	}
}
