package capability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func TestAllowlistMatchDoesNotAllocate(t *testing.T) {
	a := capability.DefaultAllowlist()
	allocs := testing.AllocsPerRun(100, func() {
		a.Match("NVIDIA RTX PRO 6000 Blackwell Server Edition")
		a.Allows("NVIDIA A30", "4g.24gb")
	})
	if allocs != 0 {
		t.Errorf("got %v allocations, want 0", allocs)
	}
}

// eightGPURegistration is an 8-GPU A100-40GB node annotation, what the
// scheduler decodes per node.
func eightGPURegistration(tb testing.TB) []byte {
	var hw fakeView
	for range 8 {
		hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
	}
	gpus, _, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
	if err != nil {
		tb.Fatal(err)
	}
	devs := make([]capability.NodeDevice, len(gpus))
	for i, g := range gpus {
		if devs[i], err = capability.NewMIGNodeDevice(g, true); err != nil {
			tb.Fatal(err)
		}
	}
	data, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// BenchmarkDecodeNodeRegistration compares the strict decoder (exact keys,
// duplicates, validation) with plain encoding/json into the same type, the
// baseline a lax decoder would cost.
func BenchmarkDecodeNodeRegistration(b *testing.B) {
	data := eightGPURegistration(b)
	var indented bytes.Buffer
	if err := json.Indent(&indented, data, "", " "); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"canonical", data},                        // as written: the fast path
		{"indented=strict-path", indented.Bytes()}, // any other layout: key by key
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := capability.DecodeNodeRegistration(tc.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("baseline=json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var devs []capability.NodeDevice
			if err := json.Unmarshal(data, &devs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncodeNodeRegistration(b *testing.B) {
	devs, err := capability.DecodeNodeRegistration(eightGPURegistration(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("validated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := capability.EncodeNodeRegistration(devs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline=json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(devs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkParseDeviceConfig(b *testing.B) {
	yamlDoc, err := capability.EncodeDeviceConfig(capability.DefaultAllowlist(), capability.FormatYAML)
	if err != nil {
		b.Fatal(err)
	}
	jsonDoc, err := capability.EncodeDeviceConfig(capability.DefaultAllowlist(), capability.FormatJSON)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		doc  []byte
	}{{"yaml", yamlDoc}, {"json", jsonDoc}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := capability.ParseDeviceConfig(tc.doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("baseline=json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var doc struct {
				Nvidia struct {
					Allowlist capability.Allowlist `json:"migProfileAllowlist"`
				} `json:"nvidia"`
			}
			if err := json.Unmarshal(jsonDoc, &doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAllowlistMatch matches the last default entry (the worst case
// for first-match) and a name matching nothing.
func BenchmarkAllowlistMatch(b *testing.B) {
	a := capability.DefaultAllowlist()
	for _, name := range []string{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "Tesla T4"} {
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a.Match(name)
			}
		})
	}
}

func BenchmarkDiscover(b *testing.B) {
	for _, n := range []int{1, 8} {
		var hw fakeView
		for range n {
			hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
		}
		policy := capability.DefaultAllowlist()
		b.Run(strconv.Itoa(n)+"GPU", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				hw.calls = hw.calls[:0]
				if _, _, err := capability.Discover(context.Background(), &hw, policy); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
